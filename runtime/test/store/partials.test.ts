// A local destination's half-written files: the journal marks each while it is written, and the next start on the
// same spool removes them (kafka with acknowledgements) or quarantines them (nothing delivers their records again).
import { test } from "node:test";
import assert from "node:assert/strict";
import { link, readdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { createFileStore, partialPath } from "../../src/store/file.ts";
import { PartialJournal, settlePartials } from "../../src/store/partials.ts";
import { Quarantine } from "../../src/store/quarantine.ts";
import type { FileMeta } from "../../src/store/types.ts";
import { captureLog, metric, newMetrics, tempDir } from "../store-staging/helpers.ts";

const META: FileMeta = { records: 1, codec: "zstd", openedAt: 0, closedAt: 0, blockLengths: [3], blockRecords: [1] };
const A = "events/acme/2026/12/02/13-000001-k3x9a2_1.jsonl.zst";
const B = "events/acme/2026/12/02/13-000002-k3x9a2_1.jsonl.zst";
const C = "logs/13-000001-k3x9a2_2.jsonl.zst";

/** A destination with one file completed and two a kill left half written, as the dead process's store left them. */
async function killed() {
  const spool = await tempDir();
  const root = join(await tempDir(), "archive");
  const dir = join(spool, "partials");
  const { log, lines } = captureLog();
  const store = createFileStore(`file://${root}`, { publish: true, journal: new PartialJournal(dir, log) });
  const done = await store.open(A);
  await done.append(Buffer.from("a1\n"));
  await done.complete(META);
  for (const rel of [B, C]) {
    const f = await store.open(rel);
    await f.append(Buffer.from(`${rel}\n`));
  }
  const metrics = newMetrics();
  const settle = (mode: "remove" | "quarantine", capBytes = 1 << 20) =>
    settlePartials({
      dir,
      mode,
      quarantine: () => new Quarantine({ uploadsDir: join(spool, "uploads"), capBytes, metrics, log }),
      metrics,
      log,
    });
  return { spool, root, dir, metrics, lines, settle };
}

test("the journal holds a marker exactly while a file is written under its hidden name", async () => {
  const k = await killed();
  assert.equal((await readdir(k.dir)).length, 2, "the completed file's marker is gone, the open ones' are there");
  assert.deepEqual(await readFile(join(k.root, A), "utf8"), "a1\n");
});

test("kafka with acknowledgements: every half-written file is removed and counted replayed", async () => {
  const k = await killed();
  assert.deepEqual(await k.settle("remove"), { removed: 2, quarantined: 0 });
  assert.equal(await metric(k.metrics.stagedFilesRemoved, { reason: "replayed" }), 2);
  for (const rel of [B, C]) await assert.rejects(readFile(partialPath(join(k.root, rel))), { code: "ENOENT" });
  assert.equal(await readFile(join(k.root, A), "utf8"), "a1\n", "a completed file is never touched");
  assert.deepEqual(await readdir(k.dir), [], "markers removed");
  assert.deepEqual(await k.settle("remove"), { removed: 0, quarantined: 0 }, "a second start finds nothing");
});

test("acknowledgements off: half-written files go to quarantine under their archive path, for an operator", async () => {
  const k = await killed();
  assert.deepEqual(await k.settle("quarantine"), { removed: 0, quarantined: 2 });
  assert.equal(await metric(k.metrics.stagedFilesQuarantined, { reason: "incomplete" }), 2);
  const q = join(k.spool, "uploads", "quarantine");
  assert.equal(await readFile(join(q, B), "utf8"), `${B}\n`);
  assert.equal(await readFile(join(q, C), "utf8"), `${C}\n`);
  await assert.rejects(readFile(partialPath(join(k.root, B))), { code: "ENOENT" });
  assert.deepEqual(await readdir(k.dir), []);
});

test("past the quarantine cap a half-written file is removed and counted quarantine_full", async () => {
  const k = await killed();
  assert.deepEqual(await k.settle("quarantine", B.length + 1), { removed: 1, quarantined: 1 });
  assert.equal(await metric(k.metrics.stagedFilesRemoved, { reason: "quarantine_full" }), 1);
});

test("killed between the link to its archive name and the unlink: the file is whole, the hidden name only removed", async () => {
  const k = await killed();
  await link(partialPath(join(k.root, B)), join(k.root, B));
  assert.deepEqual(await k.settle("quarantine"), { removed: 0, quarantined: 1 });
  assert.equal(await readFile(join(k.root, B), "utf8"), `${B}\n`);
  await assert.rejects(readFile(partialPath(join(k.root, B))), { code: "ENOENT" });
});

test("a marker whose file is gone, or that cannot be read, is dropped; nothing else is touched", async () => {
  const k = await killed();
  await writeFile(join(k.dir, "garbage.json"), "{not json");
  await writeFile(
    join(k.dir, "gone.json"),
    JSON.stringify({ root: k.root, relPath: "events/none-000009-x_1.jsonl.zst" }),
  );
  assert.deepEqual(await k.settle("remove"), { removed: 2, quarantined: 0 });
  assert.deepEqual(await readdir(k.dir), []);
});

test("a spool that refuses markers warns once and never fails a write", async () => {
  const spool = await tempDir();
  const root = join(await tempDir(), "archive");
  // A file where the markers' directory would go: refused whoever runs the test, root included.
  await writeFile(join(spool, "partials"), "");
  const { log, lines } = captureLog();
  const store = createFileStore(root, { publish: true, journal: new PartialJournal(join(spool, "partials"), log) });
  for (const rel of [A, B]) {
    const f = await store.open(rel);
    await f.append(Buffer.from("x\n"));
    await f.complete(META);
  }
  assert.equal(lines.filter((l) => l.level === 40 && l.msg.includes("markers cannot be kept")).length, 1);
});
