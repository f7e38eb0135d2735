#!/usr/bin/env bash
# Stops the testbed's dockerd (only the one up.sh started, by its pid file). dockerd stops its containers and its
# containerd on SIGTERM; images and build layers stay in $TB_CACHE/containers/engine for the next up.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
tb_stop containers
