// The runtime pods' reports into status.pods, on the testbed's kube-apiserver, with the credentials a pod has: a
// TokenRequest token of the ServiceAccount the operator renders. First the reporter driven by a Health directly
// (each pod owns its entry under its own field manager; changes, heartbeats; another pipeline's status refused and
// retried with backoff); then the real runtime process beside a running operator, idle until the spec gives it a
// destination, with the operator's conditions and `kubectl get`'s columns following, and the report of a pod that
// is gone pruned.
import assert from "node:assert/strict";
import { join } from "node:path";
import { before, describe, it } from "node:test";
import {
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
  type V1Deployment,
  type V1ObjectMeta,
} from "@kubernetes/client-node";
import pino from "pino";
import { GROUP, PLURAL, VERSION } from "../../src/api/group.ts";
import type { ArchivePipeline, PodReport } from "../../src/api/spec.ts";
import { objectNames } from "../../src/render/index.ts";
import { PIPELINE_LABEL } from "../../src/render/meta.ts";
import { Health } from "../../../runtime/src/observe/health.ts";
import { podFieldManager, startStatusReporter, type StatusReporter } from "../../../runtime/src/observe/report.ts";
import { startArchiver, tempDir, waitFor } from "../../../e2e/support/archiver.ts";
import { configMapMount } from "../../../e2e/support/configmap.ts";
import { kafkaTopic, kubeConfig, kubeNamespace, need } from "../../../e2e/support/testbed.ts";
import {
  applyPodRbac,
  conditionOf,
  containerEnv,
  createPipeline,
  eventually,
  installCrds,
  readPipeline,
  runOperator,
  serviceAccountKubeconfig,
} from "../support/kube.ts";

const kc = kubeConfig();
const custom = kc.makeApiClient(CustomObjectsApi);
const core = kc.makeApiClient(CoreV1Api);
const apps = kc.makeApiClient(AppsV1Api);
const CR = { group: GROUP, version: VERSION, plural: PLURAL };

/** A logger whose entries the test reads. */
function capturedLog() {
  const entries: Record<string, unknown>[] = [];
  const log = pino(
    { level: "debug" },
    { write: (s: string) => entries.push(JSON.parse(s) as Record<string, unknown>) },
  );
  return { log, entries };
}

const entry = (p: ArchivePipeline, pod: string): PodReport | undefined => p.status?.pods?.find((e) => e.name === pod);

/** The pipelines as `kubectl get archivepipelines` shows them: the apiserver's Table, column name to cell. */
async function kubectlGet(namespace: string): Promise<Record<string, Record<string, unknown>>> {
  const table = (await custom.listNamespacedCustomObject(
    { ...CR, namespace },
    setHeaderOptions("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io"),
  )) as { columnDefinitions: { name: string }[]; rows: { cells: unknown[] }[] };
  const cols = table.columnDefinitions.map((c) => c.name);
  return Object.fromEntries(
    table.rows.map((r) => {
      const row = Object.fromEntries(cols.map((c, i) => [c, r.cells[i]]));
      return [String(row["Name"]), row];
    }),
  );
}

