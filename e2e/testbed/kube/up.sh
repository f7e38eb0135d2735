#!/usr/bin/env bash
# Kubernetes control plane for the e2e tests, all on 127.0.0.1: embedded etcd (kube-etcd, :29379),
# kube-apiserver (:29643, TLS, token auth, RBAC, TokenRequest) and kube-controller-manager (:29657),
# run from one multi-call binary built by ../apiserver/build.sh. No kubelet, scheduler or nodes: pods stay Pending.
# Idempotent: what already runs is kept; the env fragment is rewritten every time.
#
# A second control plane of the same kind (e2e/testbed/cluster/up.sh runs one for a node of its own) takes these,
# with ports of its own:
#   TESTBED_KUBE_NAME=NAME                  its services NAME-etcd, NAME-apiserver, NAME-controller-manager, state
#                                           under $TB_RUN/NAME (default kube: the shared testbed's)
#   TESTBED_KUBE_ADDRESS=IP                 where the apiserver listens and what it advertises (default 127.0.0.1);
#                                           another address runs the endpoint reconciler, so that the default/
#                                           kubernetes Service leads to it from pods
#   TESTBED_KUBE_SERVICE_CIDR=CIDR          Service ClusterIPs (default 10.96.0.0/16); its first address is in the
#                                           serving certificate, as the kubernetes Service's
#   TESTBED_KUBE_USERS="FILE=USER[@GROUP,...] ..."
#                                           more identities, each with a token and $TB_RUN/NAME/FILE.kubeconfig
#                                           (a scheduler's, a kubelet's, a kube-proxy's)
#
#   TESTBED_KUBE_SKIP_CONTROLLER_MANAGER=1  do not start kube-controller-manager (TESTBED_KUBE_CONTROLLER_MANAGER=0)
#   TESTBED_KUBE_CONTROLLERS=a,b,...        override the controller list
#   TESTBED_KUBE_ETCD_FSYNC=1               let etcd fsync (default off: faster, a testbed loses nothing that matters)
#   TESTBED_KUBE_ETCD_PORT, TESTBED_KUBE_ETCD_PEER_PORT, TESTBED_KUBE_APISERVER_PORT, TESTBED_KUBE_KCM_PORT
#                                           other ports, for a second control plane beside this one (with its own
#                                           DFE_ARCHIVER_CACHE)
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

NAME=${TESTBED_KUBE_NAME:-kube}
ADDRESS=${TESTBED_KUBE_ADDRESS:-127.0.0.1}
read -r -a USERS <<<"${TESTBED_KUBE_USERS:-}"
ETCD_PORT=${TESTBED_KUBE_ETCD_PORT:-29379} ETCD_PEER_PORT=${TESTBED_KUBE_ETCD_PEER_PORT:-29380}
APISERVER_PORT=${TESTBED_KUBE_APISERVER_PORT:-29643}
KCM_PORT=${TESTBED_KUBE_KCM_PORT:-29657}
SERVER=https://$ADDRESS:$APISERVER_PORT
ISSUER=https://kubernetes.default.svc.cluster.local
# The shared testbed's is only allocated in etcd: nothing routes or listens there.
SERVICE_CIDR=${TESTBED_KUBE_SERVICE_CIDR:-10.96.0.0/16}
[[ $SERVICE_CIDR =~ ^([0-9]+\.[0-9]+\.[0-9]+)\.0/[0-9]+$ ]] ||
  { tb_log "$NAME: TESTBED_KUBE_SERVICE_CIDR=$SERVICE_CIDR: expected a.b.c.0/N"; exit 2; }
SERVICE_IP=${BASH_REMATCH[1]}.1
# The default/kubernetes Endpoints may not hold a loopback address: on 127.0.0.1 the reconciler is off.
RECONCILER=lease
[[ $ADDRESS != 127.* ]] || RECONCILER=none
CONTROLLERS=${TESTBED_KUBE_CONTROLLERS:-garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller,clusterrole-aggregation-controller,deployment-controller,replicaset-controller,statefulset-controller,job-controller,cronjob-controller,ttl-after-finished-controller,resourcequota-controller}

STATE=$TB_RUN/$NAME
PKI=$STATE/pki
ETCD_DATA=$TB_RUN/$NAME-etcd/data

