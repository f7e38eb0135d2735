#!/usr/bin/env bash
# A Kubernetes cluster of the testbed's own, whose pods really run: `e2e/testbed/up cluster` (not in the default set;
# it brings `containers` up first, for the engine, the kubelet and the pause image). No image registry: every binary
# comes from the Go module proxy, every package from Debian, and the images are made here.
#   - control plane: a second kube/up.sh (etcd, kube-apiserver, kube-controller-manager with every default
#     controller) named cluster-kube, on ports of its own and listening on the pod network's gateway, so pods reach it
#     through the kubernetes Service; kube-scheduler. The shared testbed's apiserver is never touched: other tests use it.
#   - one node: Debian's containerd (CRI) and runc, the kubelet registered as system:node:$NODE, kube-proxy in iptables
#     mode, Debian's CNI plugins on a bridge of its own ($BRIDGE, $POD_CIDR; its gateway $ADDRESS is also the node's
#     address and where pods reach the host's servers), and CoreDNS as a Deployment (cluster.local, at $DNS_IP).
#   - images in the node's containerd: pause (containers/up.sh), CoreDNS, and KEDA's operator and metrics apiserver
#     (keda/build.sh), each one static binary made into an image by the testbed's engine, then imported; tests import
#     their own the same way and run them with imagePullPolicy IfNotPresent or Never.
# kube-scheduler, kube-proxy and kubectl are built from the k8s.io/kubernetes module the apiserver pins; crictl and
# CoreDNS with `go install`. All cached under $TB_CACHE/cluster (containerd's image store too); state under
# $TB_RUN/cluster. Idempotent: what runs is kept, what is missing is started. cluster/down.sh removes the pods, the
# node's network and kube-proxy's iptables rules, and the cluster's etcd data.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=../keda/module.sh
source "$TB_DIR/keda/module.sh"

BRIDGE=dfe-cluster0
ADDRESS=10.246.0.1
POD_CIDR=10.246.0.0/24
SERVICE_CIDR=10.97.0.0/16 # beside the shared testbed's 10.96.0.0/16; kube-proxy routes only this one
DNS_IP=10.97.0.10
NODE=dfe-cluster
CGROUP_ROOT=dfe-cluster
KUBELET_PORT=29750 KUBELET_HEALTHZ_PORT=29748 SCHEDULER_PORT=29759 PROXY_HEALTHZ_PORT=29756 PROXY_METRICS_PORT=29749
CRICTL_VERSION=v1.37.0
COREDNS_VERSION=v1.15.0
DIR=$TB_CACHE/cluster
RUN=$TB_RUN/cluster
SOCK=$RUN/containerd.sock
CTR=/usr/bin/ctr

# The control plane, through kube/up.sh (its state in $TB_RUN/cluster-kube).
export TESTBED_KUBE_NAME=cluster-kube TESTBED_KUBE_ADDRESS=$ADDRESS TESTBED_KUBE_SERVICE_CIDR=$SERVICE_CIDR
export TESTBED_KUBE_ETCD_PORT=29479 TESTBED_KUBE_ETCD_PEER_PORT=29480 TESTBED_KUBE_APISERVER_PORT=29743
export TESTBED_KUBE_KCM_PORT=29757 TESTBED_KUBE_CONTROLLERS='*'
export TESTBED_KUBE_USERS="kube-scheduler=system:kube-scheduler kube-proxy=system:kube-proxy kubelet=system:node:$NODE@system:nodes"
KSTATE=$TB_RUN/$TESTBED_KUBE_NAME

# --- the engine, the kubelet and the pause image ---
bash "$TB_DIR/containers/up.sh" || exit 1
# shellcheck source=/dev/null
source "$TB_RUN/containers/env"
DOCKER=("$TESTBED_DOCKER" -H "$TESTBED_DOCKER_HOST")

