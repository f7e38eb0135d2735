// The testbed as tests see it: endpoints from e2e/testbed/testbed.env (or the environment, which wins), and a
// resource of its own per test (topic, bucket, container, namespace) that is removed when the test ends.
import { randomBytes } from "node:crypto";
import { spawn } from "node:child_process";
import { readFileSync, existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { TestContext } from "node:test";
import { Kafka, logLevel, type Admin } from "kafkajs";
import {
  S3Client,
  CreateBucketCommand,
  DeleteBucketCommand,
  ListObjectsV2Command,
  DeleteObjectsCommand,
  ListMultipartUploadsCommand,
  AbortMultipartUploadCommand,
} from "@aws-sdk/client-s3";
import { Storage } from "@google-cloud/storage";
import { BlobServiceClient, StorageSharedKeyCredential } from "@azure/storage-blob";
import { KubeConfig, CoreV1Api } from "@kubernetes/client-node";
import { quietIdleRequestQueues } from "../../runtime/src/transport/kafkajs-queue.ts";

const TESTBED_DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "testbed");
export const testbedEnvFile = join(TESTBED_DIR, "testbed.env");

/** Reads KEY=VALUE lines (values as `printf %q` wrote them) of testbed.env; process.env overrides. */
export function testbedEnv(): Record<string, string> {
  const vars: Record<string, string> = {};
  if (existsSync(testbedEnvFile)) {
    for (const line of readFileSync(testbedEnvFile, "utf8").split("\n")) {
      const m = /^([A-Z0-9_]+)=(.*)$/.exec(line);
      if (m?.[1] !== undefined && m[2] !== undefined) vars[m[1]] = unquoteShell(m[2]);
    }
  }
  for (const [k, v] of Object.entries(process.env)) if (k.startsWith("TESTBED_") && v !== undefined) vars[k] = v;
  return vars;
}

function unquoteShell(v: string): string {
  if (v.startsWith("'") && v.endsWith("'")) return v.slice(1, -1);
  if (v.startsWith("$'") && v.endsWith("'")) return v.slice(2, -1).replace(/\\(.)/g, "$1");
  return v.replace(/\\(.)/g, "$1");
}

/** The value of a testbed variable; a missing one fails with the command that provides it. */
export function need(name: string): string {
  const v = testbedEnv()[name];
  if (v === undefined || v === "") {
    throw new Error(`${name} is not set: start the testbed with 'bash e2e/testbed/up' (it writes ${testbedEnvFile})`);
  }
  return v;
}

