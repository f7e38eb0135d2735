// reconcile(key) on the testbed's kube-apiserver, one rule at a time: a refused spec, a missing Secret, KEDA absent,
// and the pods' reports of pods that are gone.
import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import {
  CoreV1Api,
  CustomObjectsApi,
  KubernetesObjectApi,
  PatchStrategy,
  setHeaderOptions,
} from "@kubernetes/client-node";
import pino from "pino";
import { GROUP, PLURAL, VERSION } from "../../src/api/group.ts";
import type { ArchivePipeline, Condition } from "../../src/api/spec.ts";
import { isNotFound } from "../../src/controller/apply.ts";
import { Reconciler } from "../../src/controller/reconcile.ts";
import { labels, objectNames } from "../../src/render/index.ts";
import { kubeConfig, kubeNamespace } from "../../../e2e/support/testbed.ts";
import { createPipeline, installCrds } from "../support/kube.ts";

const kc = kubeConfig();
const custom = kc.makeApiClient(CustomObjectsApi);
const core = kc.makeApiClient(CoreV1Api);
const objects = KubernetesObjectApi.makeApiClient(kc);
const CR = { group: GROUP, version: VERSION, plural: PLURAL };
const log = pino({ level: "silent" });

function reconciler(kedaInstalled: boolean): Reconciler {
  return new Reconciler(kc, { image: "img:1", log, keda: { installed: () => Promise.resolve(kedaInstalled) } });
}

async function pipeline(namespace: string, name: string): Promise<ArchivePipeline> {
  return (await custom.getNamespacedCustomObject({ ...CR, namespace, name })) as ArchivePipeline;
}

function condition(p: ArchivePipeline, type: string): Condition {
  const c = p.status?.conditions?.find((x) => x.type === type);
  assert.ok(c, `no ${type} condition`);
  return c;
}

async function exists(apiVersion: string, kind: string, name: string, namespace: string): Promise<boolean> {
  return objects.read({ apiVersion, kind, metadata: { name, namespace } }).then(
    () => true,
    (e: unknown) => {
      if (isNotFound(e)) return false;
      throw e;
    },
  );
}

