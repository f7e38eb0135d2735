#!/usr/bin/env bash
# Azurite's blob service, from the project's own devDependency, on the project's Node 24.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
repo=$(cd "$TB_DIR/../.." && pwd)
port=29100
account=devstoreaccount1
# Azurite's fixed, public development-account key (documented by Microsoft; not a secret).
key='Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
tb_env_reset azurite
tb_env azurite TESTBED_AZURITE_BLOB_ENDPOINT "http://127.0.0.1:$port/$account"
tb_env azurite TESTBED_AZURITE_ACCOUNT "$account"
tb_env azurite TESTBED_AZURITE_KEY "$key"
tb_env azurite TESTBED_AZURITE_LOG "$TB_LOGS/azurite.log"
if tb_running azurite; then exit 0; fi
bin=$repo/node_modules/.bin/azurite-blob
[[ -x $bin ]] || { tb_log "azurite: $bin missing: run npm ci first"; exit 1; }
mkdir -p "$TB_RUN/azurite/data"
tb_start azurite "$repo/node_modules/.bin/node" "$(readlink -f "$bin")" \
  --blobHost 127.0.0.1 --blobPort "$port" --location "$TB_RUN/azurite/data" \
  --disableTelemetry --skipApiVersionCheck --silent
tb_wait azurite 60 tb_port_open "$port"
