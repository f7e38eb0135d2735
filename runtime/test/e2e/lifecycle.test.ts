// The process across its life, against the real broker: idle until a ConfigMap-style mount names a destination,
// then restarted in-process on every valid change (no record lost), and a refused change keeps the running config.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, createServer, type Socket } from "node:net";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { kafkaTopic, need, uniqueName } from "../../../e2e/support/testbed.ts";
import { runtimeConfigMount } from "../../../e2e/support/configmap.ts";
import {
  archiveFiles,
  freePort,
  produce,
  readArchive,
  startArchiver,
  tempDir,
  waitFor,
  waitCommittedToEnd,
  type RunningArchiver,
} from "../../../e2e/support/archiver.ts";

function record(i: number): { value: string } {
  return { value: JSON.stringify({ id: i, _org_id: `org-${i % 7}`, pad: "p".repeat(i % 50) }) };
}

function config(dir: string, topic: string, groupId: string, over: Record<string, unknown> = {}) {
  return {
    kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: groupId, topics: [topic] },
    archive: { destination: `file://${join(dir, "archive")}`, roll_interval_secs: 2 },
    buffer: { spool_dir: join(dir, "spool"), flush_age_secs: 1 },
    compression: { codec: "zstd" },
    routing: { mode: "expression", expression_fields: ["_org_id"] },
    dlq: { enabled: false },
    logger: { level: "info" },
    ...over,
  };
}

async function health(a: RunningArchiver) {
  const res = await fetch(`http://${a.metricsAddr}/health`);
  return (await res.json()) as {
    status: string;
    ready: boolean;
    idle: boolean;
    components: Record<string, { state: string; reason?: string }>;
  };
}

async function readyz(a: RunningArchiver): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://${a.metricsAddr}/readyz`);
  return { status: res.status, body: await res.text() };
}

/** Every id in the archive, with how many times each appears. */
function idCounts(root: string): Map<number, number> {
  const counts = new Map<number, number>();
  for (const l of readArchive(root).lines) {
    const id = (JSON.parse(l) as { id: number }).id;
    counts.set(id, (counts.get(id) ?? 0) + 1);
  }
  return counts;
}

test("idle until a ConfigMap swap names a destination: no broker connection while idle, then records flow with no restart", async (t) => {
  const N = 5000;
  const dir = tempDir(t);
  const topic = await kafkaTopic(t, { partitions: 2 });
  const groupId = uniqueName("g");
  // A listener posing as the broker: an idle runtime must never connect to it.
  const connections: Socket[] = [];
  const tripwire = createServer((s) => connections.push(s));
  const tripPort = await freePort();
  await new Promise<void>((r) => tripwire.listen(tripPort, "127.0.0.1", r));
  t.after(() => {
    for (const s of connections) s.destroy();
    tripwire.close();
  });
  const idle = config(dir, topic, groupId, {
    kafka: { brokers: [`127.0.0.1:${tripPort}`], group_id: groupId, topics: [topic] },
  });
  delete (idle as { archive?: unknown }).archive;
  const mount = runtimeConfigMount(join(dir, "cm"), idle);
  const a = await startArchiver(t, {}, { configPath: mount.path, dir });
  const pid = a.proc.pid;

  const h = await health(a);
  assert.equal(h.idle, true);
  assert.equal(h.ready, true);
  assert.equal(h.components["work_config"]?.state, "degraded");
  assert.match(h.components["work_config"]?.reason ?? "", /no destination configured/);
  assert.equal((await readyz(a)).status, 200);
  assert.equal(await a.metric("pipeline_idle"), 1);
  await sleep(3000);
  assert.equal(connections.length, 0, "an idle runtime connected to the broker");

  await produce(topic, N, record);
  mount.set(config(dir, topic, groupId));
  await waitFor(
    async () => (await a.metric("messages_written_total")) >= N,
    90_000,
    () => `records did not flow after the config named a destination:\n${a.output().slice(-4000)}`,
  );
  assert.equal(a.proc.pid, pid);
  assert.equal(a.proc.exitCode, null, "the runtime restarted");
  assert.equal(await a.metric("pipeline_idle"), 0);
  const after = await health(a);
  assert.equal(after.idle, false);
  assert.equal(after.components["work_config"]?.state, "ok");
  assert.equal(connections.length, 0);
  assert.equal(await a.stop("SIGTERM"), 0, a.output().slice(-4000));

  const counts = idCounts(join(dir, "archive"));
  for (let i = 0; i < N; i++) assert.equal(counts.get(i), 1, `record ${i} archived ${counts.get(i) ?? 0} times`);
  // The effective config is logged at each start, secrets redacted.
  assert.equal(a.output().match(/"msg":"effective config"/g)?.length, 2);
});

