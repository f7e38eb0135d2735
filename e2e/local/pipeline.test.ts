// The kind scenario on the testbed: the operator, against the real apiserver, renders an ArchivePipeline; a local
// kubelet (kubelet.ts) starts the runtime exactly as the rendered pod template says, consuming the testbed's Kafka
// and writing to MinIO. Every record produced is found in MinIO, the pod reports into the pipeline's status, and a
// codec edit through the apiserver reaches the running process through its ConfigMap mount, with no restart.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { test, type TestContext } from "node:test";
import {
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  PatchStrategy,
  setHeaderOptions,
  type V1Deployment,
  type V1Pod,
} from "@kubernetes/client-node";
import { GetObjectCommand, ListObjectsV2Command } from "@aws-sdk/client-s3";
import { GROUP, PLURAL, VERSION } from "../../operator/src/api/group.ts";
import type { ArchivePipeline } from "../../operator/src/api/spec.ts";
import { objectNames } from "../../operator/src/render/index.ts";
import { createPipeline, installCrds } from "../../operator/test/support/kube.ts";
import { decompressWithCli, nodeBin, produce, tempDir, waitFor } from "../support/archiver.ts";
import { kafkaTopic, kubeConfig, kubeNamespace, minioBucket, need, s3Client, uniqueName } from "../support/testbed.ts";
import { runPod } from "./kubelet.ts";

const kc = kubeConfig();
const CR = { group: GROUP, version: VERSION, plural: PLURAL };

async function startOperator(t: TestContext, namespace: string): Promise<void> {
  const child = spawn(
    nodeBin,
    [
      "operator/src/main.ts",
      "--kubeconfig",
      need("TESTBED_KUBECONFIG"),
      "--namespace",
      namespace,
      "--no-leader-elect",
      "--metrics-addr",
      "127.0.0.1:0",
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  const logs: string[] = [];
  child.stderr?.on("data", (d: Buffer) => logs.push(d.toString()));
  t.after(() => {
    child.kill("SIGTERM");
  });
  await new Promise<void>((resolve, reject) => {
    createInterface({ input: child.stdout! }).on("line", (line) => {
      logs.push(line);
      if (line.includes('"operator listening"')) resolve();
    });
    child.once("exit", (code) => reject(new Error(`operator exited with ${code}: ${logs.join("\n")}`)));
  });
}

/** Every object under the bucket, decompressed by its codec's CLI, with its key. */
async function archived(bucket: string, dir: string): Promise<{ key: string; lines: string[] }[]> {
  const s3 = s3Client();
  try {
    const out: { key: string; lines: string[] }[] = [];
    let token: string | undefined;
    do {
      const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket, ContinuationToken: token }));
      for (const o of page.Contents ?? []) {
        const key = o.Key ?? "";
        const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
        const file = join(dir, key.replaceAll("/", "_"));
        writeFileSync(file, Buffer.from((await got.Body?.transformToByteArray()) ?? []));
        out.push({ key, lines: decompressWithCli(file).toString().trimEnd().split("\n") });
      }
      token = page.NextContinuationToken;
    } while (token);
    return out;
  } finally {
    s3.destroy();
  }
}

