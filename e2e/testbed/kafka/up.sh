#!/usr/bin/env bash
# Starts the testbed's Apache Kafka: one KRaft node (broker + controller) on 127.0.0.1, run from jars resolved from
# Maven Central (pom.xml beside this file) into $TB_CACHE/kafka/<version>/libs.
#   PLAINTEXT       127.0.0.1:29092
#   SASL_PLAINTEXT  127.0.0.1:29093  (SCRAM-SHA-256 and SCRAM-SHA-512; user "testbed", password generated once)
#   CONTROLLER      127.0.0.1:29094
# Idempotent: when it is already running, only its env fragment is rewritten.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KAFKA_VERSION=4.3.2                      # also the default in pom.xml
KAFKA_HOME=$TB_CACHE/kafka/$KAFKA_VERSION
LIBS=$KAFKA_HOME/libs
RUN=$TB_RUN/kafka
DATA=$RUN/data
CONF=$RUN/server.properties
PASSFILE=$RUN/sasl-password
LOG=$TB_LOGS/kafka.log
SASL_USER=testbed
PORTS=(29092 29093 29094)
JAVA=${TESTBED_JAVA:-java}
MAX_BYTES=33554432                       # 32 MiB: room for the 20 MB record test

write_env() {
  tb_env_reset kafka
  tb_env kafka TESTBED_KAFKA_BROKERS 127.0.0.1:29092
  tb_env kafka TESTBED_KAFKA_SASL_BROKERS 127.0.0.1:29093
  tb_env kafka TESTBED_KAFKA_SASL_MECHANISM scram-sha-256
  tb_env kafka TESTBED_KAFKA_SASL_USER "$SASL_USER"
  tb_env kafka TESTBED_KAFKA_SASL_PASSWORD "$(cat "$PASSFILE")"
  tb_env kafka TESTBED_KAFKA_LOG "$LOG"
  tb_env kafka TESTBED_KAFKA_HOME "$LIBS"
}

if tb_running kafka; then
  write_env
  exit 0
fi

for p in "${PORTS[@]}"; do
  if tb_port_open "$p"; then
    tb_log "kafka: port $p on 127.0.0.1 is already taken by a process this testbed did not start (no live pid in $RUN/pid)"
    exit 1
  fi
done

command -v "$JAVA" >/dev/null || { tb_log "kafka: no '$JAVA' on PATH (Java 17+ needed)"; exit 1; }

# --- install: resolve the jars once per Kafka version and pom content ---
pom=$TB_DIR/kafka/pom.xml
stamp="$KAFKA_VERSION $(sha256sum "$pom" | cut -c1-16)"
if [[ ! -f $KAFKA_HOME/.complete || $(cat "$KAFKA_HOME/.complete") != "$stamp" ]]; then
  command -v mvn >/dev/null || { tb_log "kafka: mvn not on PATH, needed to resolve Kafka from Maven Central"; exit 1; }
  tb_log "kafka: resolving Kafka $KAFKA_VERSION jars from Maven Central into $LIBS"
  rm -rf "$KAFKA_HOME.tmp" && mkdir -p "$KAFKA_HOME.tmp"
  if ! mvn -q -B -ntp -Dstyle.color=never -f "$pom" -Dkafka.version="$KAFKA_VERSION" \
    org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$KAFKA_HOME.tmp/libs" >"$KAFKA_HOME.tmp/mvn.log" 2>&1; then
    tb_log "kafka: maven could not resolve the jars:"; cat "$KAFKA_HOME.tmp/mvn.log" >&2; exit 1
  fi
  ls "$KAFKA_HOME.tmp/libs/kafka_2.13-$KAFKA_VERSION.jar" >/dev/null
  echo "$stamp" >"$KAFKA_HOME.tmp/.complete"
  rm -rf "$KAFKA_HOME" && mv "$KAFKA_HOME.tmp" "$KAFKA_HOME"
fi

# --- config (rewritten every start; it only depends on this script) ---
mkdir -p "$RUN"
cat >"$CONF" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:29094
listeners=PLAINTEXT://127.0.0.1:29092,SASL_PLAINTEXT://127.0.0.1:29093,CONTROLLER://127.0.0.1:29094
advertised.listeners=PLAINTEXT://127.0.0.1:29092,SASL_PLAINTEXT://127.0.0.1:29093
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
log.dirs=$DATA
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=false
delete.topic.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=10
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
# After a kill -9 the restarted broker must wait out its old registration session: keep that short.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=4000
message.max.bytes=$MAX_BYTES
replica.fetch.max.bytes=$MAX_BYTES
replica.fetch.response.max.bytes=$MAX_BYTES
socket.request.max.bytes=104857600
num.network.threads=2
num.io.threads=4
log.segment.bytes=268435456
log.retention.hours=168
PROPS

JAVA_OPTS=(-Xms256m -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExplicitGCInvokesConcurrent
  -Djava.awt.headless=true -Dlog4j2.configurationFile="$TB_DIR/kafka/log4j2.properties")

# --- storage: formatted once per data dir, with the SCRAM user created at format time ---
if [[ ! -f $DATA/.testbed-formatted || ! -s $PASSFILE ]]; then
  [[ -s $PASSFILE ]] || { od -An -tx1 -N16 /dev/urandom | tr -d ' \n' >"$PASSFILE"; chmod 600 "$PASSFILE"; }
  pw=$(cat "$PASSFILE")
  cluster_id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
  rm -rf "$DATA" && mkdir -p "$DATA"
  tb_log "kafka: formatting $DATA (cluster id $cluster_id)"
  "$JAVA" "${JAVA_OPTS[@]}" -cp "$LIBS/*" kafka.tools.StorageTool format --cluster-id="$cluster_id" --config="$CONF" \
    --add-scram "SCRAM-SHA-256=[name=$SASL_USER,password=$pw]" \
    --add-scram "SCRAM-SHA-512=[name=$SASL_USER,password=$pw]" >>"$LOG" 2>&1 \
    || { tb_log "kafka: storage format failed; see $LOG"; tail -n 20 "$LOG" >&2; exit 1; }
  touch "$DATA/.testbed-formatted"
fi

# --- start and wait until the broker answers ---
# Ready = a metadata request on PLAINTEXT is answered (request processing is enabled on all listeners together, after
# the metadata image, SCRAM credentials included, has been loaded) and the SASL port accepts connections. kcat asks
# (scripts/packages.txt; scripts/bootstrap installs it); where up runs without it, up waits for the broker's log line.
# kcat is not used for the SASL check itself: Debian's kcat links librdkafka 2.0.2, whose SCRAM client-final nonce bug
# (fixed in librdkafka 2.6.1) makes Kafka 4.x reject it with "invalid credentials"; kafkajs and the Java client are fine.
log_start=$(($(stat -c %s "$LOG" 2>/dev/null || echo 0) + 1))
kafka_ready() {
  tb_port_open 29093 || return 1
  if command -v kcat >/dev/null; then
    kcat -b 127.0.0.1:29092 -L -m 2 -q >/dev/null 2>&1
  else
    tb_port_open 29092 && (($(tail -c "+$log_start" "$LOG" | grep -c 'Kafka Server started') > 0))
  fi
}
tb_start kafka "$JAVA" "${JAVA_OPTS[@]}" -cp "$LIBS/*" kafka.Kafka "$CONF"
if ! tb_wait kafka "${TESTBED_KAFKA_WAIT:-120}" kafka_ready; then
  tb_stop kafka
  exit 1
fi
write_env