describe("Reconciler", () => {
  before(installCrds);

  it("reads a pipeline that is gone as nothing to do", async (t) => {
    const namespace = await kubeNamespace(t);
    await reconciler(true).reconcile(`${namespace}/absent`);
  });

  it("applies nothing for a refused spec and says why", async (t) => {
    const namespace = await kubeNamespace(t);
    // The CRD refuses most of what validateSpec refuses; a regular expression it leaves to the operator.
    await createPipeline(namespace, "bad", { kafka: { topicInclude: ["("] } });
    await reconciler(true).reconcile(`${namespace}/bad`);
    const p = await pipeline(namespace, "bad");
    const ready = condition(p, "Ready");
    assert.equal(ready.status, "False");
    assert.equal(ready.reason, "InvalidSpec");
    assert.match(ready.message, /kafka\.topicInclude\[0\] is not a valid regular expression/);
    assert.equal(condition(p, "Degraded").status, "True");
    assert.equal(p.status?.observedGeneration, 1);
    assert.equal(await exists("v1", "ConfigMap", objectNames("bad").config, namespace), false);
  });

  it("names a missing Secret, applies anyway, and clears it once the Secret exists", async (t) => {
    const namespace = await kubeNamespace(t);
    await createPipeline(namespace, "sec", {
      kafka: {
        saslMechanism: "PLAIN",
        saslUsername: "u",
        saslPassword: { secretKeyRef: { name: "kafka", key: "pw" } },
      },
    });
    const r = reconciler(true);
    await r.reconcile(`${namespace}/sec`);
    let ready = condition(await pipeline(namespace, "sec"), "Ready");
    assert.equal(ready.reason, "SecretMissing");
    assert.match(ready.message, /Secret kafka does not exist/);
    const firstTransition = ready.lastTransitionTime;
    assert.equal(await exists("apps/v1", "Deployment", objectNames("sec").workload, namespace), true);

    await core.createNamespacedSecret({ namespace, body: { metadata: { name: "kafka" }, stringData: { pw: "x" } } });
    await sleep(1100); // so a moved lastTransitionTime shows in whole seconds
    await r.reconcile(`${namespace}/sec`);
    ready = condition(await pipeline(namespace, "sec"), "Ready");
    assert.equal(ready.reason, "PodsNotReady");
    assert.equal(ready.status, "False");
    assert.equal(ready.lastTransitionTime, firstTransition, "status stayed False: the transition time must stay");
    const dep = (await objects.read({
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: objectNames("sec").workload, namespace },
    })) as { spec?: { template?: { metadata?: { annotations?: Record<string, string> } } } };
    assert.ok(dep.spec?.template?.metadata?.annotations?.[`${GROUP}/secret-hash`], "no secret hash on the pods");
  });

  it("runs a plain replica count and says so when KEDA is absent", async (t) => {
    const namespace = await kubeNamespace(t);
    await createPipeline(namespace, "nokeda", { replicas: 2 });
    await reconciler(false).reconcile(`${namespace}/nokeda`);
    const scaling = condition(await pipeline(namespace, "nokeda"), "ScalingReady");
    assert.equal(scaling.status, "False");
    assert.equal(scaling.reason, "KEDANotInstalled");
    const dep = (await objects.read({
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: objectNames("nokeda").workload, namespace },
    })) as { spec?: { replicas?: number } };
    assert.equal(dep.spec?.replicas, 2);
    assert.equal(await exists("keda.sh/v1alpha1", "ScaledObject", objectNames("nokeda").workload, namespace), false);
  });

  it("drops the ScaledObject when keda.enabled turns false", async (t) => {
    const namespace = await kubeNamespace(t);
    await createPipeline(namespace, "off", {});
    const r = reconciler(true);
    await r.reconcile(`${namespace}/off`);
    const name = objectNames("off").workload;
    assert.equal(await exists("keda.sh/v1alpha1", "ScaledObject", name, namespace), true);
    await custom.patchNamespacedCustomObject(
      { ...CR, namespace, name: "off", body: { spec: { keda: { enabled: false } } } },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
    await r.reconcile(`${namespace}/off`);
    assert.equal(await exists("keda.sh/v1alpha1", "ScaledObject", name, namespace), false);
    assert.equal(condition(await pipeline(namespace, "off"), "ScalingReady").reason, "FixedReplicas");
  });

  it("prunes reports of pods that are gone, and keeps the live pods' own entries and managers", async (t) => {
    const namespace = await kubeNamespace(t);
    await createPipeline(namespace, "pods", { archive: { destination: "minio://b/p" } });
    const podName = "pods-archiver-live";
    // The admission plugin wants the namespace's default ServiceAccount, which the controller-manager makes.
    for (let i = 0; ; i++) {
      try {
        await core.createNamespacedPod({
          namespace,
          body: {
            metadata: { name: podName, labels: labels("pods") },
            spec: { containers: [{ name: "c", image: "img:1" }] },
          },
        });
        break;
      } catch (e) {
        if (i > 50) throw e;
        await sleep(200);
      }
    }
    const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    await custom.patchNamespacedCustomObjectStatus(
      {
        ...CR,
        namespace,
        name: "pods",
        body: {
          status: {
            pods: [
              { name: podName, state: "Degraded", reason: "store unreachable", lastReport: now },
              { name: "pods-archiver-gone", state: "Running", lastReport: now },
            ],
          },
        },
        fieldManager: "dfe-archiver-pod",
      },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
    await reconciler(true).reconcile(`${namespace}/pods`);
    const p = await pipeline(namespace, "pods");
    assert.deepEqual(
      p.status?.pods?.map((x) => x.name),
      [podName],
    );
    const degraded = condition(p, "Degraded");
    assert.equal(degraded.status, "True");
    assert.equal(degraded.reason, "PodsDegraded");
    assert.match(degraded.message, /pods-archiver-live: store unreachable/);
    assert.equal(condition(p, "Idle").status, "False");
  });
});
