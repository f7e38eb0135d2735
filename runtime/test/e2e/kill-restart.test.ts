// SIGKILL while files are staged, uploading or half written, then a restart on the same spool. On kafka with
// acknowledgements on, every staged or half-written file is removed at startup and its records are read again: none
// is lost. With acknowledgements off nothing delivers them again: complete staged files are uploaded, the rest go to
// quarantine for an operator.
import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { CreateBucketCommand } from "@aws-sdk/client-s3";
import {
  kafkaTopic,
  minioBucket,
  minioArchive,
  need,
  privateMinio,
  s3Client,
  uniqueName,
} from "../../../e2e/support/testbed.ts";
import { storeProxy } from "../../../e2e/support/proxy.ts";
import {
  decompressWithCli,
  filesUnder,
  linesOf,
  produce,
  readArchive,
  readBucket,
  startArchiver,
  tempDir,
  waitCommittedToEnd,
  waitFor,
  type RunningArchiver,
} from "../../../e2e/support/archiver.ts";

const brokers = () => need("TESTBED_KAFKA_BROKERS").split(",");
/** Random payloads compress poorly, so files roll and upload often. */
const record = (i: number, orgs = 3) => ({
  value: JSON.stringify({ id: i, _org_id: `org-${i % orgs}`, r: randomBytes(90).toString("hex") }),
});
const idOf = (line: string) => (JSON.parse(line) as { id: number }).id;

/** The staged files under <spool>/uploads (quarantine aside): those with a manifest, and those without. */
function staged(spool: string): { complete: string[]; incomplete: string[] } {
  const uploads = join(spool, "uploads");
  const files = filesUnder(uploads).filter((f) => !f.startsWith(join(uploads, "quarantine")));
  const copies = files.filter((f) => !f.includes(".part.json"));
  return {
    complete: copies.filter((f) => files.includes(`${f}.part.json`)),
    incomplete: copies.filter((f) => !files.includes(`${f}.part.json`)),
  };
}

/** Once it is receiving, the startup settling of what the last process left is over. */
async function receiving(a: RunningArchiver): Promise<void> {
  await waitFor(
    async () => (await a.metric("messages_received_total")) > 0,
    60_000,
    () => `not receiving:\n${a.output().slice(-3000)}`,
  );
}

test("SIGKILL during uploads to MinIO, kafka with acknowledgements: staged files removed at startup, none lost", async (t) => {
  const N = 60_000;
  const KILLS = 3;
  const dir = tempDir(t);
  const spool = join(dir, "spool");
  const topic = await kafkaTopic(t, { partitions: 3 });
  const groupId = uniqueName("g");
  const bucket = await minioBucket(t);
  // The killed runs upload through a proxy that holds each PUT of a file's bytes (PutObject, UploadPart) a second,
  // so a kill lands mid-upload; the last run talks to MinIO directly.
  const slow = await storeProxy(t, async (req) => {
    if (req.method === "PUT") await sleep(1_000);
    return undefined;
  });
  const config = (endpoint: string) => ({
    kafka: { brokers: brokers(), group_id: groupId, topics: [topic] },
    archive: {
      ...minioArchive(bucket, "a", endpoint),
      roll_interval_secs: 1,
    },
    buffer: { spool_dir: spool, flush_age_secs: 1 },
    routing: { mode: "expression", expression_fields: ["_org_id"] },
    dlq: { enabled: false },
    logger: { level: "warn" },
  });
  const producing = produce(topic, N, (i) => record(i), 2_000);
  let left = 0;
  let removed = 0;
  for (let k = 0; k <= KILLS; k++) {
    const before = staged(spool);
    const a = await startArchiver(t, config(k < KILLS ? slow.endpoint : need("TESTBED_MINIO_ENDPOINT")), { dir });
    await receiving(a);
    const got = await a.metric("staged_files_removed_total", { reason: "replayed" });
    assert.equal(got, before.complete.length + before.incomplete.length, `restart ${k}: every staged file removed`);
    removed += got;
    if (k === KILLS) {
      await producing;
      await waitCommittedToEnd(groupId, topic, 180_000, () => `not caught up:\n${a.output().slice(-4000)}`);
      assert.equal(await a.stop(), 0);
      break;
    }
    await waitFor(
      () => slow.inFlight > 0,
      60_000,
      () => `no upload ever in flight:\n${a.output().slice(-3000)}`,
    );
    assert.equal(await a.stop("SIGKILL"), "SIGKILL");
    const after = staged(spool);
    left += after.complete.length + after.incomplete.length;
  }
  assert.ok(left > 0, "the kills left staged files");

  const s3 = s3Client();
  t.after(() => s3.destroy());
  const lines = (await readBucket(s3, bucket, dir)).flatMap((o) => linesOf(o.content));
  const ids = new Set(lines.map(idOf));
  t.diagnostic(
    `kills=${KILLS} (each mid-upload) staged_files_left=${left} removed_at_startup=${removed} ` +
      `produced=${N} archived=${ids.size} dead_lettered=0 dropped=0 duplicated=${lines.length - ids.size}`,
  );
  assert.equal(removed, left, "each restart removed what the kill before it left");
  assert.equal(ids.size, N, "records lost");
});