/** A short, lower-case, DNS-safe name unique to this test run. */
export function uniqueName(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${randomBytes(3).toString("hex")}`.toLowerCase();
}

// ---- Kafka ----

export function kafka(clientId = "dfe-archiver-test"): Kafka {
  // Idle kafkajs connections otherwise wake the process every millisecond, and Node prints a TimeoutNegativeWarning
  // into the tests' and the benches' output (see runtime/src/transport/kafkajs-queue.ts).
  quietIdleRequestQueues();
  return new Kafka({ clientId, brokers: need("TESTBED_KAFKA_BROKERS").split(","), logLevel: logLevel.NOTHING });
}

async function withAdmin<T>(fn: (admin: Admin) => Promise<T>): Promise<T> {
  const admin = kafka().admin();
  await admin.connect();
  try {
    return await fn(admin);
  } finally {
    await admin.disconnect();
  }
}

/** Creates a topic of its own for this test (named `name`, else uniquely after `prefix`), deleted when the test ends. */
export async function kafkaTopic(
  t: TestContext,
  opts: { partitions?: number; prefix?: string; name?: string } = {},
): Promise<string> {
  const topic = opts.name ?? uniqueName(opts.prefix ?? "t");
  await withAdmin((admin) =>
    admin.createTopics({ topics: [{ topic, numPartitions: opts.partitions ?? 1 }], waitForLeaders: true }),
  );
  t.after(() => deleteKafkaTopic(topic).catch(() => undefined));
  return topic;
}

export async function deleteKafkaTopic(topic: string): Promise<void> {
  await withAdmin((admin) => admin.deleteTopics({ topics: [topic] }));
}

// ---- MinIO (S3) ----

/** MinIO's root user and password: the testbed's, unless a private MinIO was given others. */
export interface MinioKeys {
  accessKey: string;
  secretKey: string;
}

const testbedMinioKeys = (): MinioKeys => ({
  accessKey: need("TESTBED_MINIO_ACCESS_KEY"),
  secretKey: need("TESTBED_MINIO_SECRET_KEY"),
});

/** A client of the testbed's MinIO, or of another (privateMinio's endpoint) with its keys. */
export function s3Client(endpoint = need("TESTBED_MINIO_ENDPOINT"), keys = testbedMinioKeys()): S3Client {
  return new S3Client({
    endpoint,
    region: testbedEnv()["TESTBED_MINIO_REGION"] ?? "us-east-1",
    forcePathStyle: true,
    credentials: { accessKeyId: keys.accessKey, secretAccessKey: keys.secretKey },
  });
}

/** Creates a bucket of its own; at the end removes its objects, aborts leftover uploads, removes the bucket. */
export async function minioBucket(t: TestContext): Promise<string> {
  const s3 = s3Client();
  const bucket = uniqueName("b");
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  t.after(async () => {
    try {
      await emptyBucket(s3, bucket);
      await s3.send(new DeleteBucketCommand({ Bucket: bucket }));
    } finally {
      s3.destroy();
    }
  });
  return bucket;
}

/** Removes every object of a bucket and aborts its unfinished multipart uploads. */
export async function emptyBucket(s3: S3Client, bucket: string): Promise<void> {
  for (;;) {
    const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket }));
    const keys = (page.Contents ?? []).flatMap((o) => (o.Key === undefined ? [] : [{ Key: o.Key }]));
    if (keys.length === 0) break;
    await s3.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: keys } }));
  }
  const uploads = await s3.send(new ListMultipartUploadsCommand({ Bucket: bucket }));
  for (const u of uploads.Uploads ?? []) {
    await s3.send(new AbortMultipartUploadCommand({ Bucket: bucket, Key: u.Key, UploadId: u.UploadId }));
  }
}

// ---- fake-gcs-server ----

export function gcsStorage(): Storage {
  return new Storage({
    apiEndpoint: need("TESTBED_GCS_ENDPOINT"),
    projectId: testbedEnv()["TESTBED_GCS_PROJECT"] ?? "testbed",
  });
}

export async function gcsBucket(t: TestContext): Promise<string> {
  const storage = gcsStorage();
  const name = uniqueName("g");
  await storage.createBucket(name);
  t.after(async () => {
    const bucket = storage.bucket(name);
    await bucket.deleteFiles({ force: true });
    await bucket.delete();
  });
  return name;
}

// ---- Azurite ----

export function blobService(): BlobServiceClient {
  const account = need("TESTBED_AZURITE_ACCOUNT");
  return new BlobServiceClient(
    need("TESTBED_AZURITE_BLOB_ENDPOINT"),
    new StorageSharedKeyCredential(account, need("TESTBED_AZURITE_KEY")),
  );
}

export async function azureContainer(t: TestContext): Promise<string> {
  const name = uniqueName("c");
  const container = blobService().getContainerClient(name);
  await container.create();
  t.after(() => container.deleteIfExists().then(() => undefined));
  return name;
}

// ---- kube-apiserver ----

/** The testbed's admin kubeconfig (static token, system:masters). */
export function kubeConfig(): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromFile(need("TESTBED_KUBECONFIG"));
  return kc;
}

/**
 * The archive section that writes to `minio://bucket/prefix` with the testbed's MinIO credentials, on the testbed's
 * MinIO unless `endpoint` names another (a MinIO of the test's own, or a proxy in front of one).
 */
export function minioArchive(bucket: string, prefix: string, endpoint = need("TESTBED_MINIO_ENDPOINT")) {
  return {
    destination: `minio://${bucket}/${prefix}`,
    minio: { endpoint, access_key: need("TESTBED_MINIO_ACCESS_KEY"), secret_key: need("TESTBED_MINIO_SECRET_KEY") },
  };
}

/** A kubeconfig that authenticates with a bearer token (a ServiceAccount's TokenRequest token, say). */
export function kubeConfigForToken(token: string): KubeConfig {
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "testbed", server: need("TESTBED_KUBE_SERVER"), caFile: need("TESTBED_KUBE_CA") }],
    users: [{ name: "token", token }],
    contexts: [{ name: "testbed", cluster: "testbed", user: "token" }],
    currentContext: "testbed",
  });
  return kc;
}