# --- builds, each once ---
BIN=$DIR/$(tb_k8s_version)/bin
tb_k8s_build cluster "$BIN" kube-scheduler kube-proxy kubectl || exit 1
KUBECTL=("$BIN/kubectl" --kubeconfig "$KSTATE/admin.kubeconfig")
CRICTL=$(tb_go_install crictl "sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION" crictl "$CRICTL_VERSION") || exit 1
COREDNS=$(tb_go_install coredns "github.com/coredns/coredns@$COREDNS_VERSION" coredns "$COREDNS_VERSION") || exit 1
KEDA_BIN=$(bash "$TB_DIR/keda/build.sh") || exit 1
KEDA_SRC=$(keda_source) || exit 1
KEDA_TAG=${KEDA_VERSION#v}

# static_image NAME BINARY ENTRYPOINT: an image of one static binary, laid out as distroless/static's (root, nobody
# and nonroot 65532 in /etc/passwd, /tmp; no CA bundle: nothing in this cluster leaves it over TLS), run as nonroot,
# made by the engine unless the image there came from the same binary.
static_image() {
  local name=$1 bin=$2 entry=$3 key root
  key=$(sha256sum "$bin" | cut -c1-16)
  [[ $("${DOCKER[@]}" image inspect -f '{{index .Config.Labels "org.dfe-archiver.testbed.base"}}' "$name" \
    2>/dev/null) != "$key" ]] || return 0
  tb_log "cluster: making $name from $bin"
  root=$DIR/image.root
  rm -rf "$root" && mkdir -p "$root/etc" "$root/tmp" && chmod 1777 "$root/tmp" && cp "$bin" "$root/"
  printf '%s\n' root:x:0:0:root:/root:/sbin/nologin nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin \
    nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin >"$root/etc/passwd"
  printf '%s\n' root:x:0: nobody:x:65534: nonroot:x:65532: >"$root/etc/group"
  tar -C "$root" -c . | "${DOCKER[@]}" import --change "ENTRYPOINT $entry" --change 'USER 65532:65532' \
    --change "LABEL org.dfe-archiver.testbed.base=$key" - "$name" >/dev/null
  rm -rf "$root"
}
COREDNS_IMAGE=registry.k8s.io/coredns/coredns:$COREDNS_VERSION
static_image "$COREDNS_IMAGE" "$COREDNS" '["/coredns"]'
# The names and entry points of KEDA's own images (its Dockerfile and Dockerfile.adapter).
static_image "ghcr.io/kedacore/keda:$KEDA_TAG" "$KEDA_BIN/keda" \
  '["/keda", "--zap-log-level=info", "--zap-encoder=console"]'
static_image "ghcr.io/kedacore/keda-metrics-apiserver:$KEDA_TAG" "$KEDA_BIN/keda-adapter" \
  '["/keda-adapter", "--secure-port=6443", "--zap-log-level=info", "--zap-encoder=console"]'
IMAGES=("$TESTBED_PAUSE_IMAGE" "$COREDNS_IMAGE" "ghcr.io/kedacore/keda:$KEDA_TAG"
  "ghcr.io/kedacore/keda-metrics-apiserver:$KEDA_TAG")

# --- the pod network's bridge: the apiserver listens on its gateway address, so it comes first ---
mkdir -p "$RUN/cni" "$DIR"
ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
ip addr replace "$ADDRESS/${POD_CIDR#*/}" dev "$BRIDGE"
ip link set "$BRIDGE" up
# The bridge for pods, with the firewall plugin's per-pod ACCEPT rules: this machine's FORWARD policy is DROP (a
# Docker engine set it), and with br_netfilter bridged traffic between pods passes through FORWARD too.
cat >"$RUN/cni/10-dfe-cluster.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "dfe-cluster",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isDefaultGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_CIDR", "gateway": "$ADDRESS" }]],
        "dataDir": "$RUN/ipam"
      }
    },
    { "type": "firewall", "backend": "iptables" }
  ]
}
EOF

# --- the control plane ---
bash "$TB_DIR/kube/up.sh" || exit 1
scheduler_ready() {
  [[ $(curl -fsS --max-time 2 --cacert "$KSTATE/pki/ca.crt" "https://127.0.0.1:$SCHEDULER_PORT/healthz") == ok ]]
}
if ! tb_running cluster-scheduler; then
  kc=$KSTATE/kube-scheduler.kubeconfig
  tb_start cluster-scheduler "$BIN/kube-scheduler" --kubeconfig "$kc" --authentication-kubeconfig "$kc" \
    --authorization-kubeconfig "$kc" --bind-address 127.0.0.1 --secure-port "$SCHEDULER_PORT" \
    --tls-cert-file "$KSTATE/pki/serving.crt" --tls-private-key-file "$KSTATE/pki/serving.key" --leader-elect=false
  tb_wait cluster-scheduler 60 scheduler_ready || exit 1
fi

# --- the node: containerd, the kubelet, kube-proxy ---
cat >"$RUN/containerd.toml" <<EOF
version = 2
root = "$DIR/containerd"
state = "$RUN/containerd"
[grpc]
  address = "$SOCK"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$TESTBED_PAUSE_IMAGE"
  # Root lacks CAP_SYS_RESOURCE in this VM: a sandbox's oom_score_adj below containerd's own fails in runc ("can't
  # get final child's PID from pipe: EOF"); this clamps it instead (as e2e/containers/node.e2e.ts).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$TESTBED_CNI_BIN_DIR"
    conf_dir = "$RUN/cni"
EOF
ctr() { "$CTR" --address "$SOCK" --namespace k8s.io "$@"; }
if ! tb_running cluster-containerd; then
  tb_start cluster-containerd "$TESTBED_CONTAINERD" --config "$RUN/containerd.toml"
  tb_wait cluster-containerd 30 ctr version || exit 1
