#!/usr/bin/env bash
# Stops the testbed's MinIO (only the process up.sh started, by its pid file). Data is kept: up.sh brings it back as it was.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_stop minio
