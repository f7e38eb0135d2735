// The whole product on a Kubernetes cluster of the testbed's own (e2e/testbed/cluster/up.sh: a control plane of its
// own, one kubelet node on Debian's containerd, kube-proxy, CoreDNS). Both images are built by the testbed's engine and
// imported into the node; KEDA's operator and metrics apiserver, built from KEDA's module, are installed from KEDA's
// own manifests (config/minimal); the operator's Helm chart is installed; the MinIO sample of config/samples is applied
// as it is. Its Kafka and MinIO are servers of the test's own on the node's address, behind Services named as the
// sample names them, which CoreDNS resolves and kube-proxy routes.
//
// It passes when: the pipeline turns Ready, with KEDA's ScaledObject applied and Ready; every record produced is read
// back from MinIO; the runtime's container, SIGKILLed through containerd, is restarted by the kubelet and no record is
// lost; the pipeline's status carries its pod's report, Degraded while MinIO is down and healthy again after; KEDA's
// external metric (the pipeline's pressure trigger) reaches the HPA through KEDA's metrics apiserver.
//
// Not part of `npm test`: `npm run e2e:cluster` (e2e/cluster/run.sh). DFE_ARCHIVER_KEEP_CLUSTER=1 leaves what it
// installed for a look (the next run removes it first).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { test, type TestContext } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { CreateBucketCommand, GetObjectCommand, ListObjectsV2Command } from "@aws-sdk/client-s3";
import { stringify } from "yaml";
import { objectNames } from "../../operator/src/render/index.ts";
import { CONFIG_LEAVES } from "../../runtime/src/config/schema.ts";
import { CONTAINER_NAME } from "../../operator/src/render/workload.ts";
import { decompressWithCli, linesOf, produce, waitFor } from "../support/archiver.ts";
import { buildImages, docker, OPERATOR, run, RUNTIME } from "../support/containers.ts";
import { chartDir, kustomize, manifestFile, repo, type Manifest } from "../support/packaging.ts";
import { kafka, need, privateKafka, privateMinio, s3Client } from "../support/testbed.ts";

const SAMPLE = join(repo, "config/samples/archiver_v1alpha1_archivepipeline_minio.yaml");
const RELEASE = "dfe-archiver-operator";
const OPERATOR_NS = "dfe-archiver-system";
const NS = "archives";
const N = 5000;
const WAIT = 300_000;
const FIELD_MANAGER = "dfe-cluster-e2e";

interface Condition {
  type: string;
  status: string;
  reason: string;
  message: string;
}
interface Pipeline {
  status?: {
    conditions?: Condition[];
    pods?: { name: string; state: string; reason?: string }[];
  };
}

const kubectl = (args: readonly string[], opts: { allowFailure?: boolean } = {}) =>
  run(need("TESTBED_CLUSTER_KUBECTL"), ["--kubeconfig", need("TESTBED_CLUSTER_KUBECONFIG"), ...args], opts);
const json = async <T>(args: readonly string[]): Promise<T> =>
  JSON.parse((await kubectl([...args, "-o", "json"])).stdout) as T;
const helm = (args: readonly string[], opts: { allowFailure?: boolean } = {}) =>
  run(need("TESTBED_HELM"), ["--kubeconfig", need("TESTBED_CLUSTER_KUBECONFIG"), ...args], opts);
const crictl = (args: readonly string[]) =>
  run(need("TESTBED_CLUSTER_CRICTL"), ["--runtime-endpoint", `unix://${need("TESTBED_CLUSTER_CONTAINERD")}`, ...args]);
/** The node's containerd, in the namespace the kubelet's containers and images live in. */
const ctr = (args: readonly string[]) =>
  run(need("TESTBED_CTR"), ["--address", need("TESTBED_CLUSTER_CONTAINERD"), "--namespace", "k8s.io", ...args]);

/** Writes `docs` as one YAML stream in `dir` and applies it server-side. */
async function apply(dir: string, name: string, docs: readonly object[] | string): Promise<void> {
  const file = join(dir, `${name}.yaml`);
  writeFileSync(file, typeof docs === "string" ? docs : docs.map((d) => stringify(d)).join("---\n"));
  await kubectl(["apply", "--server-side", "--field-manager", FIELD_MANAGER, "-f", file]);
}