test("a refused change keeps the running config, shows on /readyz and config_valid, and clears once fixed", async (t) => {
  const dir = tempDir(t);
  const topic = await kafkaTopic(t, { partitions: 1 });
  const groupId = uniqueName("g");
  const good = config(dir, topic, groupId);
  const mount = runtimeConfigMount(join(dir, "cm"), good);
  const a = await startArchiver(t, {}, { configPath: mount.path, dir });
  // Ready comes before the pipeline has started: config_valid is set once it has.
  await waitFor(
    async () => (await a.metric("config_valid")) === 1,
    30_000,
    () => a.output().slice(-3000),
  );

  mount.set({ ...good, compression: { codec: "brotli" } });
  await waitFor(
    async () => (await a.metric("config_valid")) === 0,
    30_000,
    () => a.output().slice(-3000),
  );
  assert.equal(await a.metric("config_reload_errors_total"), 1);
  const r = await readyz(a);
  assert.equal(r.status, 200, "a refused change must not take a running pod out of service");
  assert.match(r.body, /work_config: degraded \(config change refused, running config kept: compression\.codec/);
  assert.match(a.output(), /config change refused; the running config is kept/);

  // The running pipeline still archives.
  await produce(topic, 1000, record);
  await waitFor(
    async () => (await a.metric("messages_written_total")) >= 1000,
    60_000,
    () => a.output().slice(-3000),
  );

  mount.set(good);
  await waitFor(
    async () => (await a.metric("config_valid")) === 1,
    30_000,
    () => a.output().slice(-3000),
  );
  assert.equal((await health(a)).components["work_config"]?.state, "ok");
  assert.equal(await a.stop("SIGTERM"), 0, a.output().slice(-4000));
  assert.ok(archiveFiles(join(dir, "archive")).every((f) => f.path.endsWith(".zst")));
});

test("a codec change while 100k records stream drains and restarts in-process: every record archived, none lost", async (t) => {
  const N = 100_000;
  const dir = tempDir(t);
  const topic = await kafkaTopic(t, { partitions: 3 });
  const groupId = uniqueName("g");
  const mount = runtimeConfigMount(join(dir, "cm"), config(dir, topic, groupId, { logger: { level: "warn" } }));
  const a = await startArchiver(t, {}, { configPath: mount.path, dir });
  const pid = a.proc.pid;

  // Produce in the background, so the change lands mid-stream.
  const producing = (async () => {
    for (let start = 0; start < N; start += 10_000) {
      await produce(topic, 10_000, (i) => record(start + i));
      await sleep(200);
    }
  })();
  await waitFor(
    async () => (await a.metric("messages_written_total")) >= 20_000,
    90_000,
    () => a.output().slice(-3000),
  );
  mount.set(config(dir, topic, groupId, { logger: { level: "warn" }, compression: { codec: "gzip" } }));
  await producing;

  const root = join(dir, "archive");
  await waitCommittedToEnd(groupId, topic, 120_000, () => `not committed to the end:\n${a.output().slice(-4000)}`);
  assert.equal(a.proc.pid, pid);
  assert.equal(a.proc.exitCode, null, "the runtime restarted");
  assert.equal(await a.stop("SIGTERM"), 0, a.output().slice(-4000));

  const files = archiveFiles(root);
  const zst = files.filter((f) => f.path.endsWith(".zst")).length;
  const gz = files.filter((f) => f.path.endsWith(".gz")).length;
  assert.ok(zst > 0 && gz > 0, `expected files of both codecs, got ${zst} .zst and ${gz} .gz`);
  const counts = idCounts(root);
  let dups = 0;
  for (let i = 0; i < N; i++) {
    assert.ok(counts.has(i), `record ${i} lost across the reload`);
    dups += (counts.get(i) ?? 0) - 1;
  }
  t.diagnostic(`produced ${N}, archived ${counts.size} distinct, duplicated ${dups}; ${zst} zstd and ${gz} gzip files`);
});

test("a broker not reachable at start: not ready, the reason on /readyz, retried until it is, then records flow", async (t) => {
  const dir = tempDir(t);
  const topic = await kafkaTopic(t, { partitions: 1 });
  const groupId = uniqueName("g");
  // The bootstrap address is a port nothing listens on until the test forwards it to the real broker.
  const port = await freePort();
  const [host, realPort] = need("TESTBED_KAFKA_BROKERS").split(",")[0]!.split(":");
  const cfg = config(dir, topic, groupId);
  const a = await startArchiver(
    t,
    { ...cfg, kafka: { ...cfg.kafka, brokers: [`127.0.0.1:${port}`] } },
    { dir, waitReady: false },
  );
  await waitFor(
    async () => {
      const r = await readyz(a).catch(() => undefined);
      return r?.status === 503 && /transport: failed \(cannot start, retrying in/.test(r.body);
    },
    90_000,
    () => `never showed the unreachable broker on /readyz:\n${a.output().slice(-3000)}`,
  );
  assert.equal(a.proc.exitCode, null, "the runtime gave up instead of retrying");

  const sockets: Socket[] = [];
  const forward = createServer((client) => {
    const upstream = connect(Number(realPort), host);
    sockets.push(client, upstream);
    client.pipe(upstream).pipe(client);
    client.on("error", () => upstream.destroy());
    upstream.on("error", () => client.destroy());
  });
  await new Promise<void>((r) => forward.listen(port, "127.0.0.1", r));
  t.after(() => {
    for (const s of sockets) s.destroy();
    forward.close();
  });
  await produce(topic, 1000, record);
  await waitFor(
    async () => (await a.metric("messages_written_total")) >= 1000,
    120_000,
    () => `records did not flow once the broker was reachable:\n${a.output().slice(-3000)}`,
  );
  assert.equal((await readyz(a)).status, 200);
  assert.equal(await a.stop("SIGTERM"), 0, a.output().slice(-3000));
});
