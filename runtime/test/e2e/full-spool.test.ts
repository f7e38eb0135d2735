// An object destination whose staging spool fills mid-stream: the failed append is cut back, the batch and its
// offsets are held and retried, nothing more is received, files already closed upload and free their space, and once
// space frees the stream resumes with nothing lost. The spool is a small tmpfs the test mounts (CI runs as root).
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { kafkaTopic, minioBucket, minioArchive, need, s3Client, uniqueName } from "../../../e2e/support/testbed.ts";
import {
  fillUntil,
  linesOf,
  produce,
  readBucket,
  startArchiver,
  tempDir,
  tmpfsDir,
  waitCommittedToEnd,
  waitFor,
} from "../../../e2e/support/archiver.ts";

test("a full staging spool holds the stream and loses nothing once space frees", async (t) => {
  const N = 20_000;
  const dir = tempDir(t);
  const mount = tmpfsDir(t, "4m", "full-spool-");
  const spool = join(mount, "spool");
  mkdirSync(spool);
  const topic = await kafkaTopic(t, { partitions: 2 });
  const groupId = uniqueName("g");
  const bucket = await minioBucket(t);
  const a = await startArchiver(t, {
    kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: groupId, topics: [topic] },
    archive: {
      ...minioArchive(bucket, "a"),
      roll_interval_secs: 1,
    },
    // The volume is too small for the defaults' free-space check; the staged-bytes cap stays far above it, so the
    // disk fills before the latch would pause intake.
    buffer: { spool_dir: spool, flush_age_secs: 1, flush_bytes: 65536, min_free_spool_bytes: 1 << 20 },
    routing: { mode: "expression", expression_fields: ["_org_id"] },
    dlq: { enabled: false },
    logger: { level: "warn" },
  });
  // Fill the spool once the archiver is up (its startup check refuses a spool below min_free_spool_bytes), leaving
  // about half a megabyte, and only then produce: the stream needs several megabytes. Produced before, the records
  // were all archived by the time the spool was full, and nothing more was written to fail.
  const filler = join(mount, "filler");
  fillUntil(filler, mount, 512 << 10);
  await produce(topic, N, (i) => ({
    value: JSON.stringify({ id: i, _org_id: `org-${i % 4}`, r: randomBytes(120).toString("hex") }),
  }));
  await waitFor(
    async () => (await a.metric("archive_errors_total")) > 0,
    60_000,
    () => `the spool never filled:\n${a.output().slice(-3000)}`,
  );
  const written = await a.metric("messages_written_total");
  const errors = await a.metric("archive_errors_total");
  assert.ok(written < N, `the stream is held (${written} of ${N} written)`);
  assert.equal(a.proc.exitCode, null, "the process keeps running");
  rmSync(filler);
  await waitCommittedToEnd(groupId, topic, 90_000, () => `not resumed after space freed:\n${a.output().slice(-3000)}`);
  const archived = await a.metric("messages_archived_total");
  const dropped = await a.metric("messages_dropped_total");
  assert.equal(await a.stop(), 0);

  const s3 = s3Client();
  t.after(() => s3.destroy());
  const lines = (await readBucket(s3, bucket, dir)).flatMap((o) => linesOf(o.content));
  const ids = new Set(lines.map((l) => (JSON.parse(l) as { id: number }).id));
  t.diagnostic(
    `produced=${N} archived=${ids.size} (messages_archived_total=${archived}) dead_lettered=0 dropped=${dropped} ` +
      `duplicated=${lines.length - ids.size} failed_attempts_while_full=${errors} written_when_full=${written}`,
  );
  assert.equal(ids.size, N, "every record archived");
  assert.equal(dropped, 0);
});