/**
 * KEDA's own manifests (config/minimal: no admission webhooks), with the images cluster/up.sh made and imported,
 * written into `dir`; returns the file.
 */
function kedaManifests(dir: string): string {
  const overlay = mkdtempSync(join(dir, "keda-"));
  const tag = need("TESTBED_CLUSTER_KEDA_TAG");
  const deployment = (name: string, ...ops: object[]) => ({
    target: { kind: "Deployment", name },
    patch: stringify(ops),
  });
  // Theirs is Always, which asks a registry; the images are in the node already.
  const never = { op: "replace", path: "/spec/template/spec/containers/0/imagePullPolicy", value: "Never" };
  writeFileSync(
    join(overlay, "kustomization.yaml"),
    stringify({
      apiVersion: "kustomize.config.k8s.io/v1beta1",
      kind: "Kustomization",
      // (kustomize takes no absolute path here, only one relative to the overlay)
      resources: [relative(overlay, join(need("TESTBED_CLUSTER_KEDA_CONFIG"), "minimal"))],
      images: [
        { name: "ghcr.io/kedacore/keda", newTag: tag },
        { name: "ghcr.io/kedacore/keda-metrics-apiserver", newTag: tag },
      ],
      patches: [
        // No webhooks to patch certificates into, as KEDA's Helm chart runs it with its webhooks off.
        deployment("keda-operator", never, {
          op: "add",
          path: "/spec/template/spec/containers/0/args/-",
          value: "--enable-webhook-patching=false",
        }),
        deployment("keda-metrics-apiserver", never),
      ],
    }),
  );
  const file = join(dir, "keda.yaml");
  writeFileSync(file, kustomize(["build", "--load-restrictor", "LoadRestrictionsNone", overlay]).stdout);
  return file;
}