test("SIGKILL with acknowledgements off: complete staged files uploaded at restart, incomplete ones quarantined", async (t) => {
  const N = 3_000;
  const dir = tempDir(t);
  const spool = join(dir, "spool");
  const minio = await privateMinio(t);
  const s3 = s3Client(minio.endpoint);
  t.after(() => s3.destroy());
  const bucket = uniqueName("acks-off");
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  const topic = await kafkaTopic(t);
  const groupId = uniqueName("g");
  const config = {
    kafka: { brokers: brokers(), group_id: groupId, topics: [topic], acknowledgements: { enabled: false } },
    archive: {
      ...minioArchive(bucket, "a", minio.endpoint),
      roll_size_bytes: 64 * 1024,
      roll_interval_secs: 600,
    },
    buffer: { spool_dir: spool, flush_age_secs: 1, flush_bytes: 16 * 1024 },
    routing: { mode: "expression", expression_fields: ["_org_id"] },
    dlq: { enabled: false },
    logger: { level: "warn" },
  };
  const a = await startArchiver(t, config, { dir });
  // The store goes down before anything is produced: every file that rolls stays staged, complete, its upload
  // retried; the last file of each destination stays open.
  await minio.stop();
  await produce(topic, N, (i) => record(i));
  await waitFor(
    async () => (await a.metric("messages_written_total")) >= N && (await a.metric("uploads_pending")) >= 2,
    60_000,
    () => `not all written and staged:\n${a.output().slice(-3000)}`,
  );
  // Acknowledgements off commits each batch at receipt: nothing will read these records again.
  await waitCommittedToEnd(
    groupId,
    topic,
    30_000,
    () => `not committed at receipt:
${a.output().slice(-3000)}`,
  );
  assert.equal(await a.stop("SIGKILL"), "SIGKILL");
  const left = staged(spool);
  assert.ok(left.complete.length >= 2 && left.incomplete.length >= 1, JSON.stringify(left));

  await minio.start();
  const b = await startArchiver(t, config, { dir });
  await waitFor(
    async () => (await b.metric("staged_files_recovered_total")) === left.complete.length,
    60_000,
    () => `not every complete staged file uploaded:\n${b.output().slice(-3000)}`,
  );
  const quarantinedFiles = await b.metric("staged_files_quarantined_total", { reason: "incomplete" });
  assert.equal(quarantinedFiles, left.incomplete.length);
  assert.equal(await b.metric("uploads_pending"), 0);
  assert.equal(await b.stop(), 0);

  const archived = (await readBucket(s3, bucket, dir)).flatMap((o) => linesOf(o.content)).map(idOf);
  // An open file's frames are whole (nothing was being appended at the kill), so its own CLI reads it.
  const quarantine = filesUnder(join(spool, "uploads", "quarantine"));
  assert.equal(quarantine.length, left.incomplete.length);
  const quarantined = quarantine.flatMap((f) => linesOf(decompressWithCli(f))).map(idOf);
  const ids = new Set([...archived, ...quarantined]);
  const lost = N - ids.size;
  t.diagnostic(
    `produced=${N} archived=${new Set(archived).size} (from ${left.complete.length} recovered files) ` +
      `quarantined=${quarantined.length} records in ${quarantinedFiles} files dead_lettered=0 ` +
      `dropped=${lost} duplicated=${archived.length + quarantined.length - ids.size}`,
  );
  assert.equal(lost, 0, "every record is in the store or in quarantine");
  assert.ok(archived.length > 0 && quarantined.length > 0);
});

