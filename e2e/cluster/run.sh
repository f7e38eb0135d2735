#!/usr/bin/env bash
# npm run e2e:cluster: the whole product on the testbed's own Kubernetes cluster (`e2e/testbed/up cluster`):
# e2e/cluster/cluster.e2e.ts. The cluster is shared by everyone on the machine, as the testbed is, and the test
# installs cluster-wide objects (CRDs, KEDA, the chart): one run at a time, the others wait. Not in `npm test`.
set -euo pipefail
cd "$(dirname "$0")/../.."
bash e2e/testbed/up cluster
# shellcheck source-path=SCRIPTDIR source=../testbed/lib.sh
source e2e/testbed/lib.sh
export TEST_CONCURRENCY=1
exec flock "$TB_CACHE/cluster-e2e.lock" bash scripts/test e2e/cluster/cluster.e2e.ts
