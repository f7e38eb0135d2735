#!/usr/bin/env bash
# Starts the testbed's fake-gcs-server (GCS JSON/XML API emulator) on http://127.0.0.1:29443, built with `go install`
# from the Go module proxy into $TB_CACHE/gcs/<version>/bin, objects kept on disk in $TB_RUN/gcs/data.
# -external-url makes resumable-upload Location headers point back at this address.
# Idempotent: when it is already running, only its env fragment is rewritten.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

GCS_MODULE=github.com/fsouza/fake-gcs-server
GCS_VERSION=v1.56.1
BIN=$TB_CACHE/gcs/$GCS_VERSION/bin/fake-gcs-server
RUN=$TB_RUN/gcs
DATA=$RUN/data
LOG=$TB_LOGS/gcs.log
HOST=127.0.0.1
PORT=29443
PROJECT=testbed

write_env() {
  tb_env_reset gcs
  tb_env gcs TESTBED_GCS_ENDPOINT "http://$HOST:$PORT"
  tb_env gcs TESTBED_GCS_PROJECT "$PROJECT"
  tb_env gcs TESTBED_GCS_LOG "$LOG"
}

if tb_running gcs; then
  write_env
  exit 0
fi

if tb_port_open "$PORT"; then
  tb_log "gcs: port $PORT on 127.0.0.1 is already taken by a process this testbed did not start (no live pid in $RUN/pid)"
  exit 1
fi

# --- install: one go install per pinned version ---
tb_go_install gcs "$GCS_MODULE@$GCS_VERSION" fake-gcs-server "$GCS_VERSION" >/dev/null

# --- start and wait until the JSON API answers ---
mkdir -p "$DATA"
tb_start gcs "$BIN" -scheme http -host "$HOST" -port "$PORT" -backend filesystem -filesystem-root "$DATA" \
  -public-host "$HOST:$PORT" -external-url "http://$HOST:$PORT" -log-level info
if ! tb_wait gcs "${TESTBED_GCS_WAIT:-60}" curl -sf -o /dev/null "http://$HOST:$PORT/storage/v1/b"; then
  tb_stop gcs
  exit 1
fi
write_env
