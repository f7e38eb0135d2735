#!/usr/bin/env bash
# Builds KEDA's operator (cmd/operator, as `keda`) and metrics apiserver (cmd/adapter, as `keda-adapter`) from the
# module module.sh pins, through the Go module proxy, into $TB_CACHE/keda/<version>/bin, and prints that directory.
# Its go.mod has a replace directive, which `go install module@version` refuses: the build runs in a copy of the
# module's source. Cold it takes many minutes (every scaler's cloud client is compiled in); then it is cached.
# shellcheck source-path=SCRIPTDIR source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# shellcheck source=module.sh
source "$TB_DIR/keda/module.sh"

out=$TB_CACHE/keda/$KEDA_VERSION/bin
log=$TB_LOGS/keda-build.log
if [[ -x $out/keda && -x $out/keda-adapter ]]; then
  echo "$out"
  exit 0
fi
src=$(keda_source) || exit 1
tb_log "keda: building $KEDA_MODULE@$KEDA_VERSION cmd/operator and cmd/adapter (cold: many minutes; log: $log)"
work=$out.src
rm -rf "$work" "$out.tmp" && cp -r "$src" "$work" && chmod -R u+w "$work"
# What KEDA's Makefile stamps into its release images.
ldflags="-s -w -X=$KEDA_MODULE/version.Version=${KEDA_VERSION#v} -X=$KEDA_MODULE/version.GitCommit=$KEDA_VERSION"
start=$SECONDS
(cd "$work" && CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=mod -buildvcs=false" \
  go build -trimpath -ldflags="$ldflags" -o "$out.tmp/" ./cmd/operator ./cmd/adapter) >"$log" 2>&1 ||
  { tb_log "keda: build failed; last lines of $log:"; tail -n 30 "$log" >&2; rm -rf "$work" "$out.tmp"; exit 1; }
mv "$out.tmp/operator" "$out.tmp/keda" && mv "$out.tmp/adapter" "$out.tmp/keda-adapter"
rm -rf "$work" "$out" && mv "$out.tmp" "$out"
tb_log "keda: built $out in $((SECONDS - start))s"
echo "$out"
