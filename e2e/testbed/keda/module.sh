# The KEDA release the testbed uses (sourced by crds.sh and build.sh, after ../lib.sh): its module, and its source
# through the Go module proxy.
KEDA_VERSION=v2.21.0
KEDA_MODULE=github.com/kedacore/keda/v2

# keda_source: prints the module's directory in Go's module cache (read-only), downloading it the first time.
keda_source() {
  local go json dir
  go=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
  [[ -x $go ]] || { tb_log "keda: no go toolchain"; return 1; }
  # Outside any module, so the project's or the apiserver module's go.mod is not consulted.
  json=$(cd / && GOFLAGS=-mod=mod "$go" mod download -json "$KEDA_MODULE@$KEDA_VERSION") ||
    { tb_log "keda: go mod download failed: $json"; return 1; }
  dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
  [[ -n $dir && -d $dir ]] || { tb_log "keda: no module directory in: $json"; return 1; }
  echo "$dir"
}
