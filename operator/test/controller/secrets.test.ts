// Secret rotation on the testbed's kube-apiserver, with kube-controller-manager running the Deployment controller: the
// operator watches the Secrets its pipelines reference, so a Secret that appears clears SecretMissing and a change to
// one's data changes the pod template's hash, which rolls a new ReplicaSet. A config-only change reaches the
// ConfigMap and leaves the pod template, and so the pods, alone.
import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import {
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
  type V1Deployment,
} from "@kubernetes/client-node";
import { GROUP, PLURAL, VERSION } from "../../src/api/group.ts";
import { objectNames, SECRET_HASH_ANNOTATION } from "../../src/render/index.ts";
import { PIPELINE_LABEL } from "../../src/render/meta.ts";
import { sumMetric } from "../../../e2e/support/archiver.ts";
import { kubeConfig, kubeNamespace, need } from "../../../e2e/support/testbed.ts";
import { conditionOf, createPipeline, eventually, installCrds, readPipeline, runOperator } from "../support/kube.ts";

const kc = kubeConfig();
const core = kc.makeApiClient(CoreV1Api);
const apps = kc.makeApiClient(AppsV1Api);
const custom = kc.makeApiClient(CustomObjectsApi);
const CR = { group: GROUP, version: VERSION, plural: PLURAL };

/** The operator's successful reconciles so far, from its /metrics. */
async function reconciles(address: string): Promise<number> {
  const text = await (await fetch(`http://${address}/metrics`)).text();
  return sumMetric(text, "reconcile_total", { result: "success" });
}

const templateHash = (d: V1Deployment) => d.spec?.template.metadata?.annotations?.[SECRET_HASH_ANNOTATION];

describe("Secrets referenced by a pipeline", () => {
  before(installCrds);

  it("roll the pods when their data changes; a config change does not", async (t) => {
    assert.equal(need("TESTBED_KUBE_CONTROLLER_MANAGER"), "1", "the testbed runs kube-controller-manager");
    const namespace = await kubeNamespace(t);
    const op = await runOperator(t, namespace);
    const names = objectNames("rotate");
    await createPipeline(namespace, "rotate", {
      kafka: {
        brokers: ["kafka:9092"],
        saslMechanism: "SCRAM-SHA-512",
        saslUsername: "archiver",
        saslPassword: { secretKeyRef: { name: "kafka", key: "password" } },
      },
      archive: { destination: "minio://archive/rotate", minio: { endpoint: "http://minio:9000" } },
      keda: { enabled: false },
    });
    const deployment = () => apps.readNamespacedDeployment({ name: names.workload, namespace });
    const replicaSets = async () =>
      (await apps.listNamespacedReplicaSet({ namespace, labelSelector: `${PIPELINE_LABEL}=rotate` })).items
        .map((rs) => rs.metadata!.name!)
        .sort();

    // The Secret does not exist yet: said so; its creation alone (no spec change, no polling) clears it.
    await eventually("SecretMissing", async () => {
      const p = await readPipeline(namespace, "rotate");
      return conditionOf(p, "Ready")?.reason === "SecretMissing" ? p : undefined;
    });
    // Settled first (the Deployment controller done with it), so nothing but the Secret's creation prompts a reconcile.
    const settled = await eventually("the Deployment settled", async () => {
      const d = await deployment();
      return d.status?.observedGeneration === d.metadata?.generation && d.status?.replicas === 1 ? d : undefined;
    });
    const missingHash = templateHash(settled);
    await core.createNamespacedSecret({
      namespace,
      body: { metadata: { name: "kafka" }, stringData: { password: "first" } },
    });
    await eventually("Ready past SecretMissing", async () => {
      const p = await readPipeline(namespace, "rotate");
      return conditionOf(p, "Ready")?.reason === "PodsNotReady" ? p : undefined;
    });
    const first = await eventually("the hash of the created Secret", async () => {
      const d = await deployment();
      return templateHash(d) !== missingHash ? d : undefined;
    });
    const rsFirst = await eventually("the ReplicaSet of that template", async () => {
      const d = await deployment();
      const rs = await replicaSets();
      return d.status?.observedGeneration === d.metadata?.generation && rs.length > 0 ? rs : undefined;
    });

    // Config only: the ConfigMap follows, the Deployment is not even written.
    await custom.patchNamespacedCustomObject(
      { ...CR, namespace, name: "rotate", body: { spec: { compression: { codec: "lz4" } } } },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
    await eventually("the ConfigMap with the new codec", async () => {
      const cm = await core.readNamespacedConfigMap({ name: names.config, namespace });
      return cm.data?.["config.yaml"]?.includes("codec: lz4") ? cm : undefined;
    });
    await eventually("the pipeline reconciled at generation 2", async () => {
      const p = await readPipeline(namespace, "rotate");
      return p.status?.observedGeneration === 2 ? p : undefined;
    });
    const afterConfig = await deployment();
    assert.equal(afterConfig.metadata?.generation, first.metadata?.generation, "the pod template is unchanged");
    assert.equal(templateHash(afterConfig), templateHash(first));
    assert.deepEqual(await replicaSets(), rsFirst);

    // Rotation: new data in the Secret, a new hash on the pod template, a new ReplicaSet rolled.
    await core.replaceNamespacedSecret({
      name: "kafka",
      namespace,
      body: { metadata: { name: "kafka" }, stringData: { password: "second" } },
    });
    const rotated = await eventually("a new hash on the pod template", async () => {
      const d = await deployment();
      return templateHash(d) !== templateHash(first) ? d : undefined;
    });
    assert.ok(templateHash(rotated));
    const rsRotated = await eventually("a second ReplicaSet", async () => {
      const rs = await replicaSets();
      return rs.length > rsFirst.length ? rs : undefined;
    });
    assert.ok(
      rsFirst.every((n) => rsRotated.includes(n)),
      "the old ReplicaSet stays until the new one is ready",
    );

    // The same data written again: the pipeline is reconciled (the Secret changed) and the Deployment left alone.
    const before = await reconciles(op.address);
    await core.replaceNamespacedSecret({
      name: "kafka",
      namespace,
      body: { metadata: { name: "kafka", labels: { touched: "yes" } }, stringData: { password: "second" } },
    });
    await eventually("a reconcile after the relabel", async () =>
      (await reconciles(op.address)) > before ? true : undefined,
    );
    const untouched = await deployment();
    assert.equal(untouched.metadata?.generation, rotated.metadata?.generation);
  });
});
