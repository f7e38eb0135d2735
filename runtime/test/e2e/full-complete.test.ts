// A local file whose completion no retry can clear -- removed behind the archiver's back -- is Errored, never
// dropped: the process exits and the restart reads its records again.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { kafkaTopic, need, uniqueName } from "../../../e2e/support/testbed.ts";
import {
  produce,
  readArchive,
  startArchiver,
  tempDir,
  waitCommittedToEnd,
  waitFor,
} from "../../../e2e/support/archiver.ts";

const N = 2000;
/** Long enough for every record to be written before the files are removed. */
const ROLL_SECS = 10;

const record = (i: number) => ({
  value: JSON.stringify({ id: i, _org_id: `org-${i % 4}`, r: randomBytes(120).toString("hex") }),
});

/** The archiver's config: `archive` names the destination, `buffer` the spool; four destinations, no DLQ. */
const configOf = (topic: string, groupId: string, archive: object, buffer: object) => ({
  kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: groupId, topics: [topic] },
  archive: { ...archive, roll_interval_secs: ROLL_SECS },
  buffer: { flush_age_secs: 1, ...buffer },
  routing: { mode: "expression", expression_fields: ["_org_id"] },
  dlq: { enabled: false },
  logger: { level: "warn" },
});

/** Each record once: every id there, and no line twice (no file that completed was ever read again). */
function assertEachOnce(lines: readonly string[]): void {
  const ids = new Set(lines.map((l) => (JSON.parse(l) as { id: number }).id));
  assert.equal(ids.size, N, "every record archived");
  assert.equal(lines.length, N, "no record archived twice");
}

test("files removed behind the archiver's back before they complete are read again at the restart, never dropped", async (t) => {
  // No retry brings a removed file's frames back: its completion fails for good (ENOENT), and its records, never in a
  // file the store refused, are Errored rather than dropped: the process exits and the restart reads them again.
  const dir = tempDir(t);
  const archive = join(dir, "archive");
  const topic = await kafkaTopic(t, { partitions: 2 });
  const groupId = uniqueName("g");
  const config = configOf(topic, groupId, { destination: `file://${archive}` }, { spool_dir: join(dir, "spool") });
  const a = await startArchiver(t, config, { dir });
  await produce(topic, N, record);
  await waitFor(
    async () => (await a.metric("messages_written_total")) === N,
    60_000,
    () => `not every record was written:\n${a.output().slice(-3000)}`,
  );
  rmSync(archive, { recursive: true });
  const exit = await Promise.race([a.exited, sleep(ROLL_SECS * 1000 + 30_000, "still running")]);
  assert.equal(exit, 1, `exits non-zero once the files fail to complete:\n${a.output().slice(-3000)}`);
  assert.doesNotMatch(a.output(), /records dropped/);
  const b = await startArchiver(t, config, { dir });
  await waitCommittedToEnd(groupId, topic, 60_000, () => `not read again:\n${b.output().slice(-3000)}`);
  assert.equal(await b.metric("messages_dropped_total"), 0);
  assert.equal(await b.stop(), 0);
  assertEachOnce(readArchive(archive).lines);
});
