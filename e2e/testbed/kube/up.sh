#!/usr/bin/env bash
# Kubernetes control plane for the e2e tests, all on 127.0.0.1: embedded etcd (kube-etcd, :29379),
# kube-apiserver (:29643, TLS, token auth, RBAC, TokenRequest) and kube-controller-manager (:29657),
# run from one multi-call binary built by ../apiserver/build.sh. No kubelet, scheduler or nodes: pods stay Pending.
# Idempotent: what already runs is kept; the env fragment is rewritten every time.
#
#   TESTBED_KUBE_SKIP_CONTROLLER_MANAGER=1  do not start kube-controller-manager (TESTBED_KUBE_CONTROLLER_MANAGER=0)
#   TESTBED_KUBE_CONTROLLERS=a,b,...        override the controller list
#   TESTBED_KUBE_ETCD_FSYNC=1               let etcd fsync (default off: faster, a testbed loses nothing that matters)
#   TESTBED_KUBE_ETCD_PORT, TESTBED_KUBE_ETCD_PEER_PORT, TESTBED_KUBE_APISERVER_PORT, TESTBED_KUBE_KCM_PORT
#                                           other ports, for a second control plane beside this one (with its own
#                                           DFE_ARCHIVER_CACHE)
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

ETCD_PORT=${TESTBED_KUBE_ETCD_PORT:-29379} ETCD_PEER_PORT=${TESTBED_KUBE_ETCD_PEER_PORT:-29380}
APISERVER_PORT=${TESTBED_KUBE_APISERVER_PORT:-29643}
KCM_PORT=${TESTBED_KUBE_KCM_PORT:-29657}
SERVER=https://127.0.0.1:$APISERVER_PORT
ISSUER=https://kubernetes.default.svc.cluster.local
SERVICE_CIDR=10.96.0.0/16 # only allocated in etcd: nothing routes or listens there
# (--endpoint-reconciler-type none: the default/kubernetes Endpoints may not hold a loopback address)
CONTROLLERS=${TESTBED_KUBE_CONTROLLERS:-garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller,deployment-controller,replicaset-controller,statefulset-controller,job-controller,cronjob-controller,ttl-after-finished-controller,resourcequota-controller}

STATE=$TB_RUN/kube
PKI=$STATE/pki
ETCD_DATA=$TB_RUN/kube-etcd/data

