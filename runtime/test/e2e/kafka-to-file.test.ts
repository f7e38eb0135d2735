// The hot path end to end against the testbed's real broker: Kafka -> routed, compressed, rolling local files.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { kafkaTopic, need, uniqueName } from "../../../e2e/support/testbed.ts";
import {
  archiveFiles,
  groupOffsets,
  produce,
  readArchive,
  readDlq,
  startArchiver,
  tempDir,
  waitFor,
  type RunningArchiver,
} from "../../../e2e/support/archiver.ts";

const ORGS = 20;
const TYPES = 10;

function record(i: number): { value: string } {
  return {
    value: JSON.stringify({
      id: i,
      _org_id: `org-${i % ORGS}`,
      event_type: `type-${Math.floor(i / ORGS) % TYPES}`,
      data: { user: `u${i % 997}`, msg: "x".repeat(40 + (i % 60)) },
    }),
  };
}

function baseConfig(dir: string, topic: string, groupId: string, over: Record<string, unknown> = {}) {
  return {
    kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: groupId, topics: [topic] },
    archive: { destination: `file://${join(dir, "archive")}`, roll_interval_secs: 300 },
    buffer: { spool_dir: join(dir, "spool"), flush_age_secs: 1 },
    compression: { codec: "zstd" },
    routing: { mode: "expression", expression_fields: ["_org_id", "event_type"] },
    dlq: { enabled: false },
    logger: { level: "warn" },
    ...over,
  };
}

async function waitWritten(a: RunningArchiver, n: number, timeoutMs: number): Promise<void> {
  await waitFor(
    async () => (await a.metric("messages_written_total")) >= n,
    timeoutMs,
    () => `not all ${n} records written; output:\n${a.output().slice(-4000)}`,
  );
}

test("200k records over 3 partitions and 200 destinations: each archived exactly once, offsets committed to the end", async (t) => {
  const N = 200_000;
  const dir = tempDir(t);
  const topic = await kafkaTopic(t, { partitions: 3 });
  const groupId = uniqueName("g");
  await produce(topic, N, record);
  const a = await startArchiver(t, baseConfig(dir, topic, groupId));
  await waitWritten(a, N, 120_000);
  assert.equal(await a.stop("SIGTERM"), 0, `runtime did not exit 0:\n${a.output().slice(-4000)}`);

  const root = join(dir, "archive");
  const { files, lines } = readArchive(root);
  const counts = new Map<number, number>();
  for (const f of files) {
    const dest = f.path.split("/").slice(0, 3).join("/");
    for (const l of f.lines) {
      const r = JSON.parse(l) as { id: number; _org_id: string; event_type: string };
      assert.equal(dest, `${topic}/${r._org_id}/${r.event_type}`, `record ${r.id} under the wrong destination`);
      counts.set(r.id, (counts.get(r.id) ?? 0) + 1);
    }
  }
  assert.equal(lines.length, N, "archived line count");
  assert.equal(counts.size, N, "distinct record ids");
  assert.ok(
    [...counts.values()].every((c) => c === 1),
    "a record archived more than once",
  );
  const dests = new Set(files.map((f) => f.path.split("/").slice(0, 3).join("/")));
  assert.equal(dests.size, ORGS * TYPES);
  const { committed, end } = await groupOffsets(groupId, topic);
  assert.deepEqual(committed, end, "committed offsets equal the end offsets");
  t.diagnostic(`${files.length} files under ${dests.size} destinations`);
});

