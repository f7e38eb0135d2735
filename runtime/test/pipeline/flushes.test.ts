// Flush scheduling alone (pipeline/flushes.ts), over a writer pool whose appends the test resolves or fails.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { pino } from "pino";
import type { FlushBatch } from "../../src/buffer/hot.ts";
import { blocks } from "../../src/buffer/blocks.ts";
import { Spill } from "../../src/buffer/spill.ts";
import { createCodec } from "../../src/codec/index.ts";
import { OffsetTracker } from "../../src/delivery/tracker.ts";
import { ArchiverError } from "../../src/errors.ts";
import { Health } from "../../src/observe/health.ts";
import { createMetrics } from "../../src/observe/metrics.ts";
import { Flushes, type FlushesDeps } from "../../src/pipeline/flushes.ts";
import { SinkTally } from "../../src/regulate/circuit.ts";

const tracker = new OffsetTracker({ holdsCommit: true });

function batch(destination: string, text: string): FlushBatch {
  const piece = Buffer.from(`${text}\n`);
  return {
    destination,
    pieces: [piece],
    bytes: piece.length,
    records: 1,
    hold: tracker.open(),
    trigger: "bytes",
    blocks: [],
    ends: Uint32Array.of(piece.length),
    offsets: Float64Array.of(0),
    runs: [0, 1, piece.length],
    spilled: undefined,
    spilledBytes: 0,
    openedAt: 0,
  };
}

/** Flushes over appends that wait for the test: `pending` holds each append's text and how to end it. */
function harness(inflightCap = 1 << 20, spill?: Spill, poolCap = 1 << 30) {
  const pending: { text: string; land: () => void; fail: (err: Error) => void }[] = [];
  const landed: string[] = [];
  const outcomes: string[] = [];
  const health = new Health();
  let unsaturated = 0;
  const writers: { completing: number; append: FlushesDeps["writers"]["append"] } = {
    completing: 0,
    append: (destination, block) =>
      new Promise<void>((resolve, reject) => {
        const raw = Buffer.isBuffer(block) ? block : Buffer.concat(block.raw);
        const text = `${destination}:${raw.toString().trim()}`;
        pending.push({ text, land: () => (landed.push(text), resolve()), fail: reject });
      }),
  };
  const flushes = new Flushes({
    writers,
    codec: createCodec("zstd"),
    spill,
    inflightCap,
    poolCap,
    metrics: createMetrics({ defaultMetrics: false }),
    log: pino({ level: "silent" }),
    health,
    localWrites: new SinkTally(),
    refused: (b) => void outcomes.push(`refused ${b.destination}`),
    writeFailed: (b) => void outcomes.push(`writeFailed ${b.destination}`),
    unsaturated: () => void unsaturated++,
  });
  const take = (text: string) => {
    const i = pending.findIndex((p) => p.text === text);
    assert.ok(i >= 0, `no append of ${text} waits (waiting: ${pending.map((p) => p.text).join(", ")})`);
    return pending.splice(i, 1)[0]!;
  };
  return { flushes, writers, pending, landed, outcomes, health, take, unsaturated: () => unsaturated };
}

const turn = () => sleep(1);

test("one destination's frames reach its writer in flush order; another destination's do not wait for them", async () => {
  const h = harness();
  h.flushes.flush(batch("a", "1"));
  h.flushes.flush(batch("a", "2"));
  h.flushes.flush(batch("b", "1"));
  await turn();
  assert.deepEqual(
    h.pending.map((p) => p.text),
    ["a:1", "b:1"],
    "a's second frame went to the writer before its first landed",
  );
  h.take("b:1").land();
  h.take("a:1").land();
  await turn();
  h.take("a:2").land();
  await h.flushes.landed();
  assert.deepEqual(h.landed, ["b:1", "a:1", "a:2"]);
  assert.ok(h.flushes.settled);
});

test("past 256 flushes started the rest wait as batches, start in order as others end, and landedSoFar waits for them", async () => {
  const h = harness();
  for (let i = 0; i < 256; i++) h.flushes.flush(batch(`a${i}`, "1"));
  h.flushes.flush(batch("a0", "2"));
  h.flushes.flush(batch("b", "1"));
  await turn();
  assert.equal(h.pending.length, 256, "the two past 256 wait, b's too though nothing of b runs");
  assert.equal(h.flushes.hasRoom(), false);
  let soFar = false;
  const landedSoFar = h.flushes.landedSoFar().then(() => (soFar = true));
  h.take("a1:1").land();
  await turn();
  // a0's second starts, behind its first: nothing new reaches the writer.
  assert.equal(h.pending.length, 255);
  h.take("a2:1").land();
  await turn();
  assert.ok(
    h.pending.some((p) => p.text === "b:1"),
    "b's starts once another ends",
  );
  for (let i = 0; i < 256; i++) if (i !== 1 && i !== 2) h.take(`a${i}:1`).land();
  await turn();
  assert.equal(soFar, false, "a0's second and b's are still in flight");
  h.take("a0:2").land();
  h.take("b:1").land();
  await landedSoFar;
  assert.deepEqual(h.landed.slice(-2), ["a0:2", "b:1"]);
  assert.ok(h.flushes.settled);
  assert.ok(h.flushes.hasRoom());
});

