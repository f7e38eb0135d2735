// The operator on a cluster without KEDA: the ScaledObject CRD deleted from the testbed's kube-apiserver (only while
// no other test file holds it, see withoutKeda), a pipeline asking for KEDA runs spec.replicas pods and says why on
// ScalingReady; once the CRD is installed the running operator picks it up on its own, creates the ScaledObject and
// leaves the replica count to KEDA's HPA.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { AppsV1Api, KubernetesObjectApi, type V1Deployment, type V1ManagedFieldsEntry } from "@kubernetes/client-node";
import { FIELD_MANAGER } from "../../src/api/group.ts";
import { isNotFound } from "../../src/controller/apply.ts";
import { KEDA_API_VERSION } from "../../src/render/keda.ts";
import { objectNames } from "../../src/render/index.ts";
import { kubeConfig, kubeNamespace } from "../../../e2e/support/testbed.ts";
import { conditionOf, createPipeline, eventually, readPipeline, runOperator, withoutKeda } from "../support/kube.ts";

const kc = kubeConfig();
const apps = kc.makeApiClient(AppsV1Api);
const objects = KubernetesObjectApi.makeApiClient(kc);

/** Whether the operator's apply owns the Deployment's spec.replicas. */
const ownsReplicas = (d: V1Deployment) =>
  (d.metadata?.managedFields ?? []).some(
    (f: V1ManagedFieldsEntry) =>
      f.manager === FIELD_MANAGER && f.operation === "Apply" && JSON.stringify(f.fieldsV1).includes('"f:replicas"'),
  );

describe("the operator without KEDA", () => {
  it("runs spec.replicas pods, reports KEDANotInstalled, and takes KEDA up once its CRD appears", async (t) => {
    const keda = await withoutKeda(t);
    const namespace = await kubeNamespace(t);
    await runOperator(t, namespace, { kedaRecheckMs: 1_000 });
    await createPipeline(namespace, "scaled", { replicas: 2, keda: { maxReplicaCount: 4 } });
    const name = objectNames("scaled").workload;
    const scaledObject = { apiVersion: KEDA_API_VERSION, kind: "ScaledObject", metadata: { name, namespace } };

    const p = await eventually("ScalingReady False", async () => {
      const p = await readPipeline(namespace, "scaled");
      return conditionOf(p, "ScalingReady")?.status === "False" ? p : undefined;
    });
    const scaling = conditionOf(p, "ScalingReady")!;
    assert.equal(scaling.reason, "KEDANotInstalled");
    assert.match(scaling.message, /KEDA's ScaledObject CRD is not installed; the Deployment runs 2 pods/);
    let dep = await apps.readNamespacedDeployment({ name, namespace });
    assert.equal(dep.spec?.replicas, 2);
    assert.ok(ownsReplicas(dep), "the operator sets replicas itself");
    await assert.rejects(objects.read(scaledObject), isNotFound);

    // KEDA installed: discovery serves ScaledObject within a recheck, and the operator acts on it unprompted.
    await keda.install();
    await eventually("ScalingReady True", async () => {
      const p = await readPipeline(namespace, "scaled");
      return conditionOf(p, "ScalingReady")?.reason === "ScaledObjectApplied" ? p : undefined;
    });
    const so = (await objects.read(scaledObject)) as { spec?: { maxReplicaCount?: number } };
    assert.equal(so.spec?.maxReplicaCount, 4);
    dep = await eventually("replicas left to KEDA", async () => {
      const d = await apps.readNamespacedDeployment({ name, namespace });
      return ownsReplicas(d) ? undefined : d;
    });
    assert.ok(!ownsReplicas(dep));
  });
});
