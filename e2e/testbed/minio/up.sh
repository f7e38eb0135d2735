#!/usr/bin/env bash
# Starts the testbed's MinIO (S3 API) on 127.0.0.1:29000 (console address 127.0.0.1:29001, browser off), built from
# source with `go install` from the Go module proxy into $TB_CACHE/minio/<version>/bin, data in $TB_RUN/minio/data.
# Credentials are fixed, so a restart after down.sh (the store-outage test) comes back with the same data and keys.
# Idempotent: when it is already running, only its env fragment is rewritten.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

MINIO_MODULE=github.com/minio/minio
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c   # newest on the module proxy as of 2026-02 (pseudo-version; MinIO tags are not semver)
BIN=$TB_CACHE/minio/$MINIO_VERSION/bin/minio
RUN=$TB_RUN/minio
DATA=$RUN/data
LOG=$TB_LOGS/minio.log
ADDR=127.0.0.1:29000
CONSOLE_ADDR=127.0.0.1:29001
ACCESS_KEY=testbed-admin
SECRET_KEY=testbed-minio-secret-key-0123456789
REGION=us-east-1

write_env() {
  tb_env_reset minio
  tb_env minio TESTBED_MINIO_ENDPOINT "http://$ADDR"
  tb_env minio TESTBED_MINIO_ACCESS_KEY "$ACCESS_KEY"
  tb_env minio TESTBED_MINIO_SECRET_KEY "$SECRET_KEY"
  tb_env minio TESTBED_MINIO_REGION "$REGION"
  tb_env minio TESTBED_MINIO_LOG "$LOG"
  # Tests that take a store down start a MinIO of their own from this binary, so others keep theirs.
  tb_env minio TESTBED_MINIO_BIN "$BIN"
}

if tb_running minio; then
  write_env
  exit 0
fi

for p in 29000 29001; do
  if tb_port_open "$p"; then
    tb_log "minio: port $p on 127.0.0.1 is already taken by a process this testbed did not start (no live pid in $RUN/pid)"
    exit 1
  fi
done

# --- install: one go install per pinned version ---
tb_go_install minio "$MINIO_MODULE@$MINIO_VERSION" minio "$MINIO_VERSION" >/dev/null

# --- start and wait until the S3 API is ready ---
mkdir -p "$DATA" "$RUN/certs"
tb_start minio env MINIO_ROOT_USER="$ACCESS_KEY" MINIO_ROOT_PASSWORD="$SECRET_KEY" MINIO_SITE_REGION="$REGION" \
  MINIO_BROWSER=off MINIO_UPDATE=off MINIO_CALLHOME_ENABLE=off \
  "$BIN" server "$DATA" --address "$ADDR" --console-address "$CONSOLE_ADDR" --certs-dir "$RUN/certs"
if ! tb_wait minio "${TESTBED_MINIO_WAIT:-60}" curl -sf -o /dev/null "http://$ADDR/minio/health/ready"; then
  tb_stop minio
  exit 1
fi
write_env
