#!/usr/bin/env bash
# The peers bench/peer.bench.ts runs beside the runtime: `e2e/testbed/up peers` (not in the default set: the cold
# build takes minutes). Nothing runs here; the bench starts each peer with its own config.
#   - otelcol/: the OpenTelemetry Collector with the Kafka receiver, the transform and batch processors, and the file
#     and S3 exporters, every module pinned in its go.mod at one release (core v0.165.0 / v1.71.0, contrib v0.165.0:
#     awss3exporter has no other version on the Go module proxy here).
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

otelcol=$(tb_go_build peers "$TB_DIR/peers/otelcol" otelcol)

tb_env_reset peers
tb_env peers TESTBED_OTELCOL "$otelcol"
