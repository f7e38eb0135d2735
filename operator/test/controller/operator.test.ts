// The operator end to end on the testbed's kube-apiserver (kube-controller-manager running, so garbage collection
// works; no kubelet, so no pod ever runs): started as its own process with the admin kubeconfig, watching one test
// namespace, it creates a pipeline's objects, follows a spec edit, writes its status, writes nothing more on
// reconciles with no change, and leaves the owned objects to the garbage collector once the pipeline is deleted.
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { before, describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import {
  CustomObjectsApi,
  KubernetesObjectApi,
  PatchStrategy,
  setHeaderOptions,
  type KubernetesObject,
} from "@kubernetes/client-node";
import pino from "pino";
import { GROUP, PLURAL, VERSION } from "../../src/api/group.ts";
import type { ArchivePipeline } from "../../src/api/spec.ts";
import { isNotFound } from "../../src/controller/apply.ts";
import { Reconciler } from "../../src/controller/reconcile.ts";
import { objectNames } from "../../src/render/index.ts";
import { kubeConfig, kubeNamespace, need } from "../../../e2e/support/testbed.ts";
import { createPipeline, installCrds } from "../support/kube.ts";

const kc = kubeConfig();
const objects = KubernetesObjectApi.makeApiClient(kc);
const custom = kc.makeApiClient(CustomObjectsApi);
const IMAGE = "ghcr.io/dfe/dfe-archiver:test";
const CR = { group: GROUP, version: VERSION, plural: PLURAL };

function owned(pipeline: string, namespace: string): KubernetesObject[] {
  const n = objectNames(pipeline);
  const at = (apiVersion: string, kind: string, name = n.workload) => ({
    apiVersion,
    kind,
    metadata: { name, namespace },
  });
  return [
    at("v1", "ConfigMap", n.config),
    at("apps/v1", "Deployment"),
    at("v1", "ServiceAccount"),
    at("rbac.authorization.k8s.io/v1", "Role"),
    at("rbac.authorization.k8s.io/v1", "RoleBinding"),
    at("v1", "Service"),
    at("keda.sh/v1alpha1", "ScaledObject"),
  ];
}

const read = (o: KubernetesObject) =>
  objects.read(o as KubernetesObject & { metadata: { name: string } }).catch((e: unknown) => {
    if (isNotFound(e)) return undefined;
    throw e;
  });

async function eventually<T>(what: string, probe: () => Promise<T | undefined>, ms = 20_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms`);
    await sleep(100);
  }
}

/** Starts the operator as `node operator/src/main.ts`, resolving with its listen address once it logs it. */
async function startOperator(namespace: string): Promise<{ child: ChildProcess; address: string; logs: string[] }> {
  const child = spawn(
    process.execPath,
    [
      "operator/src/main.ts",
      "--kubeconfig",
      need("TESTBED_KUBECONFIG"),
      "--namespace",
      namespace,
      "--image",
      IMAGE,
      "--metrics-addr",
      "127.0.0.1:0",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const logs: string[] = [];
  child.stderr?.on("data", (d: Buffer) => logs.push(d.toString()));
  const address = await new Promise<string>((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    lines.on("line", (line) => {
      logs.push(line);
      const entry = JSON.parse(line) as { msg?: string; address?: string };
      if (entry.msg === "operator listening" && entry.address !== undefined) resolve(entry.address);
    });
    child.once("exit", (code) => reject(new Error(`operator exited with ${code}: ${logs.join("\n")}`)));
  });
  return { child, address, logs };
}

async function scrape(address: string, path: string): Promise<{ code: number; body: string }> {
  const res = await fetch(`http://${address}${path}`);
  return { code: res.status, body: await res.text() };
}

describe("dfe-archiver-operator", () => {
  before(installCrds);

  it("creates, updates, leaves alone, reports on and gives up a pipeline's objects", async (t) => {
    const namespace = await kubeNamespace(t);
    const op = await startOperator(namespace);
    let exited = false;
    const exit = new Promise<number | null>((resolve) =>
      op.child.once("exit", (code) => {
        exited = true;
        resolve(code);
      }),
    );
    t.after(() => {
      if (!exited) op.child.kill("SIGKILL");
    });
    const healthz = await scrape(op.address, "/healthz");
    assert.equal(healthz.code, 200);

    const cr = await createPipeline(namespace, "events", {
      kafka: { brokers: ["kafka:9092"], topics: ["events"] },
      archive: { destination: "minio://archive/events", minio: { endpoint: "http://minio:9000" } },
      compression: { codec: "zstd" },
      keda: { maxReplicaCount: 3 },
    });
    const wanted = owned("events", namespace);
    const live = await eventually("owned objects", async () => {
      const all = await Promise.all(wanted.map(read));
      return all.every((o) => o !== undefined) ? all : undefined;
    });
    for (const o of live) {
      const ref = o!.metadata?.ownerReferences?.[0];
      assert.equal(ref?.uid, cr.metadata.uid, `${o!.kind} not owned by the pipeline`);
      assert.equal(ref?.controller, true);
    }

    // Status: the operator's conditions, observedGeneration, and no phase.
    const reconciled = await eventually("status", async () => {
      const p = (await custom.getNamespacedCustomObject({ ...CR, namespace, name: "events" })) as ArchivePipeline;
      return p.status?.conditions?.length === 4 ? p : undefined;
    });
    const conditions = Object.fromEntries(reconciled.status!.conditions!.map((c) => [c.type, c]));
    assert.equal(reconciled.status?.observedGeneration, 1);
    assert.equal(conditions["Ready"]?.status, "False", "no kubelet: no pod can be ready");
    assert.equal(conditions["Ready"]?.reason, "PodsNotReady");
    assert.equal(conditions["ScalingReady"]?.reason, "ScaledObjectApplied");
    assert.equal(conditions["Degraded"]?.status, "False");
    assert.ok(!("phase" in reconciled.status!));

    // A spec edit reaches the ConfigMap.
    await custom.patchNamespacedCustomObject(
      { ...CR, namespace, name: "events", body: { spec: { compression: { codec: "lz4" } } } },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
    await eventually("the ConfigMap to follow the codec", async () => {
      const cm = (await read(wanted[0]!)) as { data?: Record<string, string> } | undefined;
      return cm?.data?.["config.yaml"]?.includes("codec: lz4") ? true : undefined;
    });
    await eventually("observedGeneration 2", async () => {
      const p = (await custom.getNamespacedCustomObject({ ...CR, namespace, name: "events" })) as ArchivePipeline;
      return p.status?.observedGeneration === 2 ? true : undefined;
    });

    // Three more reconciles with nothing changed write nothing: not the owned objects, not the pipeline.
    const versions = async () =>
      Promise.all(
        [
          ...wanted,
          { apiVersion: `${GROUP}/${VERSION}`, kind: "ArchivePipeline", metadata: { name: "events", namespace } },
        ].map(async (o) => `${o.kind}=${(await read(o))?.metadata?.resourceVersion}`),
      );
    await sleep(500);
    const before = await versions();
    const reconciler = new Reconciler(kc, { image: IMAGE, log: pino({ level: "silent" }) });
    for (let i = 0; i < 3; i++) await reconciler.reconcile(`${namespace}/events`);
    assert.deepEqual(await versions(), before);

    const metrics = await scrape(op.address, "/metrics");
    assert.match(metrics.body, /^reconcile_total\{result="success"\} [1-9]/m);
    assert.match(metrics.body, /^workqueue_depth \d/m);
    assert.equal((await scrape(op.address, "/readyz")).code, 200);

    // Deleted: the garbage collector removes what the pipeline owned.
    await custom.deleteNamespacedCustomObject({ ...CR, namespace, name: "events" });
    await eventually(
      "garbage collection",
      async () => ((await Promise.all(wanted.map(read))).every((o) => o === undefined) ? true : undefined),
      60_000,
    );

    op.child.kill("SIGTERM");
    assert.equal(await exit, 0, op.logs.join("\n"));
    assert.ok(op.logs.some((l) => l.includes("operator stopped")));
  });
});