describe("pods' reports into status.pods", () => {
  before(installCrds);

  it("gives each pod its own entry, reports changes and heartbeats, and is refused another pipeline", async (t) => {
    const namespace = await kubeNamespace(t);
    const own = await createPipeline(namespace, "own", {});
    await createPipeline(namespace, "other", {});
    await applyPodRbac(own);
    const { file } = await serviceAccountKubeconfig(t, namespace, objectNames("own").workload);
    const env = (pod: string, pipeline = "own") => ({
      POD_NAME: pod,
      POD_NAMESPACE: namespace,
      DFE_ARCHIVER_PIPELINE_NAME: pipeline,
      KUBECONFIG: file,
    });
    const { log, entries } = capturedLog();
    const reporters: StatusReporter[] = [];
    t.after(() => Promise.all(reporters.map((r) => r.close())));
    const start = async (
      health: Health,
      e: Record<string, string>,
      o: { heartbeatMs?: number; retryMaxMs?: number } = {},
    ) => {
      const r = await startStatusReporter({ health, env: e, log, debounceMs: 50, retryBaseMs: 100, ...o });
      assert.ok(r, "a reporter in a pod's env");
      reporters.push(r);
      return r;
    };

    const idle = new Health();
    idle.setIdle(true);
    idle.set("work_config", "degraded", "no destination configured");
    const busy = new Health();
    await start(idle, env("own-a"), { heartbeatMs: 1_500 });
    await start(busy, env("own-b"));
    let p = await eventually("both pods' entries", async () => {
      const p = await readPipeline(namespace, "own");
      return entry(p, "own-a") && entry(p, "own-b") ? p : undefined;
    });
    assert.equal(entry(p, "own-a")?.state, "Idle");
    assert.equal(entry(p, "own-a")?.reason, "no destination configured");
    assert.equal(entry(p, "own-b")?.state, "Running");
    assert.deepEqual(entry(p, "own-b")?.components?.sink, { state: "ok" });

    // Each pod's manager owns its own entry of the list and nothing else.
    for (const [pod, otherPod] of [
      ["own-a", "own-b"],
      ["own-b", "own-a"],
    ] as const) {
      const meta = p.metadata as ArchivePipeline["metadata"] & V1ObjectMeta;
      const m = meta.managedFields?.find((f) => f.manager === podFieldManager(pod));
      assert.equal(m?.operation, "Apply");
      assert.equal(m?.subresource, "status");
      const owned = JSON.stringify(m?.fieldsV1);
      assert.ok(owned.includes(`k:{\\"name\\":\\"${pod}\\"}`), `${pod} owns its entry: ${owned}`);
      assert.ok(!owned.includes(otherPod), `${pod} owns nothing of ${otherPod}'s`);
    }

    // A change is reported (debounced), and leaves the other pod's entry as it was.
    const aBefore = entry(p, "own-a")!;
    busy.set("sink", "degraded", "store unreachable");
    p = await eventually("own-b degraded", async () => {
      const p = await readPipeline(namespace, "own");
      return entry(p, "own-b")?.state === "Degraded" ? p : undefined;
    });
    assert.equal(entry(p, "own-b")?.reason, "sink degraded: store unreachable");
    assert.equal(entry(p, "own-a")?.state, aBefore.state);

    // The heartbeat reports again with nothing changed: only its time moves.
    p = await eventually("own-a's heartbeat", async () => {
      const p = await readPipeline(namespace, "own");
      return entry(p, "own-a")!.lastReport > aBefore.lastReport ? p : undefined;
    });
    assert.deepEqual({ ...entry(p, "own-a"), lastReport: "" }, { ...aBefore, lastReport: "" });

    // RBAC: the Role names its own pipeline only. The refusal is logged and retried with backoff.
    await start(new Health(), env("own-c", "other"), { retryMaxMs: 400 });
    const failures = () =>
      entries.filter((e) => e["msg"] === "status report failed" && e["pipeline"] === `${namespace}/other`);
    await waitFor(
      () => failures().length >= 4,
      30_000,
      () => `four refusals logged: ${JSON.stringify(failures())}`,
    );
    assert.deepEqual(
      failures()
        .slice(0, 4)
        .map((e) => e["retryInMs"]),
      [100, 200, 400, 400],
    );
    assert.match(String(failures()[0]!["err"]), /^HTTP 403/);
    assert.equal((await readPipeline(namespace, "other")).status?.pods, undefined);

    // Closed: no report after.
    for (const r of reporters.splice(0)) await r.close();
    const lastA = entry(await readPipeline(namespace, "own"), "own-a")!.lastReport;
    await new Promise((r) => setTimeout(r, 2_500));
    assert.equal(entry(await readPipeline(namespace, "own"), "own-a")!.lastReport, lastA);
  });

  it("has a runtime process report Idle, then Running once the spec sets a destination, and the operator follow", async (t) => {
    const namespace = await kubeNamespace(t);
    const topic = await kafkaTopic(t);
    const dir = tempDir(t);
    await runOperator(t, namespace);
    await createPipeline(namespace, "events", {
      kafka: { brokers: [need("TESTBED_KAFKA_BROKERS")], topics: [topic], groupId: `g-${topic}` },
      buffer: { spoolDir: join(dir, "spool") },
      dlq: { enabled: false },
    });
    const names = objectNames("events");

    // kube-controller-manager makes the Deployment's pod (Pending: the testbed has no kubelet); this process plays it.
    const pod = await eventually("the Deployment's pod", async () => {
      const pods = await core.listNamespacedPod({ namespace, labelSelector: `${PIPELINE_LABEL}=events` });
      return pods.items[0]?.metadata?.name;
    });
    const dep: V1Deployment = await apps.readNamespacedDeployment({ name: names.workload, namespace });
    const configMap = await core.readNamespacedConfigMap({ name: names.config, namespace });
    const mount = configMapMount(join(dir, "config"), configMap.data!);
    const { file } = await serviceAccountKubeconfig(t, namespace, names.workload);
    const runtime = await startArchiver(
      t,
      {},
      { configPath: mount.path, dir, env: { ...containerEnv(dep, { name: pod, namespace }), KUBECONFIG: file } },
    );

    let p = await eventually("the pod's Idle report and the Idle condition", async () => {
      const p = await readPipeline(namespace, "events");
      return entry(p, pod)?.state === "Idle" && conditionOf(p, "Idle")?.reason === "PodsIdle" ? p : undefined;
    });
    assert.match(entry(p, pod)!.reason!, /no destination configured/);
    assert.equal(conditionOf(p, "Idle")?.status, "True");
    assert.match(conditionOf(p, "Idle")!.message, new RegExp(`Every pod reports idle \\(${pod}\\)`));
    assert.equal(conditionOf(p, "Degraded")?.status, "False");
    let row = (await kubectlGet(namespace))["events"]!;
    assert.equal(row["Idle"], "True");
    assert.equal(row["Degraded"], "False");

    // A destination in the spec: the operator re-renders the ConfigMap, the kubelet would swap it into the mount.
    // (The volume it needs changes the pod template; the old pod stays until a new one is ready, which is never here.)
    const destination = `file://${join(dir, "archive")}`;
    await custom.patchNamespacedCustomObject(
      {
        ...CR,
        namespace,
        name: "events",
        body: { spec: { archive: { destination }, archiveVolume: { claimName: "archive" } } },
      },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
    const updated = await eventually("the ConfigMap with the destination", async () => {
      const cm = await core.readNamespacedConfigMap({ name: names.config, namespace });
      return cm.data?.["config.yaml"]?.includes(destination) ? cm.data : undefined;
    });
    mount.update(updated);
    let last: ArchivePipeline | undefined;
    p = await eventually(
      "the pod's Running report and Idle False",
      async () => {
        const p = (last = await readPipeline(namespace, "events"));
        return entry(p, pod)?.state === "Running" && conditionOf(p, "Idle")?.status === "False" ? p : undefined;
      },
      { ms: 90_000, detail: () => `status: ${JSON.stringify(last?.status)}\nruntime:\n${runtime.output()}` },
    );
    assert.equal(conditionOf(p, "Idle")?.reason, "PodsArchiving");
    assert.match(conditionOf(p, "Idle")!.message, new RegExp(`${pod} Running`));
    assert.deepEqual(entry(p, pod)?.components?.transport?.state, "ok");
    assert.equal(entry(p, pod)?.deliveryGuarantee, "at_least_once");
    row = (await kubectlGet(namespace))["events"]!;
    assert.equal(row["Idle"], "False");
    assert.equal(row["Destination"], destination);

    // The pod goes (its process first, as with a real pod): the operator drops its report.
    assert.equal(await runtime.stop(), 0, runtime.output());
    await core.deleteNamespacedPod({ name: pod, namespace, gracePeriodSeconds: 0 });
    // No report left: Idle is Unknown until the new pod reports.
    await eventually("the gone pod's report pruned, and Idle without it", async () => {
      const p = await readPipeline(namespace, "events");
      return entry(p, pod) === undefined && conditionOf(p, "Idle")?.reason === "NoReports" ? p : undefined;
    });
  });
});
