// Argo CD: no perpetual diff. A pipeline is applied from Git the way Argo CD's server-side apply does it (its own
// field manager), the operator reconciles it, and then Argo CD's server-side diff (the same apply as a dry run) finds
// nothing to change: the operator wrote only the status subresource, and the apiserver's one stored default
// (spec.transport) is in the predicted state as in the live one. The Application examples are checked for the
// paths, the wave order and the sync options docs/argocd.md describes.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { KubernetesObjectApi, PatchStrategy } from "@kubernetes/client-node";
import { FIELD_MANAGER as OPERATOR } from "../../operator/src/api/group.ts";
import type { ArchivePipeline } from "../../operator/src/api/spec.ts";
import { installCrds, runOperator } from "../../operator/test/support/kube.ts";
import { waitFor } from "../support/archiver.ts";
import { manifestFile, repo, type Manifest } from "../support/packaging.ts";
import { kubeConfig, kubeNamespace } from "../support/testbed.ts";

const ARGOCD = "argocd-controller";
const docs = join(repo, "docs", "argocd");

type Live = ArchivePipeline & { metadata: { managedFields?: { manager: string; subresource?: string }[] } };

/** What a diff compares: the object without the apiserver's bookkeeping and without status. */
function compared(o: Live): unknown {
  const {
    managedFields: _m,
    resourceVersion: _r,
    ...metadata
  } = o.metadata as Live["metadata"] & {
    resourceVersion?: string;
  };
  return { apiVersion: o.apiVersion, kind: o.kind, metadata, spec: o.spec };
}

describe("under Argo CD", () => {
  it("a reconciled pipeline shows no diff against Git", async (t) => {
    await installCrds();
    const namespace = await kubeNamespace(t);
    await runOperator(t, namespace);

    const api = KubernetesObjectApi.makeApiClient(kubeConfig());
    const git = manifestFile(join(repo, "config", "samples", "archiver_v1alpha1_archivepipeline_minio.yaml")).map(
      (o) => ({ ...o, metadata: { ...o.metadata, namespace } }) as Manifest,
    );
    const apply = (o: Manifest, dryRun?: string) =>
      api.patch(
        o,
        undefined,
        dryRun,
        ARGOCD,
        false,
        PatchStrategy.ServerSideApply,
      ) as Promise<unknown> as Promise<Live>;
    for (const o of git) await apply(o);
    const pipeline = git.find((o) => o.kind === "ArchivePipeline")!;
    const read = () => api.read(pipeline) as Promise<unknown> as Promise<Live>;

    await waitFor(
      async () => (await read()).status?.conditions?.length === 4,
      60_000,
      () => "the operator did not write the pipeline's status",
    );
    // Let any reconcile the status write set off finish.
    await waitFor(
      async () => {
        const a = (await read()).metadata.resourceVersion;
        await new Promise((r) => setTimeout(r, 1_000));
        return (await read()).metadata.resourceVersion === a;
      },
      30_000,
      () => "the pipeline kept changing",
    );

    const live = await read();
    assert.equal(live.metadata.generation, 1, "something but Git wrote the spec");
    const operatorFields = (live.metadata.managedFields ?? []).filter((f) => f.manager === OPERATOR);
    assert.ok(operatorFields.length > 0);
    assert.ok(
      operatorFields.every((f) => f.subresource === "status"),
      `the operator owns fields outside status: ${JSON.stringify(operatorFields)}`,
    );
    assert.equal(live.spec.transport, "kafka", "the CRD's one stored default");

    // Argo CD's server-side diff: Git applied again as a dry run predicts exactly the live object.
    const predicted = await apply(pipeline, "All");
    assert.deepEqual(compared(predicted), compared(live));
    // And a real sync of the same Git changes nothing.
    const synced = await apply(pipeline);
    assert.equal(synced.metadata.resourceVersion, live.metadata.resourceVersion);
  });

  it("has Application examples that install the chart before the pipelines", () => {
    const apps = ["dfe-archiver-operator.yaml", "archive-pipelines.yaml"].map(
      (f) =>
        manifestFile(join(docs, f))[0] as Manifest & {
          spec: { source: { path: string }; syncPolicy: { syncOptions: string[] }; ignoreDifferences?: unknown };
        },
    );
    const [operator, pipelines] = apps as [(typeof apps)[0], (typeof apps)[0]];
    const wave = (a: Manifest) => Number(a.metadata.annotations?.["argocd.argoproj.io/sync-wave"]);
    assert.ok(wave(operator) < wave(pipelines), "the operator's Application syncs first");
    for (const a of apps) {
      assert.equal(a.kind, "Application");
      assert.ok(existsSync(join(repo, a.spec.source.path)), `${a.metadata.name}: no ${a.spec.source.path} here`);
      assert.equal(a.spec.ignoreDifferences, undefined, "docs/argocd.md says none is needed");
    }
    assert.equal(operator.spec.source.path, "charts/dfe-archiver-operator");
    assert.ok(pipelines.spec.syncPolicy.syncOptions.includes("SkipDryRunOnMissingResource=true"));
    const parent = manifestFile(join(docs, "app-of-apps.yaml"))[0] as Manifest & { spec: { source: { path: string } } };
    assert.equal(parent.spec.source.path, "docs/argocd");
  });
});