test("operator-rendered pod runs the runtime: Kafka to MinIO, status reported, codec edit applied live", async (t) => {
  const N = 20_000;
  await installCrds();
  const namespace = await kubeNamespace(t);
  const bucket = await minioBucket(t);
  const topic = await kafkaTopic(t, { partitions: 3 });
  const dir = tempDir(t);
  const core = kc.makeApiClient(CoreV1Api);
  const apps = kc.makeApiClient(AppsV1Api);
  const custom = kc.makeApiClient(CustomObjectsApi);
  await core.createNamespacedSecret({
    namespace,
    body: {
      metadata: { name: "minio-credentials" },
      stringData: { accesskey: need("TESTBED_MINIO_ACCESS_KEY"), secretkey: need("TESTBED_MINIO_SECRET_KEY") },
    },
  });
  await startOperator(t, namespace);
  const name = "orders";
  const ref = (key: string) => ({ secretKeyRef: { name: "minio-credentials", key } });
  await createPipeline(namespace, name, {
    kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), topics: [topic], groupId: uniqueName("g") },
    archive: {
      destination: `minio://${bucket}/events`,
      rollIntervalSecs: 2,
      minio: { endpoint: need("TESTBED_MINIO_ENDPOINT"), accessKey: ref("accesskey"), secretKey: ref("secretkey") },
    },
    buffer: { flushAgeSecs: 1 },
    compression: { codec: "zstd" },
    routing: { mode: "expression", expressionFields: ["_org_id"] },
    dlq: { enabled: false },
    spool: { sizeLimit: "256Mi" },
  } as ArchivePipeline["spec"]);

  const workload = objectNames(name).workload;
  let deployment: V1Deployment | undefined;
  await waitFor(
    async () => {
      deployment = await apps.readNamespacedDeployment({ name: workload, namespace }).catch(() => undefined);
      return deployment !== undefined;
    },
    30_000,
    () => "the operator rendered no Deployment",
  );
  // The ReplicaSet controller creates the Pod; this test's kubelet runs it.
  const selector = Object.entries(deployment!.spec!.selector.matchLabels ?? {})
    .map(([k, v]) => `${k}=${v}`)
    .join(",");
  let scheduled: V1Pod | undefined;
  await waitFor(
    async () => {
      scheduled = (await core.listNamespacedPod({ namespace, labelSelector: selector })).items[0];
      return scheduled !== undefined;
    },
    30_000,
    () => "no Pod was created for the Deployment",
  );
  const podName = scheduled!.metadata!.name!;
  const pod = await runPod(t, { kc, pod: scheduled! });
  const metrics = `http://127.0.0.1:${pod.port("metrics")}`;
  await waitFor(
    async () => (await fetch(`${metrics}/readyz`).catch(() => undefined))?.ok === true,
    60_000,
    () => `the pod never became ready:\n${pod.output().slice(-4000)}`,
  );

  await produce(topic, N, (i) => ({ value: JSON.stringify({ id: i, _org_id: `org-${i % 5}` }) }));
  const ids = async () => {
    const seen = new Set<number>();
    for (const o of await archived(bucket, dir))
      for (const l of o.lines) seen.add((JSON.parse(l) as { id: number }).id);
    return seen;
  };
  await waitFor(
    async () => (await ids()).size === N,
    120_000,
    () => `not every record reached MinIO:\n${pod.output().slice(-4000)}`,
  );

  // The pod reported itself, and the operator's conditions read it.
  const pipeline = async () =>
    (await custom.getNamespacedCustomObject({ ...CR, namespace, name })) as ArchivePipeline & {
      status?: { pods?: { name: string; state: string }[]; conditions?: { type: string; status: string }[] };
    };
  let last: unknown;
  await waitFor(
    async () => {
      const s = (await pipeline()).status;
      last = s;
      return (
        s?.pods?.some((p) => p.name === podName && p.state === "Running") === true &&
        s.conditions?.some((c) => c.type === "Ready" && c.status === "True") === true
      );
    },
    60_000,
    () => `status never showed the pod running: ${JSON.stringify(last)}\n${pod.output().slice(-3000)}`,
  );

  // A codec edit through the apiserver: the operator rewrites the ConfigMap, the mount swaps, the runtime reloads.
  const templateBefore = JSON.stringify(deployment!.spec!.template);
  await custom.patchNamespacedCustomObject(
    { ...CR, namespace, name, body: { spec: { compression: { codec: "lz4" } } } },
    setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
  );
  await waitFor(
    () => pod.output().includes('"compression":{"codec":"lz4"'),
    60_000,
    () => `the runtime never started on the edited config:\n${pod.output().slice(-3000)}`,
  );
  await produce(topic, N, (i) => ({ value: JSON.stringify({ id: N + i, _org_id: `org-${i % 5}` }) }));
  let seen = "";
  await waitFor(
    async () => {
      const objects = await archived(bucket, dir);
      const lz4 = objects.filter((o) => o.key.endsWith(".lz4"));
      const n = (await ids()).size;
      const m = await fetch(`${metrics}/metrics`).then((r) => r.text());
      seen = `${lz4.length} lz4 objects, ${n} ids; ${m
        .split("\n")
        .filter((l) => /^dfe_archiver_(messages|uploads|staged)/.test(l))
        .join("; ")}`;
      return lz4.length > 0 && n === 2 * N;
    },
    120_000,
    () => `not every record in MinIO after the codec edit (${seen}):\n${pod.output().slice(-2000)}`,
  );
  assert.equal(pod.proc.exitCode, null, "the runtime restarted");
  assert.equal(pod.proc.pid, pod.pid);
  const after = await apps.readNamespacedDeployment({ name: workload, namespace });
  assert.equal(JSON.stringify(after.spec?.template), templateBefore, "a config edit must not roll the pods");
  assert.equal(await pod.stop("SIGTERM"), 0, pod.output().slice(-4000));
});
