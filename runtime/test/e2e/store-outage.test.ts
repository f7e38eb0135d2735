// A store outage of a minute in the middle of a stream: nothing is lost, staged bytes stay near the cap, intake
// pauses on the latch and resumes by itself once the store is back. The test runs a MinIO of its own.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { CreateBucketCommand } from "@aws-sdk/client-s3";
import { kafkaTopic, minioArchive, need, privateMinio, s3Client, uniqueName } from "../../../e2e/support/testbed.ts";
import {
  linesOf,
  produce,
  readBucket,
  startArchiver,
  tempDir,
  waitCommittedToEnd,
  waitFor,
} from "../../../e2e/support/archiver.ts";

test("MinIO down for 60 s mid-stream: nothing lost, staging bounded, intake paused and resumed", async (t) => {
  const N1 = 10_000;
  const N2 = 30_000;
  const CAP = 1 << 20;
  const dir = tempDir(t);
  const minio = await privateMinio(t);
  const s3 = s3Client(minio.endpoint);
  t.after(() => s3.destroy());
  const bucket = uniqueName("outage");
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  const topic = await kafkaTopic(t, { partitions: 3 });
  const groupId = uniqueName("g");
  // Random payloads compress poorly, so the outage stages well past the cap.
  const make = (i: number) => ({
    value: JSON.stringify({ id: i, _org_id: `org-${i % 3}`, r: randomBytes(100).toString("hex") }),
  });
  await produce(topic, N1, make);
  const a = await startArchiver(t, {
    kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: groupId, topics: [topic] },
    archive: {
      ...minioArchive(bucket, "a", minio.endpoint),
      roll_interval_secs: 1,
    },
    buffer: { spool_dir: join(dir, "spool"), flush_age_secs: 1, staged_bytes_cap: CAP },
    routing: { mode: "expression", expression_fields: ["_org_id"] },
    dlq: { enabled: false },
    logger: { level: "warn" },
  });
  await waitFor(
    async () => (await a.metric("messages_archived_total")) >= N1,
    60_000,
    () => a.output().slice(-3000),
  );

  await minio.stop();
  const producing = produce(topic, N2, (i) => make(N1 + i));
  let maxStaged = 0;
  let pausedSeen = false;
  let maxPending = 0;
  let circuitOpenSeen = false;
  let pressureWhileOpen = 0;
  const archivedAtStop = await a.metric("messages_archived_total");
  for (const end = Date.now() + 60_000; Date.now() < end;) {
    await sleep(500);
    maxStaged = Math.max(maxStaged, await a.metric("staged_bytes"));
    maxPending = Math.max(maxPending, await a.metric("uploads_pending"));
    pausedSeen ||= (await a.metric("self_regulation_paused")) === 1;
    // Every upload failing opens the sink circuit, and more pods could not help: the scaling signal reads 0.
    if ((await a.metric("sink_circuit_open")) === 1) {
      circuitOpenSeen = true;
      pressureWhileOpen = Math.max(pressureWhileOpen, await a.metric("scaling_pressure"));
    }
  }
  await producing;
  const errors = await a.metric("archive_errors_total");
  assert.equal(await a.metric("messages_archived_total"), archivedAtStop, "nothing confirmed while the store is down");
  assert.ok(pausedSeen, "the latch paused intake");
  assert.ok(circuitOpenSeen, "the sink circuit opened");
  assert.equal(pressureWhileOpen, 0, "scaling_pressure reads 0 while the circuit is open");
  assert.ok(maxPending > 0 && errors > 0, `uploads failed and waited (pending ${maxPending}, errors ${errors})`);
  // Paused at 0.8 of the cap; what was fetched, buffered or flushing when it paused (a fetch is at least 1 MiB a
  // partition) still lands past it, but the growth stops there rather than running with the outage.
  const slack = 4 << 20;
  assert.ok(
    maxStaged <= CAP + slack,
    `staged bytes ${maxStaged} stay within the ${CAP}-byte cap plus what was in flight`,
  );

  await minio.start();
  await waitCommittedToEnd(
    groupId,
    topic,
    120_000,
    () => `not caught up after the store came back; output:\n${a.output().slice(-3000)}`,
  );
  assert.equal(await a.metric("sink_circuit_open"), 0, "the first upload that landed closed the circuit");
  await waitFor(
    async () => (await a.metric("self_regulation_paused")) === 0,
    10_000,
    () => `intake still paused: staged_bytes ${maxStaged}; output:\n${a.output().slice(-3000)}`,
  );
  const dropped = await a.metric("messages_dropped_total");
  assert.equal(await a.stop(), 0);

  const objects = await readBucket(s3, bucket, dir);
  const lines = objects.flatMap((o) => linesOf(o.content));
  const ids = new Set(lines.map((l) => (JSON.parse(l) as { id: number }).id));
  t.diagnostic(
    `produced=${N1 + N2} archived_lines=${lines.length} distinct=${ids.size} duplicates=${lines.length - ids.size} max_staged=${maxStaged} max_pending=${maxPending} upload_errors=${errors} circuit_opened=${circuitOpenSeen} dead_lettered=0 dropped=${dropped}`,
  );
  assert.equal(ids.size, N1 + N2, "every record archived");
});