/** Creates a namespace of its own; deleted (with everything in it) when the test ends. */
export async function kubeNamespace(t: TestContext): Promise<string> {
  const core = kubeConfig().makeApiClient(CoreV1Api);
  const name = uniqueName("ns");
  await core.createNamespace({ body: { metadata: { name, labels: { "dfe-archiver.test": "true" } } } });
  t.after(() => core.deleteNamespace({ name }).then(() => undefined));
  return name;
}

/** A TCP port on 127.0.0.1 that nothing listens on right now. */
export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const s = createServer();
    s.once("error", rej);
    s.listen(0, "127.0.0.1", () => {
      const a = s.address();
      const port = typeof a === "object" && a ? a.port : 0;
      s.close(() => res(port));
    });
  });
}

/**
 * A MinIO of the test's own (the testbed's binary), for tests that take the store down: on 127.0.0.1 with the testbed's
 * keys unless `host` (an address pods reach, say) or `keys` say otherwise.
 */
export async function privateMinio(
  t: TestContext,
  opts: { host?: string; keys?: MinioKeys } = {},
): Promise<{ endpoint: string; stop(): Promise<void>; start(): Promise<void> }> {
  const port = await freePort();
  const host = opts.host ?? "127.0.0.1";
  const keys = opts.keys ?? testbedMinioKeys();
  const endpoint = `http://${host}:${port}`;
  const data = mkdtempSync(join(tmpdir(), "minio-"));
  let proc: ReturnType<typeof spawn> | undefined;
  const stop = async () => {
    const p = proc;
    proc = undefined;
    if (p === undefined || p.exitCode !== null) return;
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGKILL");
    await exited;
  };
  const start = async () => {
    proc = spawn(need("TESTBED_MINIO_BIN"), ["server", data, "--address", `${host}:${port}`, "--quiet"], {
      env: {
        ...process.env,
        MINIO_ROOT_USER: keys.accessKey,
        MINIO_ROOT_PASSWORD: keys.secretKey,
        MINIO_BROWSER: "off",
        MINIO_UPDATE: "off",
      },
      stdio: "ignore",
    });
    for (let i = 0; i < 100; i++) {
      const ok = await fetch(`${endpoint}/minio/health/ready`).then(
        (r) => r.ok,
        () => false,
      );
      if (ok) return;
      await new Promise((r) => setTimeout(r, 200));
    }
    throw new Error(`private MinIO on ${endpoint} did not become ready`);
  };
  t.after(async () => {
    await stop();
    rmSync(data, { recursive: true, force: true });
  });
  await start();
  return { endpoint, stop, start };
}

/**
 * A Kafka of the test's own (one KRaft node from the testbed's jars, no SASL), for tests that restart the broker:
 * the testbed's is shared by every test running on the machine. `stop` is a clean shutdown (SIGTERM) and `start`
 * brings it back on the same ports and data. Its broker listens on, and advertises, `host` (default 127.0.0.1).
 */
