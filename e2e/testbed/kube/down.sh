#!/usr/bin/env bash
# Stops what kube/up.sh started (by pid file only). Keeps etcd's data, certificates and tokens unless asked:
#   down.sh --wipe      (or TESTBED_KUBE_WIPE=1)      also delete the etcd data: the next up starts an empty cluster
#   down.sh --wipe-all  (or TESTBED_KUBE_WIPE=all)    also delete certificates, tokens and kubeconfigs
# TESTBED_KUBE_NAME names a second control plane, as for up.sh.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
NAME=${TESTBED_KUBE_NAME:-kube}

wipe=${TESTBED_KUBE_WIPE:-0}
for arg in "$@"; do
  case $arg in
    --wipe) wipe=1 ;;
    --wipe-all) wipe=all ;;
    *) tb_log "kube down: unknown argument $arg (use --wipe or --wipe-all)"; exit 2 ;;
  esac
done

tb_stop "$NAME-controller-manager"
tb_stop "$NAME-apiserver"
tb_stop "$NAME-etcd"

case $wipe in
  1 | all)
    tb_log "$NAME: wiping etcd data"
    rm -rf "$TB_RUN/$NAME-etcd/data" "$TB_RUN/$NAME-etcd/data.broken"
    ;;
esac
if [[ $wipe == all ]]; then
  tb_log "$NAME: wiping certificates, tokens and kubeconfigs"
  rm -rf "${TB_RUN:?}/$NAME"
fi
