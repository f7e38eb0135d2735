#!/usr/bin/env bash
# Stops the testbed's fake-gcs-server (only the process up.sh started, by its pid file). Data is kept.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_stop gcs