curl_kube() { curl -fsS --max-time 5 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $(cat "$STATE/admin.token")" "$@"; }
etcd_ready() { curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
apiserver_ready() { [[ $(curl_kube "$SERVER/readyz") == ok ]]; }
kcm_healthy() { [[ $(curl -fsS --max-time 2 --cacert "$PKI/ca.crt" "https://127.0.0.1:$KCM_PORT/healthz") == ok ]]; }
# The serviceaccount controller has created the default namespace's ServiceAccount: controllers really run.
kcm_ready() { kcm_healthy && curl_kube "$SERVER/api/v1/namespaces/default/serviceaccounts/default" >/dev/null; }

write_env() {
  tb_env_reset kube
  tb_env kube TESTBED_KUBECONFIG "$STATE/admin.kubeconfig"
  tb_env kube TESTBED_KUBE_SERVER "$SERVER"
  tb_env kube TESTBED_KUBE_CA "$PKI/ca.crt"
  tb_env kube TESTBED_KUBE_ADMIN_TOKEN "$(cat "$STATE/admin.token")"
  tb_env kube TESTBED_KUBE_CONTROLLER_MANAGER "$([[ ${TESTBED_KUBE_SKIP_CONTROLLER_MANAGER:-0} == 1 ]] && echo 0 || echo 1)"
  tb_env kube TESTBED_KEDA_CRDS "$KEDA_CRDS"
  tb_env kube TESTBED_KUBE_LOG "$TB_LOGS"
}

# port_free SVC PORT: fails when PORT is taken by something that is not SVC's recorded process.
port_free() {
  if tb_port_open "$2"; then
    tb_log "$1: 127.0.0.1:$2 is already in use by another process; not starting"
    return 1
  fi
}

kubeconfig() { # kubeconfig USER TOKEN
  cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: testbed
  cluster:
    server: $SERVER
    certificate-authority-data: $(base64 -w0 <"$PKI/ca.crt")
users:
- name: $1
  user:
    token: $2
contexts:
- name: testbed
  context:
    cluster: testbed
    user: $1
    namespace: default
current-context: testbed
EOF
}

# One-time material, each piece made when missing: CA, serving and front-proxy certs, service-account key pair,
# tokens, kubeconfigs. A new CA means everything signed by the old one is made again.
issue_cert() { # issue_cert NAME CN EXTENSIONS...
  local name=$1 cn=$2; shift 2
  [[ -s $name.crt && -s $name.key ]] && return 0
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$cn" \
    -keyout "$name.key" -out "$name.csr" 2>/dev/null
  printf '%s\n' "basicConstraints=CA:FALSE" "$@" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 \
    -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
  chmod 644 "$name.crt"
}

generate() {
  mkdir -p "$PKI"
  (
    cd "$PKI"
    umask 077
    if [[ ! -s ca.crt || ! -s ca.key ]]; then
      tb_log "kube: generating CA, certificates and keys in $PKI"
      rm -f ./*.crt ./*.key ./*.srl
      openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
        -subj "/CN=dfe-archiver-testbed-ca" -keyout ca.key -out ca.crt \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
      chmod 644 ca.crt
    fi
    issue_cert serving kube-apiserver "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" \
      "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    issue_cert front-proxy-client front-proxy-client "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=clientAuth"
    if [[ ! -s sa.key || ! -s sa.pub ]]; then
      openssl genrsa -out sa.key 2048 2>/dev/null
      openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
      chmod 644 sa.pub
    fi
  )
  if [[ ! -s $STATE/tokens.csv || ! -s $STATE/admin.token ]]; then
    local admin kcm
    admin=$(openssl rand -hex 24) kcm=$(openssl rand -hex 24)
    (umask 077; printf '%s\n' "$admin" >"$STATE/admin.token")
    # token,user,uid,"group1,group2"
    (umask 077; printf '%s,testbed-admin,testbed-admin,"system:masters"\n%s,system:kube-controller-manager,system:kube-controller-manager\n' \
      "$admin" "$kcm" >"$STATE/tokens.csv")
  fi
  # Rewritten every time (cheap): they follow the current CA and tokens.
  local admin kcm
  admin=$(cat "$STATE/admin.token")
  kcm=$(awk -F, '$2 == "system:kube-controller-manager" { print $1 }' "$STATE/tokens.csv")
  (umask 077; kubeconfig testbed-admin "$admin" >"$STATE/admin.kubeconfig")
  (umask 077; kubeconfig system:kube-controller-manager "$kcm" >"$STATE/kube-controller-manager.kubeconfig")
}

start_etcd() {
  tb_running kube-etcd && return 0
  port_free kube-etcd "$ETCD_PORT"
  port_free kube-etcd "$ETCD_PEER_PORT"
  mkdir -p -m 700 "$ETCD_DATA"
  local fsync=()
  [[ ${TESTBED_KUBE_ETCD_FSYNC:-0} == 1 ]] || fsync=(--unsafe-no-fsync)
  tb_start kube-etcd "$BIN" etcd --name testbed --data-dir "$ETCD_DATA" "${fsync[@]}" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT"
  tb_wait kube-etcd 30 etcd_ready
}

start_apiserver() {
  tb_running kube-apiserver && return 0
  port_free kube-apiserver "$APISERVER_PORT"
  tb_start kube-apiserver "$BIN" kube-apiserver \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$APISERVER_PORT" \
    --tls-cert-file "$PKI/serving.crt" --tls-private-key-file "$PKI/serving.key" \
    --client-ca-file "$PKI/ca.crt" \
    --requestheader-client-ca-file "$PKI/ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --token-auth-file "$STATE/tokens.csv" \
    --authorization-mode Node,RBAC \
    --service-account-issuer "$ISSUER" --api-audiences "$ISSUER" \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --endpoint-reconciler-type none \
    --allow-privileged=true --profiling=false \
    --event-ttl 15m
  tb_wait kube-apiserver 90 apiserver_ready
}

start_controller_manager() {
  tb_running kube-controller-manager && return 0
  port_free kube-controller-manager "$KCM_PORT"
  local kc=$STATE/kube-controller-manager.kubeconfig
  tb_start kube-controller-manager "$BIN" kube-controller-manager \
    --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
    --tls-cert-file "$PKI/serving.crt" --tls-private-key-file "$PKI/serving.key" \
    --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --controllers "$CONTROLLERS" --profiling=false
  tb_wait kube-controller-manager 90 kcm_ready
}

KEDA_CRDS=$(bash "$TB_DIR/keda/crds.sh")

if tb_running kube-etcd && tb_running kube-apiserver &&
   { [[ ${TESTBED_KUBE_SKIP_CONTROLLER_MANAGER:-0} == 1 ]] || tb_running kube-controller-manager; } &&
   [[ -s $STATE/admin.token && -s $PKI/ca.crt ]]; then
  tb_log "kube: already running"
  write_env
  exit 0
fi

start=$SECONDS
BIN=$(bash "$TB_DIR/apiserver/build.sh")
generate

if ! start_etcd; then
  # Unreadable data (say, left by a crash): start over with an empty store once.
  if [[ -d $ETCD_DATA ]] && [[ -n $(ls -A "$ETCD_DATA") ]]; then
    tb_log "kube-etcd: failed on existing data; moving it to $ETCD_DATA.broken and retrying"
    tb_stop kube-etcd
    rm -rf "$ETCD_DATA.broken"
    mv "$ETCD_DATA" "$ETCD_DATA.broken"
    start_etcd
  else
    exit 1
  fi
fi
start_apiserver
if [[ ${TESTBED_KUBE_SKIP_CONTROLLER_MANAGER:-0} != 1 ]]; then
  start_controller_manager
fi
write_env
tb_log "kube: ready at $SERVER in $((SECONDS - start))s (kubeconfig: $STATE/admin.kubeconfig)"
