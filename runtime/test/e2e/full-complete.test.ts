// A disk that fills between a file's last append and its completion: every record is on a file, and the step that
// fails is the completion itself (an object destination's manifest, a local destination's link to its archive name).
// The file (and, with acknowledgements, its offsets) is held and the completion retried, the sink shows degraded, and
// once space frees the file completes, the offsets commit to the end and nothing is lost or written twice. Manifests
// are written only where a restart uploads what was staged, so the object case runs with acknowledgements off. The volumes are small tmpfs
// mounts the test makes (CI runs as root). A completion no retry can clear (the file removed) is Errored instead: the
// restart reads its records again.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { kafkaTopic, minioArchive, minioBucket, need, s3Client, uniqueName } from "../../../e2e/support/testbed.ts";
import {
  fillUntil,
  groupOffsets,
  linesOf,
  produce,
  readArchive,
  readBucket,
  startArchiver,
  tempDir,
  tmpfsDir,
  waitCommittedToEnd,
  waitFor,
  type RunningArchiver,
} from "../../../e2e/support/archiver.ts";

const N = 2000;
/** Long enough for every record to be written before the disk fills, so the first step to fail is a completion. */
const ROLL_SECS = 10;

const record = (i: number) => ({
  value: JSON.stringify({ id: i, _org_id: `org-${i % 4}`, r: randomBytes(120).toString("hex") }),
});

/**
 * The archiver's config: `archive` names the destination, `buffer` the spool; four destinations, no DLQ; offsets held
 * until the records are archived unless `acknowledgements` is false.
 */
const configOf = (topic: string, groupId: string, archive: object, buffer: object, acknowledgements = true) => ({
  kafka: {
    brokers: need("TESTBED_KAFKA_BROKERS").split(","),
    group_id: groupId,
    topics: [topic],
    acknowledgements: { enabled: acknowledgements },
  },
  archive: { ...archive, roll_interval_secs: ROLL_SECS },
  buffer: { flush_age_secs: 1, ...buffer },
  routing: { mode: "expression", expression_fields: ["_org_id"] },
  dlq: { enabled: false },
  logger: { level: "warn" },
});

/** The sink component of /health; fails with the archiver's output when it no longer answers (it exited). */
async function sinkHealth(a: RunningArchiver): Promise<{ state: string; reason?: string }> {
  const res = await fetch(`http://${a.metricsAddr}/health`).catch((err: unknown) => {
    throw new Error(`the archiver does not answer (${String(err)}):\n${a.output().slice(-3000)}`);
  });
  return ((await res.json()) as { components: { sink: { state: string; reason?: string } } }).components.sink;
}

/**
 * Produces the records, waits until each is on a file with none completed, runs `fill`, then waits for a completion
 * to fail, and checks the stall: the process runs, the sink is degraded, nothing is archived and (`held`: with
 * acknowledgements) the offsets are not at the end. Then `free`, and the stream must complete and commit to the end.
 */