test("offsets are committed only once the file holding the records is complete", async (t) => {
  const N = 5_000;
  const dir = tempDir(t);
  const topic = await kafkaTopic(t, { partitions: 2 });
  const groupId = uniqueName("g");
  await produce(topic, N, record);
  const a = await startArchiver(
    t,
    baseConfig(dir, topic, groupId, {
      archive: { destination: `file://${join(dir, "archive")}`, roll_interval_secs: 8 },
    }),
  );
  await waitWritten(a, N, 60_000);
  // Written into open files but not complete: nothing may be committed yet.
  const before = await groupOffsets(groupId, topic);
  assert.ok(
    Object.values(before.committed).every((o) => o <= 0),
    `committed before the roll: ${JSON.stringify(before.committed)}`,
  );
  await waitFor(
    async () => JSON.stringify((await groupOffsets(groupId, topic)).committed) === JSON.stringify(before.end),
    30_000,
    () => "offsets not committed after the interval roll",
  );
  assert.ok((await a.metric("archive_roll_total", { trigger: "interval" })) > 0);
  assert.equal(await a.metric("messages_archived_total"), N);
  assert.equal(await a.stop(), 0);
});

test("rolling by compressed size: every file but the last of a destination reaches roll_size_bytes", async (t) => {
  const N = 20_000;
  const dir = tempDir(t);
  const topic = await kafkaTopic(t);
  const groupId = uniqueName("g");
  await produce(topic, N, (i) => ({
    value: JSON.stringify({ id: i, _org_id: "one", event_type: "e", r: Math.random() }),
  }));
  const a = await startArchiver(
    t,
    baseConfig(dir, topic, groupId, {
      archive: { destination: `file://${join(dir, "archive")}`, roll_size_bytes: 20_000 },
      buffer: { spool_dir: join(dir, "spool"), flush_bytes: 16_384, flush_age_secs: 1 },
    }),
  );
  await waitWritten(a, N, 60_000);
  assert.equal(await a.stop(), 0);
  const files = archiveFiles(join(dir, "archive"));
  assert.ok(files.length > 5, `expected several size rolls, got ${files.length} files`);
  for (const f of files.slice(0, -1)) assert.ok(f.size >= 20_000, `${f.path} rolled at ${f.size} bytes`);
  const { lines } = readArchive(join(dir, "archive"));
  assert.equal(new Set(lines.map((l) => (JSON.parse(l) as { id: number }).id)).size, N);
  // Names carry -<seq>-<writer id> and the codec suffix; seq counts up within the destination's writer.
  for (const f of files)
    assert.match(f.path, /^[^/]+\/one\/e\/\d{4}\/\d{2}\/\d{2}\/\d{2}-\d{6}-[0-9a-z_]+\.jsonl\.zst$/);
});

test("more destinations than max_writers: writers park, small buffers wait in the spill, one file each", async (t) => {
  const N = 10_000;
  const dir = tempDir(t);
  const topic = await kafkaTopic(t, { partitions: 2 });
  const groupId = uniqueName("g");
  await produce(topic, N, record);
  const a = await startArchiver(
    t,
    baseConfig(dir, topic, groupId, {
      // 200 destinations are more than the files 8 writers keep in progress (8 x 17): at flush_age a buffer goes to
      // the spill, and flushes once its oldest record is roll_interval_secs old, into a file that then rolls.
      archive: { destination: `file://${join(dir, "archive")}`, max_writers: 8, roll_interval_secs: 4 },
      buffer: { spool_dir: join(dir, "spool"), flush_records: 1000, flush_age_secs: 1 },
    }),
  );
  await waitWritten(a, N, 60_000);
  assert.ok((await a.metric("writer_evictions_total")) > 0, "writers evicted");
  assert.ok((await a.metric("hot_buffer_spills_total")) >= ORGS * TYPES, "every buffer waited in the spill");
  assert.equal(await a.stop(), 0);
  const { files, lines } = readArchive(join(dir, "archive"));
  const ids = new Set(lines.map((l) => (JSON.parse(l) as { id: number }).id));
  assert.equal(ids.size, N);
  assert.equal(lines.length, N);
  // A parked writer's file takes its destination's later flushes: one file each, not one per flush.
  assert.equal(files.length, ORGS * TYPES);
});