export async function privateKafka(
  t: TestContext,
  opts: { host?: string } = {},
): Promise<{ brokers: string; stop(): Promise<void>; start(): Promise<void> }> {
  const [port, controller] = [await freePort(), await freePort()];
  const brokers = `${opts.host ?? "127.0.0.1"}:${port}`;
  const dir = mkdtempSync(join(tmpdir(), "kafka-"));
  const conf = join(dir, "server.properties");
  writeFileSync(
    conf,
    [
      "process.roles=broker,controller",
      "node.id=1",
      `controller.quorum.voters=1@127.0.0.1:${controller}`,
      `listeners=PLAINTEXT://${brokers},CONTROLLER://127.0.0.1:${controller}`,
      `advertised.listeners=PLAINTEXT://${brokers}`,
      "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
      "inter.broker.listener.name=PLAINTEXT",
      "controller.listener.names=CONTROLLER",
      `log.dirs=${join(dir, "data")}`,
      "auto.create.topics.enable=false",
      "offsets.topic.replication.factor=1",
      "offsets.topic.num.partitions=4",
      "transaction.state.log.replication.factor=1",
      "transaction.state.log.min.isr=1",
      "share.coordinator.state.topic.replication.factor=1",
      "share.coordinator.state.topic.min.isr=1",
      "group.initial.rebalance.delay.ms=0",
      "broker.heartbeat.interval.ms=1000",
      "broker.session.timeout.ms=4000",
      "num.network.threads=2",
      "num.io.threads=2",
    ].join("\n") + "\n",
  );
  const libs = need("TESTBED_KAFKA_HOME");
  const java = (args: string[]) =>
    spawn("java", ["-Xms128m", "-Xmx512m", "-XX:+UseG1GC", "-cp", `${libs}/*`, ...args], {
      env: { ...process.env, LOG_DIR: dir },
      stdio: ["ignore", "pipe", "pipe"],
    });
  const format = java([
    "kafka.tools.StorageTool",
    "format",
    `--cluster-id=${randomBytes(16).toString("base64url").slice(0, 22)}`,
    `--config=${conf}`,
  ]);
  let formatOut = "";
  format.stdout?.on("data", (d: Buffer) => (formatOut += d.toString()));
  format.stderr?.on("data", (d: Buffer) => (formatOut += d.toString()));
  const code = await new Promise((r) => format.once("exit", r));
  if (code !== 0) throw new Error(`private Kafka: storage format failed (exit ${String(code)}):\n${formatOut}`);
  let proc: ReturnType<typeof spawn> | undefined;
  let log = "";
  const stop = async () => {
    const p = proc;
    proc = undefined;
    if (p === undefined || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGTERM");
    const killer = setTimeout(() => p.kill("SIGKILL"), 30_000);
    await exited;
    clearTimeout(killer);
  };
  const start = async () => {
    log = "";
    const p = java([
      `-Dlog4j2.configurationFile=${join(TESTBED_DIR, "kafka", "log4j2.properties")}`,
      "kafka.Kafka",
      conf,
    ]);
    proc = p;
    p.stdout?.on("data", (d: Buffer) => (log = (log + d.toString()).slice(-20_000)));
    p.stderr?.on("data", (d: Buffer) => (log = (log + d.toString()).slice(-20_000)));
    quietIdleRequestQueues();
    const admin = new Kafka({
      clientId: "private-kafka-ready",
      brokers: [brokers],
      logLevel: logLevel.NOTHING,
    }).admin();
    for (const deadline = Date.now() + 120_000; ;) {
      if (p.exitCode !== null) throw new Error(`private Kafka on ${brokers} exited:\n${log}`);
      const ok = await admin.connect().then(
        () => admin.listTopics().then(() => true),
        () => false,
      );
      await admin.disconnect();
      if (ok) return;
      if (Date.now() > deadline) throw new Error(`private Kafka on ${brokers} not ready after 120 s:\n${log}`);
      await new Promise((r) => setTimeout(r, 500));
    }
  };
  t.after(async () => {
    await stop();
    rmSync(dir, { recursive: true, force: true });
  });
  await start();
  return { brokers, stop, start };
}
