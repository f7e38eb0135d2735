// Topic discovery end to end, through each Kafka client: an empty kafka.topics archives every topic the filters keep
// (landing over transformed), a topic created after start within one refresh, and a deleted topic is dropped while
// the others are archived and committed on. Each test's topics share a prefix of their own that topic_include names,
// so no other test's topics interfere.
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { deleteKafkaTopic, kafkaTopic, need, uniqueName } from "../../../e2e/support/testbed.ts";
import {
  produce,
  readArchive,
  startArchiver,
  tempDir,
  waitCommittedToEnd,
  waitFor,
  type RunningArchiver,
} from "../../../e2e/support/archiver.ts";
import { escapeRegExp } from "../../src/config/resolve.ts";

const CLIENTS = ["kafkajs", "platformatic"] as const;
const REFRESH_SECS = 2;
/** One refresh, a consumer swap or rejoin, and a loaded machine's slack. */
const WITHIN_MS = 30_000;

function config(dir: string, prefix: string, client: string, over: Record<string, unknown> = {}) {
  return {
    kafka: {
      brokers: need("TESTBED_KAFKA_BROKERS").split(","),
      group_id: uniqueName("g"),
      client,
      topic_include: [`^${escapeRegExp(prefix)}-`],
      topic_refresh_secs: REFRESH_SECS,
      ...over,
    },
    archive: { destination: `file://${join(dir, "archive")}`, roll_interval_secs: 3 },
    buffer: { spool_dir: join(dir, "spool"), flush_age_secs: 1 },
    compression: { codec: "zstd" },
    routing: { mode: "topic" },
    dlq: { enabled: false },
  };
}

const record = (topic: string) => (i: number) => ({ value: JSON.stringify({ topic, i }) });

async function waitWritten(a: RunningArchiver, n: number, timeoutMs: number): Promise<void> {
  await waitFor(
    async () => (await a.metric("messages_written_total")) >= n,
    timeoutMs,
    () => `fewer than ${n} records written; output:\n${a.output().slice(-4000)}`,
  );
}

/** Archived record ids per topic folder; fails on a record archived twice or under another topic's folder. */
function archivedByTopic(dir: string): Record<string, number> {
  const seen = new Set<string>();
  const counts: Record<string, number> = {};
  for (const f of readArchive(join(dir, "archive")).files) {
    const folder = f.path.split("/")[0] ?? "";
    for (const l of f.lines) {
      const r = JSON.parse(l) as { topic: string; i: number };
      assert.equal(folder, r.topic, `record ${l} under ${folder}`);
      const id = `${r.topic}:${r.i}`;
      assert.ok(!seen.has(id), `${id} archived twice`);
      seen.add(id);
      counts[folder] = (counts[folder] ?? 0) + 1;
    }
  }
  return counts;
}

/** Log lines of the runtime's output whose msg is `msg`. */
function logged(a: RunningArchiver, msg: string): Record<string, unknown>[] {
  return a
    .output()
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((l) => l["msg"] === msg);
}

for (const client of CLIENTS) {
  test(`${client}: discovery archives what include/exclude keep, landing over transformed, and a topic created after start`, async (t) => {
    const dir = tempDir(t);
    const prefix = uniqueName("disc");
    const N = 200;
    const landing = await kafkaTopic(t, { name: `${prefix}-events`, partitions: 2 });
    const twin = await kafkaTopic(t, { name: `${prefix}-events_transformed` });
    const orphan = await kafkaTopic(t, { name: `${prefix}-orphan.transformed` });
    const excluded = await kafkaTopic(t, { name: `${prefix}-scratch` });
    const outside = await kafkaTopic(t, { name: `other-${prefix}-events` });
    for (const topic of [landing, twin, orphan, excluded, outside]) await produce(topic, N, record(topic));

    const a = await startArchiver(t, config(dir, prefix, client, { topic_exclude: ["-scratch$", "^_"] }));
    await waitWritten(a, 2 * N, 60_000);
    const late = await kafkaTopic(t, { name: `${prefix}-late`, partitions: 3 });
    const created = Date.now();
    await produce(late, N, record(late));
    await waitWritten(a, 3 * N, WITHIN_MS);
    t.diagnostic(
      `a topic created after start was written ${Date.now() - created} ms later (refresh ${REFRESH_SECS} s)`,
    );
    assert.equal(await a.stop(), 0, `runtime did not exit 0:\n${a.output().slice(-4000)}`);

    assert.deepEqual(archivedByTopic(dir), { [landing]: N, [orphan]: N, [late]: N });
    assert.deepEqual(
      logged(a, "subscribed").map((l) => l["added"]),
      [[landing, orphan]],
    );
    assert.deepEqual(
      logged(a, "subscription changed").map((l) => [l["added"], l["removed"]]),
      [[[late], []]],
    );
  });

  test(`${client}: a deleted topic is dropped cleanly while the others are archived and committed on`, async (t) => {
    const dir = tempDir(t);
    const prefix = uniqueName("disc");
    const N = 100;
    const gone = await kafkaTopic(t, { name: `${prefix}-gone`, partitions: 2 });
    const stays = await kafkaTopic(t, { name: `${prefix}-stays`, partitions: 2 });
    await produce(gone, N, record(gone));
    await produce(stays, N, record(stays));
    const cfg = config(dir, prefix, client);
    const a = await startArchiver(t, cfg);
    await waitWritten(a, 2 * N, 60_000);

    await deleteKafkaTopic(gone);
    await waitFor(
      () => logged(a, "subscription changed").some((l) => JSON.stringify(l["removed"]) === JSON.stringify([gone])),
      WITHIN_MS,
      () => `the deleted topic was not dropped; output:\n${a.output().slice(-4000)}`,
    );
    await produce(stays, N, (i) => record(stays)(N + i));
    await waitWritten(a, 3 * N, WITHIN_MS);
    await waitCommittedToEnd(cfg.kafka.group_id, stays, WITHIN_MS, () => `not committed to the end of ${stays}`);
    assert.equal(a.proc.exitCode, null, "the runtime is still running");
    assert.equal(await a.stop(), 0, `runtime did not exit 0:\n${a.output().slice(-4000)}`);
    assert.deepEqual(archivedByTopic(dir), { [gone]: N, [stays]: 2 * N });
  });
}