test("hostile segment values stay inside their destination, and a record 65 levels deep is dropped and counted", async (t) => {
  const dir = tempDir(t);
  const topic = await kafkaTopic(t);
  const groupId = uniqueName("g");
  const hostile = ["../", "/", "=", "", ".", "..", "ünï/cødé", "a".repeat(300), "  "];
  const deep = "[".repeat(65) + "]".repeat(65);
  const values = [
    ...hostile.map((h, i) => JSON.stringify({ id: i, _org_id: h, event_type: "x" })),
    JSON.stringify({ id: 100, event_type: "x" }),
    `{"id":101,"_org_id":${"[".repeat(63)}${"]".repeat(63)}}`,
    deep,
    "not json",
  ];
  await produce(topic, values.length, (i) => ({ value: values[i] ?? "" }));
  const a = await startArchiver(t, baseConfig(dir, topic, groupId));
  await waitWritten(a, values.length - 2, 30_000);
  await sleep(500);
  assert.equal(await a.metric("messages_dropped_total", { reason: "too_deep" }), 1);
  assert.equal(await a.metric("routing_errors_total"), 2, "the object value and the invalid JSON");
  // A 300-byte segment is past a local file name's 255 bytes: the store refuses it for good, counted (no DLQ yet).
  assert.equal(await a.metric("messages_dropped_total", { reason: "refused" }), 1);
  assert.equal(await a.stop(), 0);
  const files = archiveFiles(join(dir, "archive")).map((f) => f.path);
  const dests = new Set(files.map((f) => f.split("/").slice(0, -4).join("/")));
  const expected = new Set([
    `${topic}/..=2F/x`, // only exactly "." and ".." need =2E; "../" cannot climb once "/" is encoded
    `${topic}/=2F/x`,
    `${topic}/=3D/x`,
    `${topic}/default/x`, // empty, blank and missing take default_segment
    `${topic}/=2E/x`,
    `${topic}/=2E=2E/x`,
    `${topic}/=C3=BCn=C3=AF=2Fc=C3=B8d=C3=A9/x`,
    topic, // routing errors land under the topic alone
  ]);
  assert.deepEqual(dests, expected);
});

test("structural faults refuse to boot with the key and the fix, and exit 2", async (t) => {
  const dir = tempDir(t);
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ transport: "http" }, /transport.*kafka.*grpc/s],
    [{ compression: { codec: "brotli" } }, /compression\.codec.*zstd.*lz4.*snappy.*gzip/s],
    [{ routing: { mode: "regex" } }, /routing\.mode.*expression.*topic/s],
    [
      { archive: { destination: "file:///tmp/x", path_template: "{year}/{topic}" } },
      /archive\.path_template.*\{topic\}/s,
    ],
    [
      { archive: { destination: "s3://b/p", multipart_chunk_size: 1048576 } },
      /archive\.multipart_chunk_size.*5242880|5 MiB/s,
    ],
    [{ transport: "grpc", archive: { destination: "file:///tmp/x" } }, /grpc\.listen/],
    [
      {
        kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), topics: ["x"] },
        archive: { destination: `file://${dir}/archive` },
        dlq: { topic: "no-such-dlq-topic" },
      },
      /dlq\.topic.*no-such-dlq-topic.*does not exist/s,
    ],
  ];
  for (const [config, pattern] of cases) {
    const a = await startArchiver(t, config, { dir, waitReady: false });
    assert.equal(await a.exited, 2, `expected exit 2 for ${JSON.stringify(config)}:\n${a.output()}`);
    assert.match(a.output(), pattern);
  }
});