curl_kube() { curl -fsS --max-time 5 --cacert "$PKI/ca.crt" -H "Authorization: Bearer $(cat "$STATE/admin.token")" "$@"; }
etcd_ready() { curl -fsS --max-time 2 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
apiserver_ready() { [[ $(curl_kube "$SERVER/readyz") == ok ]]; }
kcm_healthy() { [[ $(curl -fsS --max-time 2 --cacert "$PKI/ca.crt" "https://127.0.0.1:$KCM_PORT/healthz") == ok ]]; }
# The serviceaccount controller has created the default namespace's ServiceAccount: controllers really run.
kcm_ready() { kcm_healthy && curl_kube "$SERVER/api/v1/namespaces/default/serviceaccounts/default" >/dev/null; }

write_env() {
  tb_env_reset "$NAME"
  tb_env "$NAME" TESTBED_KUBECONFIG "$STATE/admin.kubeconfig"
  tb_env "$NAME" TESTBED_KUBE_SERVER "$SERVER"
  tb_env "$NAME" TESTBED_KUBE_CA "$PKI/ca.crt"
  tb_env "$NAME" TESTBED_KUBE_ADMIN_TOKEN "$(cat "$STATE/admin.token")"
  tb_env "$NAME" TESTBED_KUBE_CONTROLLER_MANAGER "$([[ ${TESTBED_KUBE_SKIP_CONTROLLER_MANAGER:-0} == 1 ]] && echo 0 || echo 1)"
  tb_env "$NAME" TESTBED_KEDA_CRDS "$KEDA_CRDS"
  tb_env "$NAME" TESTBED_KUBE_LOG "$TB_LOGS"
}

# port_free SVC PORT [HOST]: fails when PORT is taken by something that is not SVC's recorded process.
port_free() {
  if tb_port_open "$2" "${3:-127.0.0.1}"; then
    tb_log "$1: ${3:-127.0.0.1}:$2 is already in use by another process; not starting"
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

# One-time material, each piece checked at every start and made again when missing or broken: CA, serving and
# front-proxy certs, service-account key pair, tokens, kubeconfigs. A new CA means everything signed by the old one is
# made again. Each file is written whole (temp file, then rename); a pair cut in half by a crash, or by two starts at
# once before up took a lock, is a key that does not match its certificate: both are remade. Sets $remade when any
# piece the servers load was made again. The checks take 0.25 s (nine openssl runs), so they run only when a file
# differs from what the last check passed (the hashes in $CHECKED, with the server address the kubeconfigs name).
remade=0
CHECKED=$STATE/checked.sha256
MATERIAL=("$PKI"/{ca,serving,front-proxy-client}.{crt,key} "$PKI"/sa.{key,pub}
  "$STATE"/{admin.token,tokens.csv,admin.kubeconfig,kube-controller-manager.kubeconfig})
for u in "${USERS[@]}"; do MATERIAL+=("$STATE/${u%%=*}.kubeconfig"); done
KUBELET_CLIENT=()
if [[ $ADDRESS != 127.* ]]; then
  MATERIAL+=("$PKI"/kubelet-client.{crt,key})
  # A node's name (--hostname-override) resolves nowhere: its InternalIP is where its kubelet listens.
  KUBELET_CLIENT=(--kubelet-client-certificate "$PKI/kubelet-client.crt" --kubelet-client-key "$PKI/kubelet-client.key"
    --kubelet-preferred-address-types InternalIP,Hostname)
fi
checked() { { echo "$SERVER"; sha256sum "${MATERIAL[@]}" 2>/dev/null; } || true; }

# pair_ok PATH [CA]: PATH.key is the key of PATH.crt and, with CA given, CA signed PATH.crt and it has not expired.
pair_ok() {
  local cert_pub key_pub
  [[ -s $1.crt && -s $1.key ]] || return 1
  cert_pub=$(openssl x509 -noout -pubkey -in "$1.crt" 2>/dev/null) || return 1
  key_pub=$(openssl pkey -pubout -in "$1.key" 2>/dev/null) || return 1
  [[ $cert_pub == "$key_pub" ]] || return 1
  [[ -z ${2:-} ]] || openssl verify -CAfile "$2" "$1.crt" >/dev/null 2>&1
}

# sans_ok PATH SUBJECT_ALT_NAME: PATH.crt names exactly these (as written to openssl: IP:a,DNS:b,...), so that
# another TESTBED_KUBE_ADDRESS or Service CIDR issues the serving certificate again.
sans_ok() {
  local have
  have=$(openssl x509 -noout -ext subjectAltName -in "$1.crt" 2>/dev/null | tail -n +2 | tr -d ' ') || return 1
  [[ $have == "${2//IP:/IPAddress:}" ]]
}

# made PATH WHAT: renames each PATH.*.tmp written over its final name, and says so.
made() {
  local f
  for f in "$1".*.tmp; do mv -f "$f" "${f%.tmp}"; done
  tb_log "$NAME: made $2 in $PKI"
  remade=1
}

issue_cert() { # issue_cert NAME CN EXTENSIONS... (CN may go on with /O=GROUP)
  local name=$PKI/$1 cn=$2 ext sans=; shift 2
  for ext in "$@"; do [[ $ext != subjectAltName=* ]] || sans=${ext#*=}; done
  pair_ok "$name" "$PKI/ca.crt" && { [[ -z $sans ]] || sans_ok "$name" "$sans"; } && return 0
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$cn" \
    -keyout "$name.key.tmp" -out "$name.csr" 2>/dev/null
  printf '%s\n' "basicConstraints=CA:FALSE" "$@" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial -days 3650 \
    -extfile "$name.ext" -out "$name.crt.tmp" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
  chmod 644 "$name.crt.tmp"
  made "$name" "the ${name##*/} certificate and key"
}

generate() {
  local mask admin kcm u file user groups token address_san=
  [[ -s $CHECKED && $(checked) == "$(<"$CHECKED")" ]] && return 0
  mkdir -p "$PKI"
  mask=$(umask)
  umask 077
  if ! pair_ok "$PKI/ca"; then
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
      -subj "/CN=dfe-archiver-testbed-ca" -keyout "$PKI/ca.key.tmp" -out "$PKI/ca.crt.tmp" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    chmod 644 "$PKI/ca.crt.tmp"
    made "$PKI/ca" "a new CA"
  fi
  [[ $ADDRESS == 127.0.0.1 ]] || address_san="IP:$ADDRESS,"
  issue_cert serving kube-apiserver "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=serverAuth" \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,${address_san}IP:$SERVICE_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  issue_cert front-proxy-client front-proxy-client "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=clientAuth"
  # With nodes (not on loopback): what the apiserver shows kubelets, for logs and exec.
  [[ $ADDRESS == 127.* ]] || issue_cert kubelet-client "kube-apiserver-kubelet-client/O=system:masters" \
    "keyUsage=critical,digitalSignature,keyEncipherment" "extendedKeyUsage=clientAuth"
  if [[ ! -s $PKI/sa.pub ]] || [[ $(openssl pkey -pubout -in "$PKI/sa.key" 2>/dev/null) != "$(cat "$PKI/sa.pub")" ]]; then
    openssl genrsa -out "$PKI/sa.key.tmp" 2048 2>/dev/null
    openssl rsa -in "$PKI/sa.key.tmp" -pubout -out "$PKI/sa.pub.tmp" 2>/dev/null
    chmod 644 "$PKI/sa.pub.tmp"
    made "$PKI/sa" "the service-account key pair"
  fi
  # token,user,uid,"group1,group2"
  admin=$(cat "$STATE/admin.token" 2>/dev/null) || admin=
  if [[ -z $admin ]] ||
     ! grep -qxF "$admin,testbed-admin,testbed-admin,\"system:masters\"" "$STATE/tokens.csv" 2>/dev/null; then
    admin=$(openssl rand -hex 24) kcm=$(openssl rand -hex 24)
    printf '%s,testbed-admin,testbed-admin,"system:masters"\n%s,system:kube-controller-manager,system:kube-controller-manager\n' \
      "$admin" "$kcm" | tb_write "$STATE/tokens.csv"
    printf '%s\n' "$admin" | tb_write "$STATE/admin.token"
    tb_log "$NAME: made new tokens in $STATE"
    remade=1
  fi
  for u in "${USERS[@]}"; do # FILE=USER[@GROUP,...]; a token once made is kept
    file=${u%%=*} user=${u#*=} groups=
    [[ $user != *@* ]] || groups=${user#*@} user=${user%%@*}
    token=$(awk -F, -v u="$user" '$2 == u { print $1 }' "$STATE/tokens.csv")
    if [[ -z $token ]]; then
      token=$(openssl rand -hex 24)
      # (tb_write renames its temp file over tokens.csv only once cat has read it all)
      { cat "$STATE/tokens.csv" && printf '%s,%s,%s%s\n' "$token" "$user" "$user" "${groups:+,\"$groups\"}"; } |
        tb_write "$STATE/tokens.csv"
      tb_log "$NAME: made a token for $user in $STATE"
      remade=1
    fi
    kubeconfig "$user" "$token" | tb_write "$STATE/$file.kubeconfig"
  done
  # Written on every check: they follow the current CA, tokens and port.
  kcm=$(awk -F, '$2 == "system:kube-controller-manager" { print $1 }' "$STATE/tokens.csv")
  kubeconfig testbed-admin "$admin" | tb_write "$STATE/admin.kubeconfig"
  kubeconfig system:kube-controller-manager "$kcm" | tb_write "$STATE/kube-controller-manager.kubeconfig"
  checked | tb_write "$CHECKED"
  umask "$mask"
}

start_etcd() {
  tb_running "$NAME-etcd" && return 0
  port_free "$NAME-etcd" "$ETCD_PORT"
  port_free "$NAME-etcd" "$ETCD_PEER_PORT"
  mkdir -p -m 700 "$ETCD_DATA"
  local fsync=()
  [[ ${TESTBED_KUBE_ETCD_FSYNC:-0} == 1 ]] || fsync=(--unsafe-no-fsync)
  tb_start "$NAME-etcd" "$BIN" etcd --name testbed --data-dir "$ETCD_DATA" "${fsync[@]}" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT"
  tb_wait "$NAME-etcd" 30 etcd_ready
}

start_apiserver() {
  tb_running "$NAME-apiserver" && return 0
  port_free "$NAME-apiserver" "$APISERVER_PORT" "$ADDRESS"
  tb_start "$NAME-apiserver" "$BIN" kube-apiserver \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address "$ADDRESS" --advertise-address "$ADDRESS" --secure-port "$APISERVER_PORT" \
    --tls-cert-file "$PKI/serving.crt" --tls-private-key-file "$PKI/serving.key" \
    --client-ca-file "$PKI/ca.crt" \
    --requestheader-client-ca-file "$PKI/ca.crt" --requestheader-allowed-names front-proxy-client \
    --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
    --requestheader-extra-headers-prefix X-Remote-Extra- \
    --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
    --token-auth-file "$STATE/tokens.csv" "${KUBELET_CLIENT[@]}" \
    --authorization-mode Node,RBAC \
    --service-account-issuer "$ISSUER" --api-audiences "$ISSUER" \
    --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --endpoint-reconciler-type "$RECONCILER" \
    --allow-privileged=true --profiling=false \
    --event-ttl 15m
  tb_wait "$NAME-apiserver" 90 apiserver_ready
}

start_controller_manager() {
  tb_running "$NAME-controller-manager" && return 0
  port_free "$NAME-controller-manager" "$KCM_PORT"
  local kc=$STATE/kube-controller-manager.kubeconfig
  tb_start "$NAME-controller-manager" "$BIN" kube-controller-manager \
    --kubeconfig "$kc" --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
    --tls-cert-file "$PKI/serving.crt" --tls-private-key-file "$PKI/serving.key" \
    --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --controllers "$CONTROLLERS" --profiling=false
  tb_wait "$NAME-controller-manager" 90 kcm_ready
}

KEDA_CRDS=$(bash "$TB_DIR/keda/crds.sh")

start=$SECONDS
generate
if ((remade)); then
  # The servers hold what they loaded at start: they take the new material only when started again.
  tb_stop "$NAME-controller-manager"
  tb_stop "$NAME-apiserver"
fi
if tb_running "$NAME-etcd" && tb_running "$NAME-apiserver" &&
   { [[ ${TESTBED_KUBE_SKIP_CONTROLLER_MANAGER:-0} == 1 ]] || tb_running "$NAME-controller-manager"; }; then
  tb_log "$NAME: already running"
  write_env
  exit 0
fi

BIN=$(bash "$TB_DIR/apiserver/build.sh")

if ! start_etcd; then
  # Unreadable data (say, left by a crash): start over with an empty store once.
  if [[ -d $ETCD_DATA ]] && [[ -n $(ls -A "$ETCD_DATA") ]]; then
    tb_log "$NAME-etcd: failed on existing data; moving it to $ETCD_DATA.broken and retrying"
    tb_stop "$NAME-etcd"
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
tb_log "$NAME: ready at $SERVER in $((SECONDS - start))s (kubeconfig: $STATE/admin.kubeconfig)"
