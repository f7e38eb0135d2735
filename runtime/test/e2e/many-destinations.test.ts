// Many destinations against the testbed's real broker, under a 512 MiB memory limit and the default 1,024 writers:
// every record archived exactly once in its own destination, and offsets committed to the end. 10,000 destinations to
// local files, one file each (parked writers take their destination's later flushes); 2,000 to MinIO, whose uploads
// of a few KB each ran at about 28 objects a second on the testbed (10,000 took 360 s alone).
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { kafkaTopic, minioArchive, minioBucket, need, s3Client, uniqueName } from "../../../e2e/support/testbed.ts";
import {
  downloadBucket,
  groupOffsets,
  produce,
  readArchive,
  startArchiver,
  tempDir,
  waitFor,
  type RunningArchiver,
} from "../../../e2e/support/archiver.ts";

const TYPES = 10;
const N = 50_000;
const LIMIT = String(512 * 1024 * 1024);

function record(i: number, orgs: number): { value: string } {
  return {
    value: JSON.stringify({
      id: i,
      _org_id: `org-${i % orgs}`,
      // Every (org, type) pair: the type advances once every `orgs` records.
      event_type: `type-${Math.floor(i / orgs) % TYPES}`,
      msg: "x".repeat(200 + (i % 300)),
    }),
  };
}

async function run(
  t: TestContext,
  orgs: number,
  archive: Record<string, unknown>,
  buffer: Record<string, unknown> = {},
  limit = LIMIT,
) {
  const dir = tempDir(t);
  const topic = await kafkaTopic(t, { partitions: 4 });
  const groupId = uniqueName("g");
  await produce(topic, N, (i) => record(i, orgs));
  const a = await startArchiver(
    t,
    {
      kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: groupId, topics: [topic] },
      archive,
      // Buffers flush at a second's age, so files open (and park) while the run goes on, not all at the drain.
      buffer: { spool_dir: join(dir, "spool"), flush_age_secs: 1, ...buffer },
      compression: { codec: "zstd" },
      routing: { mode: "expression", expression_fields: ["_org_id", "event_type"] },
      dlq: { enabled: false },
      logger: { level: "warn" },
    },
    { dir, env: { DFE_ARCHIVER_MEMORY_LIMIT_BYTES: limit } },
  );
  return { a, dir, topic, groupId };
}

async function waitMetric(a: RunningArchiver, name: string, n: number, timeoutMs: number): Promise<void> {
  let seen = "";
  await waitFor(
    async () => {
      const m = async (k: string) => `${k} ${await a.metric(k)}`;
      seen = (
        await Promise.all(
          ["messages_received_total", "messages_written_total", "messages_archived_total", "files_created_total"].map(
            m,
          ),
        )
      ).join(", ");
      return (await a.metric(name)) >= n;
    },
    timeoutMs,
    () => `${name} never reached ${n} (${seen}); output:\n${a.output().slice(-4000)}`,
  );
}

/** Every record once, each under its own destination, every destination there; with `oneEach`, one file each. */
function checkArchive(
  files: readonly { path: string; lines: readonly string[] }[],
  topic: string,
  orgs: number,
  oneEach: boolean,
): void {
  const seen = new Uint8Array(N);
  for (const f of files) {
    const dest = f.path.split("/").slice(0, 3).join("/");
    for (const l of f.lines) {
      const r = JSON.parse(l) as { id: number; _org_id: string; event_type: string };
      assert.equal(dest, `${topic}/${r._org_id}/${r.event_type}`, `record ${r.id} under the wrong destination`);
      assert.equal(seen[r.id], 0, `record ${r.id} archived twice`);
      seen[r.id] = 1;
    }
  }
  assert.ok(
    seen.every((s) => s === 1),
    "a record was not archived",
  );
  const dests = new Set(files.map((f) => f.path.split("/").slice(0, 3).join("/")));
  assert.equal(dests.size, orgs * TYPES);
  if (oneEach) assert.equal(files.length, orgs * TYPES, "one file per destination, not one per flush");
}

test("10,000 destinations to local files under 512 MiB: each record once, a file per destination, committed to the end", async (t) => {
  const dir = tempDir(t);
  const { a, topic, groupId } = await run(t, 1000, { destination: `file://${join(dir, "archive")}` });
  await waitMetric(a, "messages_written_total", N, 180_000);
  assert.ok((await a.metric("writers_parked")) > 0, "writers past max_writers parked");
  assert.equal(await a.stop("SIGTERM"), 0, `runtime did not exit 0:\n${a.output().slice(-4000)}`);
  const { files } = readArchive(join(dir, "archive"));
  checkArchive(files, topic, 1000, true);
  const { committed, end } = await groupOffsets(groupId, topic);
  assert.deepEqual(committed, end, "committed offsets equal the end offsets");
});

test("2,000 destinations past the hot buffers' bound spill and read back: each record once, in its own destination", async (t) => {
  const dir = tempDir(t);
  // flush_bytes of 64 KiB bounds the hot buffers at 8 MiB, under the 35 MB produced; buffers flush only at the drain.
  // A 2 GiB limit fetches 2 MiB at a time, whose turns overrun that bound: with a 512 MiB limit's 512 KiB fetches
  // nothing waited in the spool by the time every record was received.
  const { a, topic, groupId } = await run(
    t,
    200,
    { destination: `file://${join(dir, "archive")}` },
    { flush_bytes: 65536, flush_age_secs: 600 },
    String(2 * 1024 ** 3),
  );
  await waitMetric(a, "messages_received_total", N, 180_000);
  assert.ok((await a.metric("hot_buffer_spills_total")) > 0, "buffers spilled");
  // A gauge, set each second: the records were all received within 3 s at times.
  await waitMetric(a, "spilled_bytes", 1, 5_000);
  assert.equal(await a.stop("SIGTERM"), 0, `runtime did not exit 0:\n${a.output().slice(-4000)}`);
  const { files } = readArchive(join(dir, "archive"));
  checkArchive(files, topic, 200, false);
  const { committed, end } = await groupOffsets(groupId, topic);
  assert.deepEqual(committed, end, "committed offsets equal the end offsets");
});

test("2,000 destinations to MinIO under 512 MiB: each record once, committed to the end", async (t) => {
  const bucket = await minioBucket(t);
  const s3 = s3Client();
  t.after(() => s3.destroy());
  // Files roll at their age while the run goes on, so their uploads do not all wait for the drain.
  const { a, topic, groupId } = await run(
    t,
    200,
    { ...minioArchive(bucket, "archive"), roll_interval_secs: 5 },
    { writer_parallelism: 16 },
  );
  await waitMetric(a, "messages_archived_total", N, 240_000);
  assert.equal(await a.stop("SIGTERM"), 0, `runtime did not exit 0:\n${a.output().slice(-4000)}`);
  const copies = tempDir(t);
  await downloadBucket(s3, bucket, copies);
  // Files roll at 5 s here: a destination may have several.
  checkArchive(readArchive(join(copies, "archive")).files, topic, 200, false);
  const { committed, end } = await groupOffsets(groupId, topic);
  assert.deepEqual(committed, end, "committed offsets equal the end offsets");
});
