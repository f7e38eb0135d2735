// Server-side apply on the testbed's kube-apiserver: the first apply writes every object with the operator's field
// manager and the applied-hash annotation; applies of the same desired objects write nothing; a change writes.
import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import { KubernetesObjectApi, type KubernetesObject } from "@kubernetes/client-node";
import { FIELD_MANAGER } from "../../src/api/group.ts";
import { APPLIED_HASH_ANNOTATION, Applier, appliedHash } from "../../src/controller/apply.ts";
import { renderAll, type KubeObject } from "../../src/render/index.ts";
import { waitFor } from "../../../e2e/support/archiver.ts";
import { kubeConfig, kubeNamespace } from "../../../e2e/support/testbed.ts";
import { createPipeline, installCrds } from "../support/kube.ts";

const objects = KubernetesObjectApi.makeApiClient(kubeConfig());

async function versions(desired: readonly KubeObject[]): Promise<string[]> {
  return Promise.all(
    desired.map(async (o) => {
      const live = await objects.read({ apiVersion: o.apiVersion, kind: o.kind, metadata: o.metadata });
      return `${o.kind}=${live.metadata?.resourceVersion}`;
    }),
  );
}

/**
 * The versions once nothing else writes the objects: the testbed's deployment controller writes a new Deployment's
 * status a moment after it is created, and a snapshot taken before that write saw it as the applier's.
 */
async function settledVersions(desired: readonly KubeObject[]): Promise<string[]> {
  let last: string[] = [];
  await waitFor(
    async () => {
      const now = await versions(desired);
      const same = now.join() === last.join();
      last = now;
      return same;
    },
    10_000,
    () => `the objects kept changing: ${last.join(", ")}`,
  );
  return last;
}

describe("Applier", () => {
  before(installCrds);

  it("hashes a desired object whatever its keys' order", () => {
    const a = {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: "x", namespace: "n" },
      data: { a: "1", b: "2" },
    };
    const b = {
      kind: "ConfigMap",
      apiVersion: "v1",
      data: { b: "2", a: "1" },
      metadata: { namespace: "n", name: "x" },
    };
    assert.equal(appliedHash(a as unknown as KubeObject), appliedHash(b as unknown as KubeObject));
    assert.notEqual(
      appliedHash(a as unknown as KubeObject),
      appliedHash({ ...a, data: { a: "1", b: "3" } } as unknown as KubeObject),
    );
  });

  it("writes once, then leaves every resourceVersion alone until the desired objects change", async (t) => {
    const namespace = await kubeNamespace(t);
    const cr = await createPipeline(namespace, "applied", { archive: { destination: "minio://b/p" } });
    const desired = renderAll(cr, { image: "img:1", kedaInstalled: true, secretHashes: {} });
    const applier = new Applier(objects);

    const first = await applier.applyAll(desired);
    assert.ok(first.every((a) => a.written));
    for (const [i, a] of first.entries()) {
      const o = a.object as KubernetesObject;
      assert.equal(o.metadata?.annotations?.[APPLIED_HASH_ANNOTATION], appliedHash(desired[i]!));
      assert.ok(o.metadata?.managedFields?.some((m) => m.manager === FIELD_MANAGER && m.operation === "Apply"));
      assert.equal(o.metadata?.ownerReferences?.[0]?.uid, cr.metadata.uid);
    }
    const before = await settledVersions(desired);
    for (let i = 0; i < 3; i++) {
      const again = await applier.applyAll(renderAll(cr, { image: "img:1", kedaInstalled: true, secretHashes: {} }));
      assert.ok(
        again.every((a) => !a.written),
        `round ${i} wrote`,
      );
    }
    assert.deepEqual(await versions(desired), before);

    const changed = renderAll(cr, { image: "img:2", kedaInstalled: true, secretHashes: {} });
    const third = await applier.applyAll(changed);
    assert.deepEqual(
      third.filter((a) => a.written).map((a) => a.object.kind),
      ["Deployment"],
    );
    const dep = (await objects.read({
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: changed.find((o) => o.kind === "Deployment")!.metadata,
    })) as {
      spec?: { template?: { spec?: { containers?: { image?: string }[] } } };
    };
    assert.equal(dep.spec?.template?.spec?.containers?.[0]?.image, "img:2");
  });

  it("writes again when the live object lost its fields and its hash", async (t) => {
    const namespace = await kubeNamespace(t);
    const cr = await createPipeline(namespace, "recreated", {});
    const [sa] = renderAll(cr, { image: "img:1", kedaInstalled: false, secretHashes: {} });
    const applier = new Applier(objects);
    assert.equal((await applier.apply(sa!)).written, true);
    await objects.delete({ apiVersion: "v1", kind: "ServiceAccount", metadata: sa!.metadata });
    assert.equal((await applier.apply(sa!)).written, true);
  });
});