async function fillAtCompletion(
  t: TestContext,
  a: RunningArchiver,
  topic: string,
  groupId: string,
  fill: () => void,
  free: () => void,
  held = true,
): Promise<void> {
  await produce(topic, N, record);
  await waitFor(
    async () => (await a.metric("messages_written_total")) === N,
    60_000,
    () => `not every record was written:\n${a.output().slice(-3000)}`,
  );
  fill();
  // The test's premise: the disk filled before any file rolled.
  assert.equal(await a.metric("archive_roll_total"), 0, `a file rolled before the disk filled (roll ${ROLL_SECS} s)`);
  const exited = () => a.proc.exitCode !== null;
  await waitFor(
    // A process draining to exit answers no more: the assertion below then shows its output.
    async () => exited() || (await a.metric("archive_errors_total").catch(() => 0)) > 0,
    ROLL_SECS * 1000 + 30_000,
    () => `no completion failed:\n${a.output().slice(-3000)}`,
  );
  // Held through several retries, not given up.
  for (let i = 0; i < 15 && !exited(); i++) await sleep(200);
  assert.equal(a.proc.exitCode, null, `the process keeps running:\n${a.output().slice(-3000)}`);
  const sink = await sinkHealth(a);
  const errors = await a.metric("archive_errors_total");
  assert.equal(sink.state, "degraded", `the sink shows the stall: ${JSON.stringify(sink)}`);
  assert.equal(await a.metric("messages_archived_total"), 0, "nothing completed while the disk was full");
  if (held) {
    const { committed, end } = await groupOffsets(groupId, topic);
    assert.ok(
      Object.entries(end).some(([p, e]) => (committed[Number(p)] ?? -1) < e),
      `offsets held: committed ${JSON.stringify(committed)}, end ${JSON.stringify(end)}`,
    );
  }
  free();
  const resumed = () => `not resumed after space freed:\n${a.output().slice(-3000)}`;
  await waitFor(async () => (await a.metric("messages_archived_total")) === N, 60_000, resumed);
  await waitCommittedToEnd(groupId, topic, 60_000, resumed);
  assert.equal((await sinkHealth(a)).state, "ok", "the sink is ok again");
  assert.equal(await a.metric("messages_archived_total"), N);
  assert.equal(await a.metric("messages_dropped_total"), 0);
  t.diagnostic(`records=${N} failed_completion_attempts=${errors} sink_while_full=${JSON.stringify(sink)}`);
  assert.equal(await a.stop(), 0);
}

/** Each record once: every id there, and no line twice (no file that completed was ever read again). */
function assertEachOnce(lines: readonly string[]): void {
  const ids = new Set(lines.map((l) => (JSON.parse(l) as { id: number }).id));
  assert.equal(ids.size, N, "every record archived");
  assert.equal(lines.length, N, "no record archived twice");
}

test("a spool that fills as a file writes its manifest holds the file and resumes once space frees", async (t) => {
  const dir = tempDir(t);
  const mount = tmpfsDir(t, "4m", "full-complete-spool-");
  const spool = join(mount, "spool");
  mkdirSync(spool);
  const topic = await kafkaTopic(t, { partitions: 2 });
  const groupId = uniqueName("g");
  const bucket = await minioBucket(t);
  // The volume is too small for the defaults' free-space check.
  const buffer = { spool_dir: spool, min_free_spool_bytes: 1 << 20 };
  // With acknowledgements a restart removes staged files unread, so nothing writes a manifest to fail.
  const a = await startArchiver(t, configOf(topic, groupId, minioArchive(bucket, "a"), buffer, false));
  const filler = join(mount, "filler");
  // Full to the last byte: the staged copies are whole, and the manifest beside each needs a page of its own.
  await fillAtCompletion(
    t,
    a,
    topic,
    groupId,
    () => fillUntil(filler, mount, 0),
    () => rmSync(filler),
    false,
  );
  const s3 = s3Client();
  t.after(() => s3.destroy());
  assertEachOnce((await readBucket(s3, bucket, dir)).flatMap((o) => linesOf(o.content)));
});

test("a local volume out of inodes as a file takes its archive name holds the file and resumes", async (t) => {
  // tmpfs counts a hard link as an inode: with none left, the link that gives a file its archive name fails ENOSPC
  // while its appends, to a file already there, still land.
  const mount = tmpfsDir(t, "16m,nr_inodes=64", "full-complete-local-");
  const archive = join(mount, "archive");
  const topic = await kafkaTopic(t, { partitions: 2 });
  const groupId = uniqueName("g");
  const a = await startArchiver(
    t,
    configOf(topic, groupId, { destination: `file://${archive}` }, { spool_dir: join(tempDir(t), "spool") }),
  );
  const fillers = join(mount, "fillers");
  const fill = () => {
    mkdirSync(fillers);
    for (let i = 0; ; i++) {
      try {
        writeFileSync(join(fillers, String(i)), "");
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === "ENOSPC") return;
        throw err;
      }
    }
  };
  await fillAtCompletion(t, a, topic, groupId, fill, () => rmSync(fillers, { recursive: true }));
  assertEachOnce(readArchive(archive).lines);
});

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
