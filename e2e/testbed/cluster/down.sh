#!/usr/bin/env bash
# Stops the testbed's cluster (cluster/up.sh), only what it started: the kubelet first (it would restart pods), then
# every pod through crictl (CNI DEL gives back each pod's address, iptables rules and network namespace), kube-proxy
# and its iptables rules, containerd, the scheduler, the node's bridge and cgroups, and its control plane, whose etcd
# data goes with it: the next up starts an empty cluster. Images stay in containerd's store, builds in the cache. The
# CNI firewall plugin's two base chains (CNI-FORWARD, CNI-ADMIN; empty once the pods are gone) stay, as the plugin
# leaves them, for the next up.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

BRIDGE=dfe-cluster0
CGROUP_ROOT=dfe-cluster
RUN=$TB_RUN/cluster
SOCK=$RUN/containerd.sock

tb_stop cluster-kubelet
if tb_running cluster-containerd && [[ -s $RUN/env ]]; then
  crictl=$(sed -n 's/^TESTBED_CLUSTER_CRICTL=//p' "$RUN/env")
  "$crictl" --runtime-endpoint "unix://$SOCK" rmp --all --force >/dev/null ||
    tb_log "cluster: crictl rmp --all failed; pods may be left in containerd"
fi
tb_stop cluster-proxy
proxy=$TB_CACHE/cluster/$(tb_k8s_version)/bin/kube-proxy
if [[ -x $proxy ]]; then
  "$proxy" --cleanup >/dev/null 2>&1 || tb_log "cluster: kube-proxy --cleanup failed; its iptables rules may be left"
fi
tb_stop cluster-containerd
tb_stop cluster-scheduler
# The kubelet mounts its root directory onto itself (shared) and each pod's volumes under it.
if [[ -d $RUN/kubelet ]]; then umount --recursive "$RUN/kubelet" 2>/dev/null || true; fi
if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
# The kubelet's cgroups (up.sh made their root), deepest first: only empty ones go.
for mount in $(awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/mounts); do
  [[ ! -d $mount/$CGROUP_ROOT ]] || find "$mount/$CGROUP_ROOT" -depth -type d -exec rmdir {} + 2>/dev/null || true
done
TESTBED_KUBE_NAME=cluster-kube bash "$TB_DIR/kube/down.sh" --wipe
