#!/usr/bin/env bash
# Builds the multi-call control-plane binary (etcd + kube-apiserver + kube-controller-manager) once per
# version key and prints its path. Key: kubernetes version + hash of go.mod, go.sum, main.go, this script and the
# Go version, so any edit rebuilds and reruns reuse $TB_CACHE/kube/<key>/bin/k8s-testbed; older keys are removed
# after a successful build. Go's own build cache stays in its default place (a rebuild after an edit only relinks).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
SRC=$TB_DIR/apiserver

GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
[[ -x $GO ]] || { tb_log "kube: no go toolchain (looked for go on PATH and /usr/local/go/bin/go)"; exit 1; }

k8s_version=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$SRC/go.mod")
[[ $k8s_version =~ ^v([0-9]+)\.([0-9]+)\. ]] || { tb_log "kube: cannot read k8s.io/kubernetes version from go.mod"; exit 1; }
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}

go_version=$("$GO" env GOVERSION)
hash=$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC/main.go" "$SRC/build.sh" <(echo "$go_version") | sha256sum | cut -c1-12)
key=$k8s_version-$hash
out=$TB_CACHE/kube/$key/bin/k8s-testbed

if [[ -x $out ]]; then
  echo "$out"
  exit 0
fi

mkdir -p "$(dirname "$out")"
exec 9>"$TB_CACHE/kube/$key/.build.lock"
flock 9
if [[ -x $out ]]; then echo "$out"; exit 0; fi

tb_log "kube: building k8s-testbed $key (cold build takes several minutes; log: $TB_LOGS/kube-build.log)"
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
start=$SECONDS
if ! (cd "$SRC" && CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false" "$GO" build -trimpath -ldflags="$ldflags" -o "$out.tmp" .) \
    >"$TB_LOGS/kube-build.log" 2>&1; then
  tb_log "kube: build failed; last lines of $TB_LOGS/kube-build.log:"
  tail -n 40 "$TB_LOGS/kube-build.log" >&2
  rm -f "$out.tmp"
  exit 1
fi
mv "$out.tmp" "$out"
for old in "$TB_CACHE"/kube/v*-*/; do
  [[ ${old%/} == "$TB_CACHE/kube/$key" ]] || rm -rf "${old%/}"
done
tb_log "kube: built $out in $((SECONDS - start))s"
echo "$out"