fi
# The images, from the engine; containerd keeps them in $DIR/containerd, so each goes in once per image id.
for image in "${IMAGES[@]}"; do
  id=$("${DOCKER[@]}" image inspect -f '{{.Id}}' "$image")
  stamp=$DIR/imported/${image//[\/:]/_}
  [[ -n $(ctr images ls -q "name==$image") && $(cat "$stamp" 2>/dev/null) == "$id" ]] && continue
  tb_log "cluster: importing $image into the node's containerd"
  "${DOCKER[@]}" save "$image" | ctr images import - >/dev/null || { tb_log "cluster: import of $image failed"; exit 1; }
  mkdir -p "$DIR/imported" && echo "$id" >"$stamp"
done

cat >"$RUN/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This VM's cgroups are v1, which Kubernetes 1.35 and later refuse unless told not to.
failCgroupV1: false
cgroupDriver: cgroupfs
# Its own cgroup subtree: e2e/containers/node.e2e.ts may run another kubelet on this machine.
cgroupRoot: /$CGROUP_ROOT
containerRuntimeEndpoint: unix://$SOCK
podLogsDir: $RUN/pods
address: $ADDRESS
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: true }
  x509: { clientCAFile: $KSTATE/pki/ca.crt }
authorization: { mode: Webhook }
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
failSwapOn: false
# A shared machine's disk and memory: the kubelet evicts nothing and collects no image here.
evictionHard: { memory.available: 1Mi, nodefs.available: "0%", imagefs.available: "0%" }
imageGCHighThresholdPercent: 100
EOF
kubelet_healthy() { [[ $(curl -fsS --max-time 2 "http://127.0.0.1:$KUBELET_HEALTHZ_PORT/healthz") == ok ]]; }
node_ready() {
  [[ $("${KUBECTL[@]}" get node "$NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}') == True ]]
}
if ! tb_running cluster-kubelet; then
  mkdir -p "$RUN/kubelet" "$RUN/pods"
  # The kubelet refuses a cgroupRoot that does not exist: made in every cgroup hierarchy, with cpuset's CPUs and
  # memory nodes (empty in a new cgroup v1 cpuset, where no task could run) copied from its parent's.
  for mount in $(awk '$3 == "cgroup" || $3 == "cgroup2" { print $2 }' /proc/mounts); do
    mkdir -p "$mount/$CGROUP_ROOT"
    for f in cpuset.cpus cpuset.mems; do
      if [[ -f $mount/$f && -z $(<"$mount/$CGROUP_ROOT/$f") ]]; then cat "$mount/$f" >"$mount/$CGROUP_ROOT/$f"; fi
    done
  done
  tb_start cluster-kubelet "$TESTBED_KUBELET" --config "$RUN/kubelet.yaml" --kubeconfig "$KSTATE/kubelet.kubeconfig" \
    --root-dir "$RUN/kubelet" --hostname-override "$NODE" --node-ip "$ADDRESS"
  tb_wait cluster-kubelet 60 kubelet_healthy || exit 1
fi
tb_wait cluster-kubelet 90 node_ready || exit 1

cat >"$RUN/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: { kubeconfig: $KSTATE/kube-proxy.kubeconfig }
hostnameOverride: $NODE
mode: iptables
clusterCIDR: $POD_CIDR
# NodePorts only on the node's own address, never the machine's.
nodePortAddresses: [$ADDRESS/32]
healthzBindAddress: 127.0.0.1:$PROXY_HEALTHZ_PORT
metricsBindAddress: 127.0.0.1:$PROXY_METRICS_PORT
# The machine's conntrack settings are left as they are (0: unchanged).
conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s }
EOF
proxy_healthy() { curl -fsS --max-time 2 "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz" >/dev/null; }
if ! tb_running cluster-proxy; then
  tb_start cluster-proxy "$BIN/kube-proxy" --config "$RUN/kube-proxy.yaml"
  tb_wait cluster-proxy 60 proxy_healthy || exit 1
fi

# --- cluster DNS ---
sed -e "s|@DNS_IP@|$DNS_IP|" -e "s|@COREDNS_IMAGE@|$COREDNS_IMAGE|" "$TB_DIR/cluster/coredns.yaml" |
  "${KUBECTL[@]}" apply --server-side --field-manager dfe-testbed -f - >/dev/null
"${KUBECTL[@]}" -n kube-system rollout status deployment/coredns --timeout=120s >&2 || exit 1

tb_env_reset cluster
tb_env cluster TESTBED_CLUSTER_KUBECONFIG "$KSTATE/admin.kubeconfig"
tb_env cluster TESTBED_CLUSTER_KUBECTL "$BIN/kubectl"
tb_env cluster TESTBED_CLUSTER_CRICTL "$CRICTL"
tb_env cluster TESTBED_CLUSTER_CONTAINERD "$SOCK"
tb_env cluster TESTBED_CLUSTER_NODE "$NODE"
tb_env cluster TESTBED_CLUSTER_ADDRESS "$ADDRESS"
tb_env cluster TESTBED_CLUSTER_POD_LOGS "$RUN/pods"
tb_env cluster TESTBED_CLUSTER_KEDA_CONFIG "$KEDA_SRC/config"
tb_env cluster TESTBED_CLUSTER_KEDA_TAG "$KEDA_TAG"
tb_log "cluster: node $NODE ready; kubeconfig $KSTATE/admin.kubeconfig"
