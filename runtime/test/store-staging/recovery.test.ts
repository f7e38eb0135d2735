import { test } from "node:test";
import assert from "node:assert/strict";
import { access, mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { ArchiverError } from "../../src/errors.ts";
import { recoverStaging } from "../../src/store/recovery.ts";
import { createStagingStore } from "../../src/store/staging.ts";
import { captureLog, FakeBackend, hanging, metric, newMetrics, tempDir } from "./helpers.ts";

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

const FRAMES = [Buffer.from("a block\n"), Buffer.alloc(300, 1)];
const META = {
  records: 3,
  codec: "gzip",
  openedAt: 1000,
  closedAt: 2000,
  blockLengths: [8, 300],
  blockRecords: [1, 2],
};

/** Complete staged files with manifests, as a process killed mid-upload leaves them. */
async function leaveComplete(spool: string, relPaths: string[]): Promise<void> {
  const store = createStagingStore({
    backend: new FakeBackend(spool, hanging),
    spoolDir: spool,
    recoverable: true,
    writerParallelism: 4,
    stagedBytesCap: 1 << 20,
    quarantineBytesCap: 1 << 20,
    metrics: newMetrics(),
    log: captureLog().log,
  });
  const completes: Promise<void>[] = [];
  for (const rel of relPaths) {
    const f = await store.open(rel);
    for (const fr of FRAMES) await f.append(fr);
    const pending = (e: unknown) => (e as ArchiverError).code === "upload_pending_at_shutdown";
    completes.push(assert.rejects(f.complete(META), pending));
  }
  await store.close();
  await Promise.all(completes);
}

async function put(root: string, files: Record<string, string | Buffer>): Promise<void> {
  for (const [rel, body] of Object.entries(files)) {
    await mkdir(dirname(join(root, rel)), { recursive: true });
    await writeFile(join(root, rel), body);
  }
}

const manifest = (size: number, blockLengths = [size]) =>
  JSON.stringify({
    version: 1,
    key: "k",
    size,
    blockLengths,
    blockRecords: blockLengths.map(() => 1),
    records: blockLengths.length,
    codec: "zstd",
    openedAt: 0,
    closedAt: 0,
  });

/** A spool left with every kind of staged file, and an operator's quarantine. */
async function messySpool(): Promise<string> {
  const spool = await tempDir();
  await leaveComplete(spool, ["ev/a/1-x_1.jsonl.gz", "quarantine/2-x_2.jsonl.gz"]);
  await put(join(spool, "uploads"), {
    "ev/b/never-completed.jsonl.gz": "0123456789",
    "ev/b/crashed-in-manifest.jsonl.gz": "0123456789",
    "ev/b/crashed-in-manifest.jsonl.gz.part.json.tmp": "{",
    "ev/c/garbled.jsonl.gz": "0123456789",
    "ev/c/garbled.jsonl.gz.part.json": "not json",
    "ev/c/wrong-size.jsonl.gz": "0123456789",
    "ev/c/wrong-size.jsonl.gz.part.json": manifest(20),
    "ev/d/copy-lost.jsonl.gz.part.json": manifest(10),
    "quarantine/old/left-by-an-operator.jsonl.gz": "old",
  });
  return spool;
}

test("kafka with acknowledgements: every staged file is removed and counted replayed; quarantine is left", async () => {
  const spool = await messySpool();
  const metrics = newMetrics();
  const r = await recoverStaging({
    spoolDir: spool,
    mode: "remove",
    quarantineBytesCap: 1 << 20,
    metrics,
    log: captureLog().log,
  });
  assert.deepEqual(r, { removed: 7, toUpload: [], quarantined: 0 });
  assert.equal(await metric(metrics.stagedFilesRemoved, { reason: "replayed" }), 7);
  assert.deepEqual(await readdir(join(spool, "uploads")), ["quarantine"]);
  assert.deepEqual(await readdir(join(spool, "uploads/quarantine"), { recursive: true }), [
    "old",
    "old/left-by-an-operator.jsonl.gz",
  ]);
});

test("upload mode: complete files are kept to upload, the rest quarantined by reason", async () => {
  const spool = await messySpool();
  const uploads = join(spool, "uploads");
  const metrics = newMetrics();
  const backend = new FakeBackend(await tempDir());
  const r = await recoverStaging({
    spoolDir: spool,
    mode: "upload",
    backend,
    quarantineBytesCap: 1 << 20,
    metrics,
    log: captureLog().log,
  });

  assert.equal(r.removed, 0);
  assert.equal(r.quarantined, 5);
  assert.deepEqual(
    r.toUpload.map((m) => [m.relPath, m.stagedPath, m.key, m.size, m.blockLengths]),
    [
      [
        "quarantine/2-x_2.jsonl.gz",
        join(uploads, "=quarantine/2-x_2.jsonl.gz"),
        "archive/quarantine/2-x_2.jsonl.gz",
        308,
        [8, 300],
      ],
      ["ev/a/1-x_1.jsonl.gz", join(uploads, "ev/a/1-x_1.jsonl.gz"), "archive/ev/a/1-x_1.jsonl.gz", 308, [8, 300]],
    ].sort((a, b) => ((a[1] as string) < (b[1] as string) ? -1 : 1)),
  );
  for (const [reason, n] of Object.entries({ incomplete: 2, corrupt: 2, unreadable: 1, no_store: 0 })) {
    assert.equal(await metric(metrics.stagedFilesQuarantined, { reason }), n, reason);
  }
  const q = join(uploads, "quarantine");
  for (const rel of [
    "ev/b/never-completed.jsonl.gz",
    "ev/b/crashed-in-manifest.jsonl.gz",
    "ev/b/crashed-in-manifest.jsonl.gz.part.json.tmp",
    "ev/c/garbled.jsonl.gz.part.json",
    "ev/c/wrong-size.jsonl.gz",
    "ev/d/copy-lost.jsonl.gz.part.json",
    "old/left-by-an-operator.jsonl.gz",
  ]) {
    assert.ok(await exists(join(q, rel)), `${rel} is in quarantine`);
  }
  assert.equal(await exists(join(uploads, "ev/b")), false, "emptied directories are pruned");

  // The staging store then uploads what recovery kept.
  const store = createStagingStore({
    backend,
    spoolDir: spool,
    recoverable: true,
    writerParallelism: 2,
    stagedBytesCap: 1 << 20,
    quarantineBytesCap: 1 << 20,
    metrics,
    log: captureLog().log,
  });
  const uploading = r.toUpload.map((m) => store.enqueueRecovered(m));
  assert.equal(await metric(metrics.uploadsPending), 2);
  assert.equal(await metric(metrics.stagedBytes), 616);
  await Promise.all(uploading);
  assert.equal(await metric(metrics.stagedFilesRecovered), 2);
  assert.equal(await metric(metrics.stagedBytes), 0);
  assert.deepEqual(await readFile(join(backend.objects, "archive/ev/a/1-x_1.jsonl.gz")), Buffer.concat(FRAMES));
  assert.deepEqual(
    backend.calls.map((c) => c.meta),
    [0, 1].map(() => ({ records: 3, codec: "gzip", openedAt: 1000, closedAt: 2000 })),
  );
  assert.deepEqual(await readdir(uploads), ["quarantine"]);
});

test("with no object store configured any more, every staged file is quarantined no_store", async () => {
  const spool = await tempDir();
  await leaveComplete(spool, ["ev/1.jsonl.gz"]);
  await put(join(spool, "uploads"), { "ev/2.jsonl.gz": "x" });
  const metrics = newMetrics();
  const r = await recoverStaging({
    spoolDir: spool,
    mode: "upload",
    quarantineBytesCap: 1 << 20,
    metrics,
    log: captureLog().log,
  });
  assert.deepEqual(r, { removed: 0, toUpload: [], quarantined: 2 });
  assert.equal(await metric(metrics.stagedFilesQuarantined, { reason: "no_store" }), 2);
  assert.ok(await exists(join(spool, "uploads/quarantine/ev/1.jsonl.gz.part.json")));
});

test("quarantine holds at most its cap: a file that would push it past is removed and counted", async () => {
  const spool = await tempDir();
  await put(join(spool, "uploads"), {
    "quarantine/earlier.jsonl": "x".repeat(50),
    "ev/a.jsonl": "y".repeat(30),
    "ev/b.jsonl": "z".repeat(30),
  });
  const metrics = newMetrics();
  const r = await recoverStaging({
    spoolDir: spool,
    mode: "upload",
    backend: new FakeBackend(spool),
    quarantineBytesCap: 100,
    metrics,
    log: captureLog().log,
  });
  assert.deepEqual(r, { removed: 1, toUpload: [], quarantined: 1 });
  assert.equal(await metric(metrics.stagedFilesQuarantined, { reason: "incomplete" }), 1);
  assert.equal(await metric(metrics.stagedFilesRemoved, { reason: "quarantine_full" }), 1);
  assert.ok(await exists(join(spool, "uploads/quarantine/ev/a.jsonl")));
  assert.equal(await exists(join(spool, "uploads/ev")), false);
  assert.equal(await exists(join(spool, "uploads/quarantine/ev/b.jsonl")), false);
});

test("a spool with no staging directory yet recovers nothing", async () => {
  const spool = await tempDir();
  const r = await recoverStaging({
    spoolDir: spool,
    mode: "upload",
    backend: new FakeBackend(spool),
    quarantineBytesCap: 0,
    metrics: newMetrics(),
    log: captureLog().log,
  });
  assert.deepEqual(r, { removed: 0, toUpload: [], quarantined: 0 });
});