test("past the bytes in flight, intake waits for room, and has it once a flush lands", async () => {
  const h = harness(10);
  h.flushes.flush(batch("a", "0123456789"));
  assert.ok(h.flushes.saturated());
  let roomy = false;
  const room = h.flushes.room().then(() => (roomy = true));
  await turn();
  assert.equal(roomy, false);
  h.take("a:0123456789").land();
  await room;
  assert.equal(h.flushes.saturated(), false);
});

test("one destination with 4 flushes in flight holds intake; as its first lands, intake goes on", async () => {
  const h = harness();
  // Many destinations with 3 each: nothing waits.
  for (const d of ["a", "b", "c"]) for (const i of [1, 2, 3]) h.flushes.flush(batch(d, String(i)));
  assert.equal(h.flushes.saturated(), false);
  h.flushes.flush(batch("a", "4"));
  assert.ok(h.flushes.saturated(), "a's 4th flush in flight did not hold intake");
  assert.ok(h.flushes.hasRoom(), "the drain's and age flushes' room is the shared bounds only");
  let roomy = false;
  const room = h.flushes.room().then(() => (roomy = true));
  await turn();
  h.take("b:1").land();
  await turn();
  assert.equal(roomy, false, "another destination's flush landing let intake go on");
  h.take("a:1").land();
  await room;
  assert.equal(h.flushes.saturated(), false);
});

test("past 256 parked files rolling, intake waits; a roll done wakes it, and buffers may flush at their age", async () => {
  const h = harness();
  h.writers.completing = 257;
  assert.ok(h.flushes.saturated());
  assert.equal(h.flushes.hasRoom(), false);
  let roomy = false;
  const room = h.flushes.room().then(() => (roomy = true));
  h.flushes.wake();
  await turn();
  assert.equal(roomy, false, "still past the bound");
  assert.equal(h.unsaturated(), 0);
  h.writers.completing = 256;
  h.flushes.wake(); // a roll done (WriterPoolOptions.onRolled)
  await room;
  assert.equal(h.unsaturated(), 1, "aged buffers are told they may flush");
});

test("a local write that can clear is retried, holding intake, until it lands; one that cannot is refused", async () => {
  const h = harness();
  h.flushes.flush(batch("a", "x"));
  await turn();
  h.take("a:x").fail(new ArchiverError("ENOSPC", "disk full", "retryable"));
  await turn();
  assert.ok(h.flushes.saturated(), "a write being retried did not hold intake");
  assert.equal(h.health.snapshot().components.sink.state, "degraded");
  // Retried after LOCAL_WRITE_BACKOFF's first delay (0.1 s, with jitter).
  for (let i = 0; i < 100 && h.pending.length === 0; i++) await sleep(10);
  h.take("a:x").land();
  await h.flushes.landed();
  assert.equal(h.flushes.saturated(), false);
  assert.equal(h.health.snapshot().components.sink.state, "ok");
  assert.deepEqual(h.outcomes, []);

  h.flushes.flush(batch("b", "y"));
  await turn();
  h.take("b:y").fail(new ArchiverError("EACCES", "denied", "permanent"));
  await h.flushes.landed();
  assert.deepEqual(h.outcomes, ["refused b"]);
});

test("while the spill's writes are backed up intake waits, and a write landing wakes it", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "dfe-spill-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  // 16-byte chunks and a 40-byte cap: three 26-byte segments put two chunks (52 bytes) on their way.
  const spill = new Spill(dir, 1 << 20, 40, 16);
  const h = harness(1 << 20, spill);
  let segments: number[] = [];
  for (let i = 0; i < 3; i++) {
    segments = spill.write([Buffer.from("a\n")], 2, new Uint32Array([2]), new Float64Array([0]), [0, 1, 2], segments);
  }
  assert.equal(h.flushes.saturated(), true);
  assert.equal(h.flushes.hasRoom(), true, "flushes themselves have room");
  await h.flushes.room();
  await spill.landed();
  assert.equal(h.flushes.saturated(), false);
  assert.ok(h.unsaturated() >= 1, "woken as the writes landed");
  spill.release(segments);
  await spill.close();
});

test("past the pool's cap intake waits while a flush is on its way, and goes on once it lands", async () => {
  const h = harness(1 << 20, undefined, blocks.inUse + 4096);
  const held = blocks.alloc(8192);
  try {
    assert.equal(h.flushes.saturated(), false, "nothing on its way: waiting would free nothing");
    h.flushes.flush(batch("a", "1"));
    await turn();
    assert.equal(h.flushes.saturated(), true, "the pool is past its cap and a flush will give blocks back");
    const before = h.unsaturated();
    h.take("a:1").land();
    await turn();
    assert.equal(h.flushes.saturated(), false);
    assert.ok(h.unsaturated() > before, "woken as the flush landed");
  } finally {
    blocks.free(held);
  }
});
