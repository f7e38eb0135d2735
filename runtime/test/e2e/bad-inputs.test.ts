// Hostile inputs in one stream, each with the outcome the seed gives it, while the process keeps running:
// - invalid JSON and binary payloads: routing fails on them, so they are archived under their topic alone, as they
//   arrived, and counted in routing_errors_total;
// - a payload holding newlines: archived as it arrived, a newline after it, so it spans lines;
// - a 20 MB record: archived (a buffer holds flush_bytes plus one record, whatever its size);
// - 10,000 levels of nesting: never parsed; dead-lettered as it arrived with the nesting reason, released Rejected;
// - a record both too deep and larger than any DLQ entry: dropped and counted dlq_too_large.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { kafkaTopic, need, uniqueName } from "../../../e2e/support/testbed.ts";
import {
  archiveFiles,
  decompressWithCli,
  produce,
  readDlq,
  startArchiver,
  tempDir,
  waitCommittedToEnd,
} from "../../../e2e/support/archiver.ts";

/** How many times `needle` stands in `hay` as a whole record: at the start or after a newline, a newline after it. */
function occurrences(hay: Buffer, needle: Buffer): number {
  const framed = Buffer.concat([needle, Buffer.from("\n")]);
  let n = 0;
  for (let at = hay.indexOf(framed); at >= 0; at = hay.indexOf(framed, at + 1)) {
    if (at === 0 || hay[at - 1] === 0x0a) n++;
  }
  return n;
}

test("invalid JSON, binary, newlines, a 20 MB record and 10,000 levels of nesting: each as the seed says", async (t) => {
  const dir = tempDir(t);
  const root = join(dir, "archive");
  const topic = await kafkaTopic(t);
  const dlqTopic = await kafkaTopic(t, { prefix: "dlq" });
  const groupId = uniqueName("g");
  let binary = randomBytes(4096);
  // Newlines, NULs and bytes that are not UTF-8 inside; none at the end, which the archive's own newline follows.
  binary = Buffer.concat([binary, Buffer.from([0x0a, 0x00, 0xff, 0xfe, 0x0a, 0x41])]);
  const big = Buffer.from(JSON.stringify({ id: "big", _org_id: "big", pad: "x".repeat(20_000_000) }));
  const deep = Buffer.from("[".repeat(10_000) + "]".repeat(10_000));
  const deepAndBig = Buffer.from("[".repeat(100) + `"${"z".repeat(20_000_000)}"` + "]".repeat(100));
  const archived: Record<string, { value: Buffer; under: RegExp }> = {
    invalidJson: { value: Buffer.from('{"id": 1, _org_id: acme'), under: new RegExp(`^${topic}/\\d{4}/`) },
    binary: { value: binary, under: new RegExp(`^${topic}/\\d{4}/`) },
    textWithNewlines: {
      value: Buffer.from("first line\nsecond line\n\nfourth"),
      under: new RegExp(`^${topic}/\\d{4}/`),
    },
    jsonWithNewlines: {
      value: Buffer.from(JSON.stringify({ id: 2, _org_id: "nl", note: "a\nb" }, null, 2)),
      under: new RegExp(`^${topic}/nl/`),
    },
    big: { value: big, under: new RegExp(`^${topic}/big/`) },
  };
  const after = Array.from({ length: 100 }, (_, i) => Buffer.from(JSON.stringify({ id: 1000 + i, _org_id: "after" })));
  const values = [...Object.values(archived).map((a) => a.value), deep, deepAndBig, ...after];
  // One record a request: two of them are 20 MB, under the testbed broker's 32 MiB message.max.bytes each.
  await produce(topic, values.length, (i) => ({ value: values[i] ?? Buffer.alloc(0) }), 1);

  const a = await startArchiver(t, {
    kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: groupId, topics: [topic] },
    archive: { destination: `file://${root}`, roll_interval_secs: 2 },
    buffer: { spool_dir: join(dir, "spool"), flush_age_secs: 1 },
    routing: { mode: "expression", expression_fields: ["_org_id"] },
    dlq: { enabled: true, topic: dlqTopic },
    logger: { level: "warn" },
  });
  await waitCommittedToEnd(groupId, topic, 120_000, () => `offsets not released:\n${a.output().slice(-3000)}`);
  assert.equal(a.proc.exitCode, null, "the process keeps running");
  const metrics = {
    routingErrors: await a.metric("routing_errors_total"),
    dlq: await a.metric("messages_dlq_total"),
    dlqTooLarge: await a.metric("messages_dropped_total", { reason: "dlq_too_large" }),
    dropped: await a.metric("messages_dropped_total"),
    archived: await a.metric("messages_archived_total"),
  };
  assert.equal(await a.stop(), 0);

  const files = archiveFiles(root).map((f) => ({ path: f.path, content: decompressWithCli(join(root, f.path)) }));
  for (const [name, { value, under }] of Object.entries(archived)) {
    const holders = files.filter((f) => occurrences(f.content, value) > 0);
    assert.equal(holders.length, 1, `${name}: in exactly one file`);
    assert.equal(occurrences(holders[0]?.content ?? Buffer.alloc(0), value), 1, `${name}: once`);
    assert.match(holders[0]?.path ?? "", under, `${name}: under its destination`);
  }
  const afterFile = files.filter((f) => f.path.startsWith(`${topic}/after/`));
  assert.equal(
    afterFile.reduce((n, f) => n + after.filter((v) => occurrences(f.content, v) === 1).length, 0),
    after.length,
    "the records after the hostile ones are archived",
  );
  const entries = await readDlq(dlqTopic, 1);
  assert.equal(entries.length, 1);
  assert.deepEqual(entries[0]?.payload, deep, "dead-lettered as it arrived");
  assert.match(entries[0]?.reason ?? "", /nesting exceeds the maximum parse depth of 64/);
  assert.equal(entries[0]?.topic, topic);
  assert.equal(entries[0]?.offset, String(Object.keys(archived).length));

  const archivedRecords = Object.keys(archived).length + after.length;
  t.diagnostic(
    `produced=${values.length} archived=${archivedRecords} (messages_archived_total=${metrics.archived}, ` +
      `routing_errors_total=${metrics.routingErrors}) dead_lettered=${metrics.dlq} dropped=${metrics.dropped} ` +
      `(dlq_too_large=${metrics.dlqTooLarge}) duplicated=0`,
  );
  assert.equal(metrics.archived, archivedRecords);
  assert.equal(metrics.routingErrors, 3, "invalid JSON, binary, text with newlines");
  assert.equal(metrics.dlq, 1);
  assert.equal(metrics.dlqTooLarge, 1);
  assert.equal(metrics.dropped, 1);
});
