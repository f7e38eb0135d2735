#!/usr/bin/env bash
# Runs one of Kafka's own CLI classes against the testbed's jars (resolved by up.sh), e.g.
#   e2e/testbed/kafka/kafka-tool.sh org.apache.kafka.tools.TopicCommand --bootstrap-server 127.0.0.1:29092 --list
#   e2e/testbed/kafka/kafka-tool.sh org.apache.kafka.tools.consumer.group.ConsumerGroupCommand --bootstrap-server ... --describe --all-groups
# For the SASL listener pass --command-config FILE with security.protocol=SASL_PLAINTEXT, sasl.mechanism and sasl.jaas.config.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=$(sed -n 's/^KAFKA_VERSION=\([^ ]*\).*/\1/p' "$here/up.sh")
cache=${DFE_ARCHIVER_CACHE:-$HOME/.cache/dfe-archiver}/testbed
libs=${TESTBED_KAFKA_HOME:-$cache/kafka/$version/libs}
[[ -d $libs ]] || { echo "kafka-tool: no Kafka jars in $libs; run e2e/testbed/kafka/up.sh first" >&2; exit 1; }
(($# >= 1)) || { echo "usage: kafka-tool.sh CLASS [ARGS...]" >&2; exit 2; }
exec "${TESTBED_JAVA:-java}" -Xmx256m -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
  -Dlog4j2.configurationFile="$here/tools-log4j2.properties" -cp "$libs/*" "$@"
