// Permanent refusals against a real store (the testbed's MinIO): a key past 1024 bytes, refused before any record is
// staged, and an EntityTooLarge answer to the upload of a file. An HTTP proxy in front of MinIO gives that answer,
// for the keys of two destinations only; every other request, and every other answer, is MinIO's own. Every refused
// record reaches the Kafka DLQ and the offsets are committed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { ListMultipartUploadsCommand } from "@aws-sdk/client-s3";
import { kafkaTopic, minioBucket, minioArchive, need, s3Client, uniqueName } from "../../../e2e/support/testbed.ts";
import { s3Error, storeProxy } from "../../../e2e/support/proxy.ts";
import {
  filesUnder,
  linesOf,
  produce,
  readBucket,
  readDlq,
  startArchiver,
  tempDir,
  waitCommittedToEnd,
  type RunningArchiver,
} from "../../../e2e/support/archiver.ts";

test("a key past 1024 bytes and an EntityTooLarge answer: every record reaches the DLQ, the offsets are committed", async (t) => {
  const LONG = 60;
  const HUGE = 800;
  const SPLIT = 40; // records holding newlines of their own: their file has more lines than records
  const OK = 1000;
  const dir = tempDir(t);
  const topic = await kafkaTopic(t, { partitions: 2 });
  const dlqTopic = await kafkaTopic(t, { prefix: "dlq" });
  const groupId = uniqueName("g");
  const bucket = await minioBucket(t);
  // Each PUT of a key under the huge* destinations (a PutObject, or an UploadPart of a file past one part) is
  // answered EntityTooLarge; an abort that follows, and every other request, reach MinIO.
  const proxy = await storeProxy(t, async (req, url) =>
    req.method === "PUT" && url.pathname.includes("/huge")
      ? s3Error("EntityTooLarge", "Your proposed upload exceeds the maximum allowed object size.", url.pathname)
      : undefined,
  );
  const longOrg = "k".repeat(1100);
  const record = (i: number): string => {
    if (i < LONG) return JSON.stringify({ id: i, _org_id: longOrg });
    if (i < LONG + HUGE) return JSON.stringify({ id: i, _org_id: "huge", pad: "h".repeat(i % 90) });
    if (i < LONG + HUGE + SPLIT) return `{"id":${i},\n"_org_id":"hugesplit",\n"note":"two\\nthree"}`;
    return JSON.stringify({ id: i, _org_id: "ok", pad: "o".repeat(i % 90) });
  };
  const N = LONG + HUGE + SPLIT + OK;
  await produce(topic, N, (i) => ({ value: record(i) }));
  const spool = join(dir, "spool");
  const a: RunningArchiver = await startArchiver(t, {
    kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: groupId, topics: [topic] },
    archive: {
      ...minioArchive(bucket, "a", proxy.endpoint),
      roll_interval_secs: 2,
    },
    buffer: { spool_dir: spool, flush_age_secs: 1 },
    routing: { mode: "expression", expression_fields: ["_org_id"] },
    dlq: { enabled: true, topic: dlqTopic },
    logger: { level: "warn" },
  });
  await waitCommittedToEnd(groupId, topic, 90_000, () => `offsets not released:\n${a.output().slice(-4000)}`);
  const dlqTotal = await a.metric("messages_dlq_total");
  const archived = await a.metric("messages_archived_total");
  const dropped = await a.metric("messages_dropped_total");
  assert.equal(a.proc.exitCode, null, "the process keeps running");
  assert.equal(await a.stop(), 0);

  // The DLQ: one entry per record for the long key and for the refused file of one-line records; whole blocks for the
  // file whose records hold newlines, so no record is split across entries.
  const entries = await readDlq(dlqTopic, dlqTotal);
  const long = entries.filter((e) => e.destination.includes("kkkk"));
  const huge = entries.filter((e) => e.destination.endsWith("/huge"));
  const split = entries.filter((e) => e.destination.endsWith("/hugesplit"));
  assert.equal(long.length, LONG);
  assert.ok(long.every((e) => /over the 1024-byte limit/.test(e.reason) && e.topic === topic));
  assert.deepEqual(new Set(long.map((e) => e.payload.toString())), new Set([...Array(LONG).keys()].map(record)));
  assert.equal(huge.length, HUGE);
  assert.ok(huge.every((e) => /EntityTooLarge/.test(e.reason)));
  assert.deepEqual(
    new Set(huge.map((e) => e.payload.toString())),
    new Set(Array.from({ length: HUGE }, (_, i) => record(LONG + i))),
  );
  assert.ok(split.length > 0 && split.every((e) => e.block === true));
  assert.equal(
    split.reduce((n, e) => n + (e.records ?? 0), 0),
    SPLIT,
    "each block entry counts the records it carries, not its lines",
  );
  const splitText = split.map((e) => e.payload.toString()).join("");
  for (let i = LONG + HUGE; i < LONG + HUGE + SPLIT; i++)
    assert.ok(splitText.includes(`${record(i)}\n`), `record ${i}`);

  // The store holds the accepted destination only, and no part of a refused upload is left behind.
  const s3 = s3Client();
  t.after(() => s3.destroy());
  const objects = await readBucket(s3, bucket, dir);
  assert.ok(objects.every((o) => o.key.includes("/ok/")));
  const okLines = objects.flatMap((o) => linesOf(o.content));
  const okIds = new Set(okLines.map((l) => (JSON.parse(l) as { id: number }).id));
  assert.equal(okIds.size, OK);
  const leftover = await s3.send(new ListMultipartUploadsCommand({ Bucket: bucket }));
  assert.equal(leftover.Uploads?.length ?? 0, 0, "no refused attempt left a multipart upload behind");
  assert.deepEqual(filesUnder(join(spool, "uploads")), [], "refused files discarded once dead-lettered");

  const deadLettered = long.length + huge.length + SPLIT;
  t.diagnostic(
    `produced=${N} archived=${okIds.size} (messages_archived_total=${archived}) dead_lettered=${deadLettered} ` +
      `(entries=${entries.length}: ${long.length} key_too_long, ${huge.length} EntityTooLarge, ${split.length} whole blocks of ${SPLIT} records) ` +
      `dropped=${dropped} duplicated=${okLines.length - okIds.size}`,
  );
  assert.equal(archived, OK);
  assert.equal(dropped, 0);
  assert.equal(deadLettered + okIds.size, N, "every record archived or dead-lettered");
});
