#!/usr/bin/env bash
# Fetches the KEDA CRD manifests (config/crd/bases/*.yaml of github.com/kedacore/keda/v2 at a pinned version)
# through the Go module proxy into $TB_CACHE/keda/<version>/crds/ and prints that directory.
# It does NOT install them anywhere: tests apply them when they want them (and also run without them).
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=module.sh
source "$TB_DIR/keda/module.sh"

dest=$TB_CACHE/keda/$KEDA_VERSION/crds

if [[ -f $dest/.complete ]]; then
  echo "$dest"
  exit 0
fi

tb_log "keda: fetching $KEDA_MODULE@$KEDA_VERSION CRDs"
dir=$(keda_source) || exit 1
[[ -d $dir/config/crd/bases ]] || { tb_log "keda: no config/crd/bases in $dir"; exit 1; }

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