/** A local destination killed with every file still open (written under its hidden name), then restarted. */
async function killHalfWritten(t: Parameters<typeof tempDir>[0], acknowledgements: boolean) {
  const N = 5_000;
  const dir = tempDir(t);
  const spool = join(dir, "spool");
  const root = join(dir, "archive");
  const topic = await kafkaTopic(t, { partitions: 2 });
  const groupId = uniqueName("g");
  const config = (roll: number) => ({
    kafka: { brokers: brokers(), group_id: groupId, topics: [topic], acknowledgements: { enabled: acknowledgements } },
    archive: { destination: `file://${root}`, roll_interval_secs: roll },
    buffer: { spool_dir: spool, flush_age_secs: 1 },
    routing: { mode: "expression", expression_fields: ["_org_id"] },
    dlq: { enabled: false },
    logger: { level: "warn" },
  });
  await produce(topic, N, (i) => record(i, 4));
  const a = await startArchiver(t, config(600), { dir });
  await waitFor(
    async () => (await a.metric("messages_written_total")) >= N,
    60_000,
    () => `not all written:\n${a.output().slice(-3000)}`,
  );
  if (!acknowledgements) await waitCommittedToEnd(groupId, topic, 30_000, () => "not committed at receipt");
  assert.equal(await a.stop("SIGKILL"), "SIGKILL");
  const partials = filesUnder(root).filter((f) => f.endsWith(".partial"));
  assert.ok(partials.length >= 4, `one open file per destination: ${partials.length}`);
  const b = await startArchiver(t, config(1), { dir });
  return { N, dir, spool, root, topic, groupId, partials, b };
}

test("a local destination killed mid-file, kafka with acknowledgements: half-written files removed, records read again", async (t) => {
  const { N, root, topic, groupId, partials, b } = await killHalfWritten(t, true);
  await receiving(b);
  assert.equal(await b.metric("staged_files_removed_total", { reason: "replayed" }), partials.length);
  await waitCommittedToEnd(groupId, topic, 60_000, () => `not caught up:\n${b.output().slice(-3000)}`);
  assert.equal(await b.stop(), 0);
  assert.deepEqual(
    filesUnder(root).filter((f) => f.endsWith(".partial")),
    [],
    "no half-written file is left",
  );
  const { lines } = readArchive(root);
  const ids = new Set(lines.map(idOf));
  t.diagnostic(
    `half_written_files=${partials.length} removed_at_startup=${partials.length} produced=${N} archived=${ids.size} ` +
      `dead_lettered=0 dropped=0 duplicated=${lines.length - ids.size}`,
  );
  assert.equal(ids.size, N);
});

test("a local destination killed mid-file, acknowledgements off: half-written files quarantined for an operator", async (t) => {
  const { N, spool, root, partials, b } = await killHalfWritten(t, false);
  await waitFor(
    async () => (await b.metric("staged_files_quarantined_total", { reason: "incomplete" })) === partials.length,
    30_000,
    () => `not quarantined:\n${b.output().slice(-3000)}`,
  );
  assert.equal(await b.stop(), 0);
  assert.deepEqual(
    filesUnder(root).filter((f) => f.endsWith(".partial")),
    [],
  );
  const quarantine = filesUnder(join(spool, "uploads", "quarantine"));
  assert.equal(quarantine.length, partials.length);
  for (const f of quarantine) assert.ok(!f.endsWith(".partial"), `${f} keeps its archive name`);
  const quarantined = quarantine.flatMap((f) => linesOf(decompressWithCli(f))).map(idOf);
  const archived = readArchive(root).lines.map(idOf);
  const ids = new Set(quarantined);
  t.diagnostic(
    `half_written_files=${partials.length} quarantined_files=${quarantine.length} produced=${N} ` +
      `archived=${archived.length} quarantined_records=${ids.size} dead_lettered=0 dropped=${N - ids.size} ` +
      `duplicated=${quarantined.length - ids.size}`,
  );
  assert.equal(ids.size, N, "every record is in quarantine: committed at receipt, nothing reads it again");
  assert.equal(archived.length, 0);
  // The quarantined copy is the file as the kill left it.
  assert.ok(quarantine.every((f) => readFileSync(f).length > 0));
});
