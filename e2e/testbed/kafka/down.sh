#!/usr/bin/env bash
# Stops the testbed's Kafka (only the process up.sh started, by its pid file). Data and SCRAM password are kept.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_stop kafka