/** Everything a run installs, gone: what a previous run left (kept, or cut short) too. */
async function uninstall(): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "dfe-cluster-uninstall-"));
  try {
    await kubectl(["delete", "namespace", NS, "--ignore-not-found", "--wait", "--timeout=120s"]);
    await helm(["uninstall", RELEASE, "--namespace", OPERATOR_NS, "--ignore-not-found", "--wait"]);
    // Helm leaves a chart's CRDs; a new run installs the current one.
    for (const o of manifestFile(join(chartDir, "crds", "archivepipelines.archiver.dfe.io.yaml")))
      await kubectl(["delete", "crd", o.metadata.name, "--ignore-not-found"]);
    await kubectl(["delete", "-f", kedaManifests(dir), "--ignore-not-found", "--wait", "--timeout=120s"]);
    const namespaces = [OPERATOR_NS, sample.kafka.namespace, sample.minio.namespace];
    await kubectl(["delete", "namespace", ...namespaces, "--ignore-not-found", "--wait", "--timeout=120s"]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * A server outside the cluster as a Service: no selector, one EndpointSlice, so that `name.namespace.svc:port` leads
 * to `target` (ip:port).
 */
function externalService(
  { name, namespace, port }: { name: string; namespace: string; port: number },
  target: string,
): object[] {
  const [ip = "", targetPort = ""] = target.split(":");
  return [
    { apiVersion: "v1", kind: "Namespace", metadata: { name: namespace } },
    {
      apiVersion: "v1",
      kind: "Service",
      metadata: { name, namespace },
      spec: { ports: [{ name: "main", port, targetPort: Number(targetPort), protocol: "TCP" }] },
    },
    {
      apiVersion: "discovery.k8s.io/v1",
      kind: "EndpointSlice",
      metadata: {
        name,
        namespace,
        labels: { "kubernetes.io/service-name": name, "endpointslice.kubernetes.io/managed-by": FIELD_MANAGER },
      },
      addressType: "IPv4",
      ports: [{ name: "main", port: Number(targetPort), protocol: "TCP" }],
      endpoints: [{ addresses: [ip], conditions: { ready: true } }],
    },
  ];
}

/** A `name.namespace.svc:port` the sample names. */
function service(hostPort: string): { name: string; namespace: string; port: number } {
  const m = /^([a-z0-9-]+)\.([a-z0-9-]+)\.svc:(\d+)$/.exec(hostPort);
  if (!m?.[1] || !m[2] || !m[3]) throw new Error(`${SAMPLE}: ${hostPort}: expected name.namespace.svc:port`);
  return { name: m[1], namespace: m[2], port: Number(m[3]) };
}

/** What the sample expects around it, read from it, so that it applies unchanged. */
function readSample() {
  const docs = manifestFile(SAMPLE);
  const cr = docs.find((o) => o.kind === "ArchivePipeline") as Manifest & {
    spec: {
      kafka: { brokers: string[]; topics: string[] };
      archive: { destination: string; minio: { endpoint: string } };
    };
  };
  const secret = docs.find((o) => o.kind === "Secret") as Manifest & { stringData: Record<string, string> };
  const [broker = "", ...others] = cr.spec.kafka.brokers;
  if (others.length > 0) throw new Error(`${SAMPLE}: expected one broker, found ${cr.spec.kafka.brokers.join(", ")}`);
  const [, bucket = "", prefix = ""] = /^minio:\/\/([^/]+)\/(.+)$/.exec(cr.spec.archive.destination) ?? [];
  return {
    name: cr.metadata.name,
    topic: cr.spec.kafka.topics[0] ?? "",
    bucket,
    prefix,
    keys: { accessKey: secret.stringData["accesskey"] ?? "", secretKey: secret.stringData["secretkey"] ?? "" },
    kafka: service(broker),
    minio: service(new URL(cr.spec.archive.minio.endpoint).host),
  };
}
const sample = readSample();

function condition(p: Pipeline, type: string): Condition | undefined {
  return p.status?.conditions?.find((c) => c.type === type);
}

test(
  "the chart, KEDA and the MinIO sample's pipeline run as pods on a cluster of the testbed's own",
  { timeout: 3_600_000 },
  async (t: TestContext) => {
    const dir = mkdtempSync(join(tmpdir(), "dfe-cluster-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const phase = (() => {
      let last = performance.now();
      return (what: string) => {
        const now = performance.now();
        t.diagnostic(`${what}: ${((now - last) / 1000).toFixed(1)} s`);
        last = now;
      };
    })();
    const pipeline = () => json<Pipeline>(["-n", NS, "get", "archivepipeline", sample.name]);
    const failed = async () => {
      const out = [`pipeline: ${JSON.stringify((await pipeline().catch((): Pipeline => ({}))).status ?? {})}`];
      for (const [ns, what] of [
        [OPERATOR_NS, `deploy/${RELEASE}`],
        [NS, `deploy/${objectNames(sample.name).workload}`],
        ["keda", "deploy/keda-operator"],
      ] as const) {
        const logs = await kubectl(["-n", ns, "logs", what, "--tail=40"], { allowFailure: true });
        out.push(`${ns} ${what}:\n${logs.stdout}${logs.stderr}`);
      }
      return out.join("\n");
    };
    /** Waits for `cond`, asking every 2 s (each ask runs kubectl or reads the bucket); fails with the pods' story. */
    const until = async (cond: () => Promise<boolean>, what: string) =>
      waitFor(
        async () => (await cond()) || (await sleep(2000), false),
        WAIT,
        () => what,
      ).catch(async (e: unknown) => assert.fail(`${String(e)}\n${await failed()}`));

    await uninstall();
    // (after hooks run in order, and one that throws ends the rest: this one reports instead)
    if (process.env["DFE_ARCHIVER_KEEP_CLUSTER"] !== "1")
      t.after(() => uninstall().catch((e: unknown) => t.diagnostic(`uninstall failed: ${String(e)}`)));
    phase("previous run's objects removed");

    // --- the images, into the node ---
    for (const line of await buildImages()) t.diagnostic(line);
    const images = join(dir, "images.tar");
    await docker(["save", "--output", images, RUNTIME, OPERATOR]);
    await ctr(["images", "import", images]);
    rmSync(images);
    phase("images built and imported into the node's containerd");

    // --- Kafka and MinIO where pods reach them, behind the sample's Services ---
    const address = need("TESTBED_CLUSTER_ADDRESS");
    const [brokers, minio] = await Promise.all([
      privateKafka(t, { host: address }),
      privateMinio(t, { host: address, keys: sample.keys }),
    ]);
    process.env["TESTBED_KAFKA_BROKERS"] = brokers.brokers; // produce() and kafka() use it
    const admin = kafka().admin();
    await admin.connect();
    // The sample's topic, and the DLQ topic its pods write to by default (as a user creates both).
    const dlq = String(CONFIG_LEAVES.find((l) => l.key === "dlq.topic")?.schema.parse(undefined));
    await admin.createTopics({
      topics: [
        { topic: sample.topic, numPartitions: 3 },
        { topic: dlq, numPartitions: 1 },
      ],
      waitForLeaders: true,
    });
    await admin.disconnect();
    const s3 = s3Client(minio.endpoint, sample.keys);
    t.after(() => s3.destroy());
    await s3.send(new CreateBucketCommand({ Bucket: sample.bucket }));
    await apply(dir, "services", [
      ...externalService(sample.kafka, brokers.brokers),
      ...externalService(sample.minio, new URL(minio.endpoint).host),
    ]);
    phase(
      `Kafka (${brokers.brokers}) and MinIO (${minio.endpoint}) behind the sample's ${sample.kafka.name}.${sample.kafka.namespace}.svc and ${sample.minio.name}.${sample.minio.namespace}.svc`,
    );

    // --- KEDA, then the chart ---
    await kubectl(["apply", "--server-side", "--field-manager", FIELD_MANAGER, "-f", kedaManifests(dir)]);
    for (const d of ["keda-operator", "keda-metrics-apiserver"])
      await kubectl(["-n", "keda", "rollout", "status", `deployment/${d}`, `--timeout=${WAIT / 1000}s`]);
    await kubectl([
      "wait",
      "apiservice/v1beta1.external.metrics.k8s.io",
      "--for=condition=Available",
      `--timeout=${WAIT / 1000}s`,
    ]);
    phase("KEDA installed, its metrics apiserver Available");
    const [opRepo = "", opTag = ""] = OPERATOR.split(":");
    const [rtRepo = "", rtTag = ""] = RUNTIME.split(":");
    await helm([
      "install",
      RELEASE,
      chartDir,
      "--namespace",
      OPERATOR_NS,
      "--create-namespace",
      "--wait",
      `--timeout=${WAIT / 1000}s`,
      ...["--set", `image.repository=${opRepo}`, "--set", `image.tag=${opTag}`],
      ...["--set", `runtimeImage.repository=${rtRepo}`, "--set", `runtimeImage.tag=${rtTag}`],
    ]);
    phase("chart installed, the operator's pods ready");

    // --- the sample, as it is ---
    await kubectl(["create", "namespace", NS]);
    await kubectl(["-n", NS, "apply", "--server-side", "-f", SAMPLE]);
    await until(async () => condition(await pipeline(), "Ready")?.status === "True", "the pipeline did not turn Ready");
    const ready = await pipeline();
    phase(`the sample's pipeline Ready (${condition(ready, "Ready")?.message})`);
    assert.equal(condition(ready, "ScalingReady")?.reason, "ScaledObjectApplied", "KEDA scales the pipeline");
    const scaled = await json<{ status?: { conditions?: Condition[] } }>([
      "-n",
      NS,
      "get",
      "scaledobject",
      objectNames(sample.name).workload,
    ]);
    assert.equal(
      scaled.status?.conditions?.find((c) => c.type === "Ready")?.status,
      "True",
      `KEDA's ScaledObject is Ready: ${JSON.stringify(scaled.status)}`,
    );

    // --- records through Kafka, the pod and MinIO ---
    // Each archive file once (they are never rewritten), decompressed by the codec's own CLI.
    const files = new Map<string, number[]>();
    const archived = async () => {
      let token: string | undefined;
      do {
        const page = await s3.send(
          new ListObjectsV2Command({ Bucket: sample.bucket, Prefix: `${sample.prefix}/`, ContinuationToken: token }),
        );
        for (const { Key } of page.Contents ?? []) {
          if (Key === undefined || files.has(Key)) continue;
          const body = await s3.send(new GetObjectCommand({ Bucket: sample.bucket, Key }));
          const file = join(dir, `object${Key.slice(Key.lastIndexOf("."))}`);
          writeFileSync(file, await (body.Body?.transformToByteArray() ?? new Uint8Array()));
          files.set(
            Key,
            linesOf(decompressWithCli(file)).map((l) => (JSON.parse(l) as { seq: number }).seq),
          );
        }
        token = page.NextContinuationToken;
      } while (token !== undefined);
      return new Set([...files.values()].flat());
    };
    const record = (i: number) => ({ key: String(i), value: JSON.stringify({ _org_id: "acme", seq: i }) });
    await produce(sample.topic, N, record);
    await until(async () => (await archived()).size === N, "the records did not all reach MinIO");
    phase(`${N} records produced and read back from MinIO`);
    const reports = (await pipeline()).status?.pods ?? [];
    assert.ok(reports.length >= 1, "the pods report into the pipeline's status");
    assert.ok(
      reports.every((p) => p.state === "Running"),
      `every pod reports Running: ${JSON.stringify(reports)}`,
    );

    // --- the runtime's container killed through the engine, records produced around it ---
    type Containers = { containers: { id: string; labels: Record<string, string> }[] };
    const [running] = (
      JSON.parse(
        (
          await crictl([
            "ps",
            "--output",
            "json",
            "--label",
            `io.kubernetes.pod.namespace=${NS}`,
            "--name",
            `^${CONTAINER_NAME}$`,
          ])
        ).stdout,
      ) as Containers
    ).containers;
    assert.ok(running, "a runtime container runs on the node");
    const container = running.id;
    const podName = running.labels["io.kubernetes.pod.name"];
    await produce(sample.topic, N, (i) => record(N + i));
    const killed = performance.now();
    await ctr(["tasks", "kill", "--signal", "SIGKILL", container]);
    type Pods = {
      items: {
        metadata: { name: string };
        status: { containerStatuses?: { restartCount: number; ready: boolean }[] };
      }[];
    };
    const selector = `archiver.dfe.io/pipeline=${sample.name}`;
    await until(
      async () =>
        (await json<Pods>(["-n", NS, "get", "pods", "-l", selector])).items.some((p) =>
          p.status.containerStatuses?.some((s) => s.restartCount >= 1 && s.ready),
        ),
      `the killed container was not restarted (${podName})`,
    );
    t.diagnostic(`killed container restarted and ready ${((performance.now() - killed) / 1000).toFixed(1)} s after`);
    await until(
      async () => (await archived()).size === 2 * N,
      "records produced around the kill did not all reach MinIO",
    );
    assert.deepEqual(
      [...(await archived())].sort((a, b) => a - b),
      Array.from({ length: 2 * N }, (_, i) => i),
    );
    phase(`${2 * N} records in MinIO after the kill, none lost`);

    // --- the pods' reports: Degraded while MinIO is down, healthy again after ---
    await minio.stop();
    await produce(sample.topic, N, (i) => record(2 * N + i));
    await until(
      async () => condition(await pipeline(), "Degraded")?.status === "True",
      "the pipeline did not report Degraded with MinIO down",
    );
    const degraded = await pipeline();
    t.diagnostic(`MinIO down: ${JSON.stringify(condition(degraded, "Degraded"))}`);
    assert.equal(condition(degraded, "Degraded")?.reason, "PodsDegraded");
    assert.ok(
      degraded.status?.pods?.some((p) => p.state === "Degraded"),
      `a pod reports Degraded: ${JSON.stringify(degraded.status?.pods)}`,
    );
    await minio.start();
    await until(
      async () => condition(await pipeline(), "Degraded")?.status === "False",
      "the pipeline stayed Degraded after MinIO came back",
    );
    await until(
      async () => (await archived()).size === 3 * N,
      "records produced while MinIO was down did not all reach it",
    );
    phase(`Degraded while MinIO was down, recovered, ${3 * N} records in MinIO`);

    // --- KEDA's external metric: the pressure trigger, read from the pods by KEDA, served to the HPA ---
    await kubectl([
      "-n",
      NS,
      "patch",
      "archivepipeline",
      sample.name,
      "--type=merge",
      "--patch",
      JSON.stringify({ spec: { keda: { pressure: { enabled: true } } } }),
    ]);
    type Hpa = {
      items: {
        status?: {
          currentMetrics?: { type: string; external?: { metric: { name: string }; current: { value?: string } } }[];
        };
      }[];
    };
    await until(
      async () =>
        (await json<Hpa>(["-n", NS, "get", "hpa"])).items.some((h) =>
          h.status?.currentMetrics?.some((m) => m.type === "External" && m.external?.current.value !== undefined),
        ),
      "the HPA got no value of the pressure trigger's external metric from KEDA",
    );
    const hpa = await json<Hpa>(["-n", NS, "get", "hpa"]);
    phase(
      `KEDA's metrics apiserver serves the pressure metric: ${JSON.stringify(hpa.items[0]?.status?.currentMetrics)}`,
    );
  },
);
