// A local destination's half-written files: the journal notes each while it is written, and the next start on the
// same spool removes them (kafka with acknowledgements) or quarantines them (nothing delivers their records again).
import { test } from "node:test";
import assert from "node:assert/strict";
import { appendFile, link, mkdir, readdir, readFile, rm, unlink, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { createFileStore } from "../../src/store/file.ts";
import { partialPath } from "../../src/store/fs.ts";
import { PartialJournal, settlePartials } from "../../src/store/partials.ts";
import { Quarantine } from "../../src/store/quarantine.ts";
import type { FileMeta } from "../../src/store/types.ts";
import { captureLog, metric, newMetrics, tempDir } from "../store-staging/helpers.ts";
import { fillUntil, tmpfsDir } from "../../../e2e/support/archiver.ts";

const META: FileMeta = { records: 1, codec: "zstd", openedAt: 0, closedAt: 0, blockLengths: [3], blockRecords: [1] };
const A = "events/acme/2026/12/02/13-000001-k3x9a2_1.jsonl.zst";
const B = "events/acme/2026/12/02/13-000002-k3x9a2_1.jsonl.zst";
const C = "logs/13-000001-k3x9a2_2.jsonl.zst";

/** A destination with one file completed and two a kill left half written, as the dead process's store left them. */
async function killed(spool?: string) {
  spool ??= await tempDir();
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

/** The lines of the journal's logs in `dir`, in order, each as its kind and archive path. */
async function journalLines(dir: string): Promise<string[]> {
  const lines: string[] = [];
  for (const name of (await readdir(dir)).filter((n) => n.endsWith(".log")).sort()) {
    for (const line of (await readFile(join(dir, name), "utf8")).split("\n").filter(Boolean)) {
      lines.push(`${line.slice(0, 1)} ${(JSON.parse(line.slice(2)) as { relPath: string }).relPath}`);
    }
  }
  return lines;
}

test("the journal notes each file opened under its hidden name and each closed, in one log", async () => {
  const k = await killed();
  assert.equal((await readdir(k.dir)).length, 1, "one log, not a file a marker");
  // A, opened and closed before the others, took its log with it (see the next test).
  assert.deepEqual(await journalLines(k.dir), [`o ${B}`, `o ${C}`]);
  assert.deepEqual(await readFile(join(k.root, A), "utf8"), "a1\n");
});

test("past its size a log is replaced by one that starts with the files still open; the first is removed", async () => {
  const spool = await tempDir();
  const root = join(await tempDir(), "archive");
  const dir = join(spool, "partials");
  const { log } = captureLog();
  const journal = new PartialJournal(dir, log, { rotateBytes: 300 });
  const store = createFileStore(root, { publish: true, journal });
  const kept = await store.open(B);
  await kept.append(Buffer.from("kept\n"));
  for (let i = 0; i < 8; i++) {
    const f = await store.open(`roll/${i}.jsonl`);
    await f.append(Buffer.from("x\n"));
    await f.complete(META);
  }
  const logs = (await readdir(dir)).filter((n) => n.endsWith(".log"));
  assert.equal(logs.length, 1, `one log left: ${logs.join(", ")}`);
  const lines = await journalLines(dir);
  assert.equal(lines[0], `o ${B}`, "the new log starts with the file still open");
  assert.ok(lines.length < 17, `the first lines went with the first log: ${lines.length}`);
  const metrics = newMetrics();
  const settled = await settlePartials({
    dir,
    mode: "remove",
    quarantine: () => assert.fail("nothing to quarantine"),
    metrics,
    log,
  });
  assert.deepEqual(settled, { removed: 1, quarantined: 0 }, "only the file left open");
  await assert.rejects(readFile(partialPath(join(root, B))), { code: "ENOENT" });
  for (let i = 0; i < 8; i++) assert.equal(await readFile(join(root, `roll/${i}.jsonl`), "utf8"), "x\n");
});

test("once every file it noted is closed, the log is removed, and the next file starts a new one", async () => {
  const spool = await tempDir();
  const dir = join(spool, "partials");
  const { log } = captureLog();
  const store = createFileStore(join(await tempDir(), "archive"), {
    publish: true,
    journal: new PartialJournal(dir, log),
  });
  const files = [await store.open(A), await store.open(B)];
  for (const f of files) await f.append(Buffer.from("x\n"));
  await files[0]?.complete(META);
  assert.deepEqual(await journalLines(dir), [`o ${A}`, `o ${B}`, `c ${A}`], "B still open: the log stays");
  await files[1]?.complete(META);
  assert.deepEqual(await readdir(dir), [], "all closed: no log left");
  const next = await store.open(C);
  assert.deepEqual(await journalLines(dir), [`o ${C}`]);
  await next.abandon();
  assert.deepEqual(await readdir(dir), []);
});

test("logs read in order: a file opened in one and closed in a later one is closed", async () => {
  const k = await killed();
  // As a kill between a rotation's new log and the removal of the one before leaves them: B, open in the first, is
  // closed in the second (its partial, had it one, is another process's to touch no more); D is opened there.
  const D = "logs/13-000002-k3x9a2_2.jsonl.zst";
  const marker = (rel: string) => JSON.stringify({ root: k.root, relPath: rel });
  await writeFile(join(k.dir, "999999999999999-1-000000.log"), `o ${marker(B)}\nc ${marker(B)}\no ${marker(D)}\n`);
  await mkdir(dirname(partialPath(join(k.root, D))), { recursive: true });
  await writeFile(partialPath(join(k.root, D)), "d\n");
  assert.deepEqual(await k.settle("remove"), { removed: 2, quarantined: 0 }, "C and D");
  assert.equal(await readFile(partialPath(join(k.root, B)), "utf8"), `${B}\n`, "B was closed: untouched");
  for (const rel of [C, D]) await assert.rejects(readFile(partialPath(join(k.root, rel))), { code: "ENOENT" });
  assert.deepEqual(await readdir(k.dir), []);
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
  const [logName] = await readdir(k.dir);
  // A line a crash left torn, among whole ones; and marker files an earlier version of the journal wrote.
  await appendFile(join(k.dir, logName as string), "o {not json\n\0\0\0\n");
  await writeFile(join(k.dir, "garbage.json"), "{not json");
  await writeFile(
    join(k.dir, "gone.json"),
    JSON.stringify({ root: k.root, relPath: "events/none-000009-x_1.jsonl.zst" }),
  );
  const E = "events/acme/2026/12/02/13-000003-k3x9a2_1.jsonl.zst";
  await writeFile(partialPath(join(k.root, E)), "e\n");
  await writeFile(join(k.dir, "legacy.json"), JSON.stringify({ root: k.root, relPath: E }));
  assert.deepEqual(await k.settle("remove"), { removed: 3, quarantined: 0 }, "B, C and the legacy marker's E");
  assert.deepEqual(await readdir(k.dir), []);
  assert.equal(k.lines.filter((l) => l.msg.startsWith("unreadable in-progress file journal line")).length, 2);
});

test("a file that cannot be settled stays in the journal, and the next start settles it", async () => {
  const k = await killed();
  // A directory under C's hidden name: its unlink fails, whoever runs the test.
  const partialC = partialPath(join(k.root, C));
  await unlink(partialC);
  await mkdir(join(partialC, "in-the-way"), { recursive: true });
  assert.deepEqual(await k.settle("remove"), { removed: 1, quarantined: 0 }, "B only");
  assert.equal(k.lines.filter((l) => l.msg === "half-written file could not be settled at startup").length, 1);
  assert.deepEqual(await journalLines(k.dir), [`o ${C}`], "C carried into a log of its own");
  await rm(partialC, { recursive: true });
  await writeFile(partialC, "c\n");
  assert.deepEqual(await k.settle("remove"), { removed: 1, quarantined: 0 }, "C, at the next start");
  await assert.rejects(readFile(partialC), { code: "ENOENT" });
  assert.deepEqual(await readdir(k.dir), []);
});

test("a spool too full to quarantine or carry keeps its journal, and the start after space frees settles it", async (t) => {
  const spool = tmpfsDir(t, "1m", "partials-full-");
  const k = await killed(spool);
  // The hidden files are on another volume: their quarantine copies need a page each of the full spool.
  fillUntil(join(spool, "filler"), spool, 0);
  assert.deepEqual(await k.settle("quarantine"), { removed: 0, quarantined: 0 }, "a start, not a crash");
  assert.equal(k.lines.filter((l) => l.msg === "half-written file could not be settled at startup").length, 2);
  assert.equal(k.lines.filter((l) => l.msg.includes("cannot be carried: journal kept")).length, 1);
  await rm(join(spool, "filler"));
  assert.deepEqual(await k.settle("quarantine"), { removed: 0, quarantined: 2 }, "B and C, at the next start");
  assert.deepEqual(await readdir(k.dir), []);
  assert.equal(await readFile(join(spool, "uploads/quarantine", B), "utf8"), `${B}\n`);
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
