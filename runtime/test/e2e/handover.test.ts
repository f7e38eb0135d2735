// A partition changing owner is read by its next owner from the committed offset: whatever its last owner archived
// past that offset is archived twice. Two archivers in one group against the testbed's Kafka and a MinIO, files kept
// open (a long roll interval) so a partition's records wait in them when it changes owner: a member joining, and a
// member stopped (SIGTERM) while the store comes back from an outage. Every record is archived exactly once.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { CreateBucketCommand } from "@aws-sdk/client-s3";
import {
  kafkaTopic,
  minioArchive,
  minioBucket,
  need,
  privateMinio,
  s3Client,
  uniqueName,
} from "../../../e2e/support/testbed.ts";
import {
  groupOffsets,
  linesOf,
  produce,
  readBucket,
  startArchiver,
  tempDir,
  waitCommittedToEnd,
  waitFor,
  type RunningArchiver,
} from "../../../e2e/support/archiver.ts";

const PARTITIONS = 6;
const ORGS = 20;

interface Group {
  topic: string;
  groupId: string;
  start(name: string): Promise<RunningArchiver>;
  /** `count` records from id `from` on, spread over every partition and destination. */
  produce(from: number, count: number): Promise<void>;
}

async function group(
  t: TestContext,
  store: { endpoint: string; bucket: string },
  archive: Record<string, unknown>,
): Promise<Group> {
  const topic = await kafkaTopic(t, { partitions: PARTITIONS });
  const groupId = uniqueName("g");
  return {
    topic,
    groupId,
    start: (name) => {
      const dir = tempDir(t, `handover-${name}-`);
      return startArchiver(
        t,
        {
          kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: groupId, topics: [topic] },
          archive: { ...minioArchive(store.bucket, "a", store.endpoint), ...archive },
          buffer: { spool_dir: join(dir, "spool"), flush_age_secs: 1 },
          routing: { mode: "expression", expression_fields: ["_org_id"] },
          dlq: { enabled: false },
          logger: { level: "info" },
        },
        { dir },
      );
    },
    produce: (from, count) =>
      produce(topic, count, (i) => ({
        partition: (from + i) % PARTITIONS,
        value: JSON.stringify({ id: from + i, _org_id: `org-${(from + i) % ORGS}` }),
      })),
  };
}

/** How many times each id is archived, and the ids archived more than once. */
async function account(endpoint: string, bucket: string, dir: string): Promise<{ ids: number; twice: number[] }> {
  const s3 = s3Client(endpoint);
  try {
    const counts = new Map<number, number>();
    for (const o of await readBucket(s3, bucket, dir))
      for (const l of linesOf(o.content)) {
        const id = (JSON.parse(l) as { id: number }).id;
        counts.set(id, (counts.get(id) ?? 0) + 1);
      }
    return { ids: counts.size, twice: [...counts].filter(([, n]) => n > 1).map(([id]) => id) };
  } finally {
    s3.destroy();
  }
}

const received = (a: RunningArchiver) => a.metric("messages_received_total");

test("a member joining: the partitions it takes are handed over first, and nothing is archived twice", async (t) => {
  const endpoint = need("TESTBED_MINIO_ENDPOINT");
  const bucket = await minioBucket(t);
  // Files stay open the whole test: without a hand-over, every record of a partition taken from the first member is
  // in one of its open files and is read again by the second.
  const g = await group(t, { endpoint, bucket }, { roll_interval_secs: 600 });
  const a = await g.start("a");
  await g.produce(0, 3000);
  await waitFor(
    async () => (await received(a)) >= 3000,
    60_000,
    () => a.output().slice(-3000),
  );
  // Flushed (flush_age 1 s) into open files.
  await sleep(2_000);

  const b = await g.start("b");
  await waitFor(
    async () => (await a.metric("transport_handovers_total")) > 0,
    60_000,
    () => `no hand-over:\n${a.output().slice(-3000)}`,
  );
  assert.equal(await a.metric("transport_handovers_total", { outcome: "cut_short" }), 0, a.output().slice(-3000));
  await g.produce(3000, 3000);
  // Half the new records are the second member's; it reads more only if it reads some of the first ones again.
  await waitFor(
    async () => (await received(a)) + (await received(b)) >= 6000 && (await received(b)) >= 1500,
    60_000,
    () => `${a.output().slice(-2000)}\n${b.output().slice(-2000)}`,
  );
  assert.equal(await a.stop("SIGTERM"), 0);
  assert.equal(await b.stop("SIGTERM"), 0);
  const { committed, end } = await groupOffsets(g.groupId, g.topic);
  assert.deepEqual(committed, end, "the drains committed to the end");

  const { ids, twice } = await account(endpoint, bucket, tempDir(t));
  assert.equal(ids, 6000, "every record archived");
  assert.deepEqual(twice.slice(0, 10), [], `${twice.length} records archived twice`);
});

test("a member stopped (SIGTERM) as the store comes back: its drain lands and commits all it read", async (t) => {
  const minio = await privateMinio(t);
  const s3 = s3Client(minio.endpoint);
  t.after(() => s3.destroy());
  const bucket = uniqueName("handover");
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  // Files roll every 2 s, so uploads fail through the outage and back off further with each failure.
  const g = await group(t, { endpoint: minio.endpoint, bucket }, { roll_interval_secs: 2 });
  const a = await g.start("a");
  const b = await g.start("b");
  await g.produce(0, 3000);
  await waitCommittedToEnd(g.groupId, g.topic, 60_000, () => `${a.output().slice(-2000)}\n${b.output().slice(-2000)}`);

  await minio.stop();
  await g.produce(3000, 3000);
  // Long enough for the failed uploads' backoff to reach 16-32 s.
  await sleep(25_000);
  const stopped = a.stop("SIGTERM");
  await sleep(2_000);
  await minio.start();
  assert.equal(await stopped, 0, a.output().slice(-3000));
  assert.doesNotMatch(a.output(), /uploads still pending/, "the drain left uploads pending");
  await waitCommittedToEnd(g.groupId, g.topic, 120_000, () => b.output().slice(-3000));
  assert.equal(await b.stop("SIGTERM"), 0);

  const { ids, twice } = await account(minio.endpoint, bucket, tempDir(t));
  assert.equal(ids, 6000, "every record archived");
  assert.deepEqual(twice.slice(0, 10), [], `${twice.length} records archived twice`);
});
