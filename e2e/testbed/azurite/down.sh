#!/usr/bin/env bash
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
tb_stop azurite
