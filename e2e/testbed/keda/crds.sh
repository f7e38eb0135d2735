#!/usr/bin/env bash
# Fetches the KEDA CRD manifests (config/crd/bases/*.yaml of github.com/kedacore/keda/v2 at a pinned version)
# through the Go module proxy into $TB_CACHE/keda/<version>/crds/ and prints that directory.
# It does NOT install them anywhere: tests apply them when they want them (and also run without them).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

KEDA_VERSION=v2.21.0
KEDA_MODULE=github.com/kedacore/keda/v2
dest=$TB_CACHE/keda/$KEDA_VERSION/crds

if [[ -f $dest/.complete ]]; then
  echo "$dest"
  exit 0
fi

GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
[[ -x $GO ]] || { tb_log "keda: no go toolchain"; exit 1; }

tb_log "keda: fetching $KEDA_MODULE@$KEDA_VERSION CRDs"
# Outside any module, so the project's or the apiserver module's go.mod is not consulted.
json=$(cd / && GOFLAGS=-mod=mod "$GO" mod download -json "$KEDA_MODULE@$KEDA_VERSION") || {
  tb_log "keda: go mod download failed: $json"; exit 1; }
dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$json")
[[ -n $dir && -d $dir/config/crd/bases ]] || { tb_log "keda: no config/crd/bases in module ($json)"; exit 1; }

rm -rf "$dest.tmp"
mkdir -p "$dest.tmp"
cp "$dir"/config/crd/bases/*.yaml "$dest.tmp/"
chmod u+w "$dest.tmp"/*.yaml
for f in keda.sh_scaledobjects.yaml keda.sh_scaledjobs.yaml keda.sh_triggerauthentications.yaml \
         keda.sh_clustertriggerauthentications.yaml; do
  [[ -s $dest.tmp/$f ]] || { tb_log "keda: $f missing from $KEDA_MODULE@$KEDA_VERSION"; exit 1; }
done
echo "$KEDA_VERSION" >"$dest.tmp/.complete"
rm -rf "$dest"
mv "$dest.tmp" "$dest"
tb_log "keda: CRDs in $dest: $(cd "$dest" && echo *.yaml)"
echo "$dest"
