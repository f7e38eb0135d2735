// At-least-once under SIGKILL: the runtime is killed at random moments while records stream in, and restarted each
// time. Every record must be in the archive at least once; the duplicates (the cost of a kill) are reported.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { kafkaTopic, need, uniqueName } from "../../../e2e/support/testbed.ts";
import { produce, readArchive, startArchiver, tempDir, waitCommittedToEnd } from "../../../e2e/support/archiver.ts";

test("SIGKILL at random moments, at least 5 times, while 500k records are produced: none lost", async (t) => {
  const N = 500_000;
  const KILLS = 6;
  const dir = tempDir(t);
  const topic = await kafkaTopic(t, { partitions: 3 });
  const groupId = uniqueName("g");
  const config = {
    kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: groupId, topics: [topic] },
    archive: { destination: `file://${join(dir, "archive")}`, roll_interval_secs: 2 },
    buffer: { spool_dir: join(dir, "spool"), flush_age_secs: 1 },
    routing: { mode: "expression", expression_fields: ["_org_id"] },
    dlq: { enabled: false },
    logger: { level: "warn" },
  };
  const producing = produce(
    topic,
    N,
    (i) => ({ value: JSON.stringify({ id: i, _org_id: `org-${i % 37}`, pad: "p".repeat(i % 50) }) }),
    2_000,
  );
  let kills = 0;
  let produced = false;
  void producing.then(() => (produced = true));
  while (kills < KILLS) {
    const a = await startArchiver(t, config, { dir });
    await sleep(1_500 + Math.floor(Math.random() * 3_000));
    assert.equal(await a.stop("SIGKILL"), "SIGKILL");
    kills++;
  }
  await producing;
  assert.ok(produced);
  const last = await startArchiver(t, config, { dir });
  await waitCommittedToEnd(
    groupId,
    topic,
    180_000,
    () => `offsets never reached the end; output:\n${last.output().slice(-4000)}`,
  );
  assert.equal(await last.stop("SIGTERM"), 0);

  const { lines } = readArchive(join(dir, "archive"));
  const seen = new Uint8Array(N);
  let duplicates = 0;
  for (const l of lines) {
    const id = (JSON.parse(l) as { id: number }).id;
    if (seen[id]) duplicates++;
    seen[id] = 1;
  }
  const missing = seen.reduce((n, v) => n + (v ? 0 : 1), 0);
  t.diagnostic(
    `kills=${kills} produced=${N} archived_lines=${lines.length} duplicates=${duplicates} missing=${missing}`,
  );
  assert.equal(missing, 0, "records lost");
});