test("batches a producer compressed with lz4, zstd, snappy or gzip are all archived", async (t) => {
  const dir = tempDir(t);
  const topic = await kafkaTopic(t);
  const groupId = uniqueName("g");
  const codecs = ["lz4", "zstd", "snappy", "gzip", "none"];
  // kcat (librdkafka) compresses each produce request with the given codec, as real producers do.
  for (const [c, codec] of codecs.entries()) {
    const lines = Array.from({ length: 200 }, (_, i) => JSON.stringify({ id: c * 1000 + i, _org_id: codec }));
    execFileSync("kcat", ["-P", "-b", need("TESTBED_KAFKA_BROKERS"), "-t", topic, "-z", codec], {
      input: lines.join("\n") + "\n",
    });
  }
  const a = await startArchiver(t, baseConfig(dir, topic, groupId));
  await waitWritten(a, codecs.length * 200, 60_000);
  assert.equal(await a.stop(), 0);
  const { lines } = readArchive(join(dir, "archive"));
  const ids = new Set(lines.map((l) => (JSON.parse(l) as { id: number }).id));
  assert.equal(ids.size, codecs.length * 200);
});

test("kafka.client platformatic archives every record once and commits to the end", async (t) => {
  const N = 30_000;
  const dir = tempDir(t);
  const topic = await kafkaTopic(t, { partitions: 3 });
  const groupId = uniqueName("g");
  await produce(topic, N, record);
  const config = baseConfig(dir, topic, groupId);
  const a = await startArchiver(t, { ...config, kafka: { ...config.kafka, client: "platformatic" } });
  await waitWritten(a, N, 60_000);
  assert.equal(await a.stop(), 0, a.output().slice(-3000));
  const { lines } = readArchive(join(dir, "archive"));
  assert.equal(lines.length, N);
  assert.equal(new Set(lines.map((l) => (JSON.parse(l) as { id: number }).id)).size, N);
  const { committed, end } = await groupOffsets(groupId, topic);
  assert.deepEqual(committed, end);
});

test("records refused for good go to the DLQ, one entry each, and their offsets are released once it confirms", async (t) => {
  const dir = tempDir(t);
  const topic = await kafkaTopic(t);
  const dlqTopic = await kafkaTopic(t, { prefix: "dlq" });
  const groupId = uniqueName("g");
  const deep = "[".repeat(65) + "]".repeat(65);
  const hugeDeep = "[".repeat(65) + `"${"z".repeat(900_000)}"` + "]".repeat(65);
  const longSegment = JSON.stringify({ id: 2, _org_id: "a".repeat(300), event_type: "x" });
  const values = [deep, hugeDeep, longSegment, JSON.stringify({ id: 3, _org_id: "ok", event_type: "x" })];
  await produce(topic, values.length, (i) => ({ value: values[i] ?? "" }));
  const a = await startArchiver(
    t,
    baseConfig(dir, topic, groupId, {
      archive: { destination: `file://${join(dir, "archive")}`, roll_interval_secs: 2 },
      dlq: { enabled: true, topic: dlqTopic, message_max_bytes: 1_000_000 },
    }),
  );
  await waitFor(
    async () => JSON.stringify((await groupOffsets(groupId, topic)).committed) === JSON.stringify({ 0: 4 }),
    30_000,
    () => `offsets not released; output:\n${a.output().slice(-3000)}`,
  );
  assert.equal(await a.metric("messages_dlq_total"), 2);
  assert.equal(await a.metric("messages_dropped_total", { reason: "dlq_too_large" }), 1);
  assert.equal(await a.metric("messages_dropped_total", { reason: "too_deep" }), 0);
  assert.equal(await a.stop(), 0);

  const entries = await readDlq(dlqTopic, 2);
  const byOffset = new Map(entries.map((e) => [e.offset, e]));
  assert.equal(byOffset.get("0")?.payload.toString(), deep);
  assert.match(byOffset.get("0")?.reason ?? "", /nesting exceeds the maximum parse depth of 64/);
  assert.equal(byOffset.get("0")?.topic, topic);
  assert.equal(byOffset.get("2")?.payload.toString(), longSegment);
  assert.match(byOffset.get("2")?.destination ?? "", /aaaa\/x$/);
  const { lines } = readArchive(join(dir, "archive"));
  assert.deepEqual(lines, [values[3]]);
});
