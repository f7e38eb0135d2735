import { test } from "node:test";
import assert from "node:assert/strict";
import { fstatSync, mkdtempSync, readdirSync, readlinkSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  flushPieces,
  HotBufferPool,
  hotBufferBounds,
  joined,
  releaseFlush,
  wholeBatch,
  type BufferedRecords,
  type FlushBatch,
  VIEW_BYTES,
} from "../../src/buffer/hot.ts";
import { blocks, MIN_BLOCK, SLAB_BYTES } from "../../src/buffer/blocks.ts";
import { segmentCount, Spill, type Segments } from "../../src/buffer/spill.ts";
import type { Hold } from "../../src/delivery/hold.ts";
import { OffsetTracker } from "../../src/delivery/tracker.ts";

function pool(over: Partial<ConstructorParameters<typeof HotBufferPool>[0]> = {}) {
  const tracker = new OffsetTracker({ holdsCommit: true });
  const flushed: FlushBatch[] = [];
  const emptied: unknown[] = [];
  let now = 0;
  const p = new HotBufferPool({
    flushBytes: 1000,
    flushRecords: 100,
    flushAgeMs: 60_000,
    capBytes: 1 << 20,
    openHold: () => tracker.open(),
    onFlush: (b) => flushed.push(b),
    onEmptied: (h) => emptied.push(h),
    now: () => now,
    ...over,
  });
  return { p, tracker, flushed, emptied, advance: (ms: number) => (now += ms) };
}

/** The partition slots a hold holds records of. */
const slotsOf = (h: Hold | undefined): number[] => h?.parts.filter((_, i) => i % 3 === 0) ?? [];

/** One record at `offset`, as the route stage hands a group over. */
const rec = (offset: number, s: string) => group([s], offset);

/** The group where a route reply has it: after other bytes and words, which no flush may take. */
function group(values: string[], first: number): BufferedRecords {
  const data = Buffer.from("other" + values.map((v) => v + "\n").join("") + "other");
  const ends = new Uint32Array(values.length + 4).fill(999);
  let end = 0;
  values.forEach((v, i) => (ends[i + 3] = end += Buffer.byteLength(v) + 1));
  const offsets = new Float64Array(values.length + 4).fill(-1);
  values.forEach((_, i) => (offsets[i + 2] = first + i));
  return { count: values.length, data, dataAt: 5, ends, endsAt: 3, offsets, offsetsAt: 2 };
}
const lines = (b: FlushBatch) => joined(b).toString().split("\n").slice(0, -1);

test("a buffer flushes at flush_bytes plus one record, with a newline after each payload", () => {
  const { p, flushed } = pool({ flushBytes: 11 });
  p.add("d", 0, rec(0, "aaaa"));
  p.add("d", 0, rec(1, "bbbb"));
  assert.equal(flushed.length, 0);
  p.add("d", 0, rec(2, "cccc"));
  assert.equal(flushed.length, 1);
  assert.deepEqual(lines(flushed[0]!), ["aaaa", "bbbb", "cccc"]);
  assert.equal(flushed[0]?.trigger, "bytes");
  assert.deepEqual([...flushed[0]!.ends], [5, 10, 15]);
  assert.equal(flushed[0]?.hold.records, 3);
});

test("a buffer flushes at flush_records and at flush_age", () => {
  const { p, flushed, advance } = pool({ flushRecords: 3 });
  for (let i = 0; i < 3; i++) p.add("d", 0, rec(i, "x"));
  assert.equal(flushed[0]?.trigger, "records");
  p.add("e", 0, rec(3, "y"));
  advance(59_999);
  p.tick();
  assert.equal(flushed.length, 1);
  advance(1);
  p.tick();
  assert.equal(flushed[1]?.trigger, "age");
  assert.equal(flushed[1]?.destination, "e");
});

test("buffers are bounded by bytes: thousands of destinations buffer at once under the bound", () => {
  const { p, flushed } = pool({ capBytes: 2 ** 30, flushBytes: 1 << 20 });
  for (let d = 0; d < 10_000; d++) p.add(`d${d}`, 0, rec(d, "x".repeat(100)));
  assert.equal(flushed.length, 0);
  assert.equal(p.stats().buffers, 10_000);
  // Half the cap (a quarter of a 512 MiB limit), at most 128 flush_bytes; one buffer a 4 KiB share.
  assert.deepEqual(hotBufferBounds(128 << 20, 1 << 20), { bytes: 64 << 20, buffers: 16_384 });
  assert.deepEqual(hotBufferBounds(2 ** 40, 1 << 20), { bytes: 128 << 20, buffers: 32_768 });
  assert.deepEqual(hotBufferBounds(4 << 20, 1 << 20), { bytes: 2 << 20, buffers: 512 });
  assert.deepEqual(hotBufferBounds(16 << 10, 1 << 20), { bytes: 8 << 10, buffers: 64 });
});

test("past the count the bound allows, the least recently used buffer flushes first", () => {
  // A 256 KiB cap, a 128 KiB bound: 64 buffers.
  const { p, flushed } = pool({ capBytes: 256 << 10 });
  for (let d = 0; d < 64; d++) p.add(`d${d}`, 0, rec(d, "x"));
  p.add("d0", 0, rec(100, "again")); // d0 is now the most recent; d1 the least
  p.add("new", 0, rec(101, "z"));
  assert.equal(flushed.length, 1);
  assert.equal(flushed[0]?.destination, "d1");
  assert.equal(flushed[0]?.trigger, "evict");
  assert.equal(p.stats().buffers, 64);
});

test("past the bound the largest buffers flush first, down to three quarters of it, counted in blocks held", () => {
  // A 24 KiB cap: a 12 KiB bound. Each buffer holds a 512-byte block of ends and offsets, and a power-of-two block.
  const { p, flushed } = pool({ capBytes: 24 << 10, flushBytes: 1 << 20 });
  p.add("small", 0, rec(0, "x".repeat(100))); // 512 + 512
  p.add("mid", 0, rec(1, "z".repeat(1500))); // 2048 + 512
  p.add("big", 0, rec(2, "y".repeat(3000))); // 4096 + 512
  assert.equal(flushed.length, 0);
  p.add("late", 0, rec(3, "w".repeat(3000)));
  // 12,800 bytes held: big alone leaves 8,192, under 9,216.
  assert.deepEqual(
    flushed.map((b) => [b.destination, b.trigger]),
    [["big", "cap"]],
  );
  assert.equal(p.stats().bytes, 101 + 1501 + 3001, "records' bytes");
  p.add("small", 0, rec(4, "v".repeat(3000)));
  // 11,776 bytes held, under the bound: nothing more.
  assert.equal(flushed.length, 1);
});

test("a revoked partition's buffered records are discarded before any write", () => {
  const { p, flushed, emptied, tracker } = pool();
  const a = tracker.slot("t", 0);
  const b = tracker.slot("t", 1);
  p.add("d", a, rec(0, "a0"));
  p.add("d", b, rec(0, "b0"));
  p.add("d", a, rec(1, "a1"));
  p.add("only-b", b, rec(1, "b1"));
  assert.equal(p.discardSlots(new Set([b])), 2);
  assert.equal(emptied.length, 1, "the buffer left empty hands its hold back");
  p.flushAll();
  assert.equal(flushed.length, 1);
  assert.deepEqual(lines(flushed[0]!), ["a0", "a1"]);
  assert.deepEqual([...flushed[0]!.ends], [3, 6]);
  assert.equal(flushed[0]?.hold.records, 2);
  assert.deepEqual(slotsOf(flushed[0]?.hold), [a]);
});

test("a revoked partition's hand-over flushes every buffer holding its records, and only those", () => {
  const { p, flushed, tracker } = pool();
  const a = tracker.slot("t", 0);
  const b = tracker.slot("t", 1);
  p.add("mixed", a, rec(0, "a0"));
  p.add("mixed", b, rec(0, "b0"));
  p.add("only-a", a, rec(1, "a1"));
  p.add("only-b", b, rec(1, "b1"));
  // One flush at a time while room says so, as the drain's flushAll.
  let room = 1;
  assert.equal(
    p.flushSlots(new Set([b]), () => room-- > 0),
    false,
  );
  assert.deepEqual(
    flushed.map((f) => f.destination),
    ["mixed"],
  );
  assert.equal(p.flushSlots(new Set([b])), true);
  assert.deepEqual(
    flushed.map((f) => [f.destination, f.trigger, lines(f)]),
    [
      ["mixed", "revoke", ["a0", "b0"]],
      ["only-b", "revoke", ["b1"]],
    ],
  );
  assert.deepEqual(p.stats(), { buffers: 1, bytes: 3, records: 1 });
});

test("nothing is allocated before a destination's first record, and flushing hands the memory over", () => {
  const { p, flushed } = pool();
  assert.deepEqual(p.stats(), { buffers: 0, bytes: 0, records: 0 });
  p.add("d", 0, rec(0, "payload"));
  p.flushAll();
  assert.deepEqual(p.stats(), { buffers: 0, bytes: 0, records: 0 });
  assert.equal(flushed[0]?.bytes, 8);
});

test("a group crossing a limit flushes at the record that reaches it, and the rest buffers on", () => {
  const { p, flushed } = pool({ flushBytes: 11, flushRecords: 100 });
  p.add("d", 0, group(["aaaa", "bbbb", "cccc", "dddd", "eeee"], 10));
  assert.equal(flushed.length, 1);
  assert.deepEqual(lines(flushed[0]!), ["aaaa", "bbbb", "cccc"]);
  assert.deepEqual([...flushed[0]!.offsets], [10, 11, 12]);
  assert.deepEqual(p.stats(), { buffers: 1, bytes: 10, records: 2 });
  const byCount = pool({ flushRecords: 2 });
  byCount.p.add("d", 3, group(["a", "b", "c", "d", "e"], 0));
  assert.deepEqual(
    byCount.flushed.map((b) => [lines(b), b.trigger, b.hold.records, b.hold.parts.filter((_, i) => i % 3 === 1)]),
    [
      [["a", "b"], "records", 2, [0]],
      [["c", "d"], "records", 2, [2]],
    ],
  );
  byCount.p.flushAll();
  assert.deepEqual([...byCount.flushed[2]!.ends], [2]);
  assert.deepEqual(byCount.flushed[2]!.runs, [3, 1, 2]);
});

/** `g` as a route reply hands it over: its memory shared, where a flush's lane reads it in place. */
function shared(g: BufferedRecords): BufferedRecords {
  const data = Buffer.from(new SharedArrayBuffer(g.data.length));
  g.data.copy(data);
  return { ...g, data };
}

test("groups of VIEW_BYTES or more in a route reply are held as views of it and flushed as pieces of it, copied only as a turn ends", () => {
  const { p, flushed } = pool({ flushBytes: 1 << 20, capBytes: 64 << 20 });
  const big = (c: string): string => c.repeat(VIEW_BYTES);
  const first = shared(group([big("a"), big("b")], 0));
  const second = shared(group([big("c")], 2));
  p.add("d", 0, first);
  p.add("d", 0, second);
  p.flushAll();
  const f = flushed[0]!;
  assert.deepEqual(
    f.pieces.map((piece) => piece.buffer),
    [first.data.buffer, second.data.buffer],
    "no copy: each piece lies in its reply",
  );
  assert.equal(f.bytes, 3 * (VIEW_BYTES + 1));
  assert.deepEqual(lines(f), [big("a"), big("b"), big("c")]);
  assert.deepEqual(
    [...f.ends],
    [1, 2, 3].map((i) => i * (VIEW_BYTES + 1)),
  );

  const kept = shared(group([big("d")], 0));
  p.add("e", 0, kept);
  p.settle();
  kept.data.fill(0x78); // the reply's memory written again by its lane
  const after = shared(group([big("e")], 1));
  p.add("e", 0, after);
  p.flushAll();
  const g = flushed[1]!;
  assert.deepEqual(
    lines(g),
    [big("d"), big("e")],
    "what the turn left buffered was copied before the reply was reused",
  );
  assert.notEqual(g.pieces[0]?.buffer, kept.data.buffer);
  assert.equal(g.pieces[1]?.buffer, after.data.buffer);
});

test("a group smaller than VIEW_BYTES in a route reply is copied at once, behind the views before it", () => {
  const { p, flushed } = pool({ flushBytes: 1 << 20, capBytes: 64 << 20 });
  const big = shared(group(["b".repeat(VIEW_BYTES)], 0));
  const small = shared(group(["s1", "s2"], 1));
  p.add("d", 0, big);
  p.add("d", 0, small);
  small.data.fill(0x78); // before the turn ends: nothing of the reply is read after add
  big.data.fill(0x78);
  const last = shared(group(["s3"], 3));
  p.add("d", 0, last);
  p.flushAll();
  const f = flushed[0]!;
  assert.deepEqual(lines(f), ["b".repeat(VIEW_BYTES), "s1", "s2", "s3"]);
  assert.ok(
    f.pieces.every((piece) => !(piece.buffer instanceof SharedArrayBuffer) || piece.buffer.byteLength > 1 << 16),
    "every piece is a pooled block, none a reply",
  );
  assert.deepEqual([...f.offsets], [0, 1, 2, 3]);
});

test("pieces and copies keep the records' order, through a limit and a revocation", () => {
  const { p, flushed, tracker } = pool({ flushBytes: 11, flushRecords: 100 });
  p.add("d", 0, shared(group(["aaaa"], 0)));
  p.add("d", 0, group(["bbbb"], 1));
  p.add("d", 0, shared(group(["cccc", "dddd", "eeee"], 2)));
  assert.deepEqual(lines(flushed[0]!), ["aaaa", "bbbb", "cccc"]);
  p.flushAll();
  assert.deepEqual(lines(flushed[1]!), ["dddd", "eeee"]);
  assert.deepEqual([...flushed[1]!.ends], [5, 10]);

  const a = tracker.slot("t", 0);
  const b = tracker.slot("t", 1);
  p.add("r", a, shared(group(["a0"], 0)));
  p.add("r", b, shared(group(["b0"], 0)));
  p.add("r", a, shared(group(["a1"], 1)));
  assert.equal(p.discardSlots(new Set([b])), 1);
  p.add("r", a, shared(group(["a2"], 2)));
  p.flushAll();
  assert.deepEqual(lines(flushed[2]!), ["a0", "a1", "a2"]);
  assert.deepEqual([...flushed[2]!.offsets], [0, 1, 2]);
});

test("shed flushes the largest buffers down to half of what all of them hold", () => {
  const { p, flushed } = pool({ flushBytes: 1 << 20 });
  p.add("a", 0, rec(0, "x".repeat(3000)));
  p.add("b", 0, rec(1, "y".repeat(1500)));
  p.add("c", 0, rec(2, "z".repeat(100)));
  p.shed(); // 8,192 bytes held: a (4,608) alone leaves 3,584
  assert.deepEqual(
    flushed.map((b) => [b.destination, b.trigger]),
    [["a", "cap"]],
  );
  p.shed();
  p.shed();
  assert.deepEqual(
    flushed.map((b) => b.destination),
    ["a", "b", "c"],
  );
  assert.deepEqual(p.stats(), { buffers: 0, bytes: 0, records: 0 });
});

/** A spill in a temp directory of its own, removed after the test. */
function spillFor(
  t: { after: (fn: () => Promise<void>) => void },
  budget = 1 << 20,
  readCap = 1 << 20,
  chunkBytes?: number,
): Spill {
  const dir = mkdtempSync(join(tmpdir(), "dfe-spill-"));
  const spill = new Spill(dir, budget, readCap, chunkBytes);
  // Closed, so no file handle is left for the collector to close.
  t.after(async () => {
    await spill.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return spill;
}

test("past the bound buffers spill rather than flush, and their flush reads the spill back first, in order", async (t) => {
  const spill = spillFor(t);
  // A 3 KiB bound; flush_bytes 4,000, so a relieved buffer is far from a frame's worth.
  const { p, flushed } = pool({ capBytes: 6 << 10, flushBytes: 4000, spill });
  p.add("a", 0, rec(0, "a".repeat(300)));
  p.add("b", 0, rec(1, "b".repeat(30)));
  p.add("a", 0, rec(2, "A".repeat(1200))); // a holds 2,048 + 512 bytes of blocks, b 512 + 512: "a" goes
  assert.equal(flushed.length, 0, "relieved by the spill: no frame yet");
  assert.ok(spill.bytes > 0);
  assert.equal(p.stats().bytes, 31, "the relieved buffer's memory goes back at once: the spill holds a copy");
  assert.equal(p.stats().records, 3, "spilled records still count as buffered");
  p.add("a", 0, rec(3, "tail"));
  p.flushAll();
  const a = flushed.find((b) => b.destination === "a") as FlushBatch;
  assert.equal(a.records, 3);
  assert.equal(a.bytes, 301 + 1201 + 5);
  const pieces = await flushPieces(a, spill);
  assert.deepEqual(Buffer.concat(pieces).toString().split("\n").slice(0, -1), [
    "a".repeat(300),
    "A".repeat(1200),
    "tail",
  ]);
  const whole = wholeBatch(a, spill);
  assert.deepEqual([...whole.ends], [301, 1502, 1507], "ends run on past the spilled records");
  assert.deepEqual([...whole.offsets], [0, 2, 3]);
  assert.deepEqual(whole.runs, [0, 2, 1502, 0, 1, 1507], "runs too, the spilled one first");
  for (const b of flushed) releaseFlush(b, spill);
  assert.equal(spill.bytes, 0, "released segments leave nothing spilled");
});

/** A pool whose bound (half of `capBytes`) spills, and two partition slots of its tracker. */
function spillingPool(t: { after: (fn: () => Promise<void>) => void }, capBytes: number) {
  const spill = spillFor(t);
  const { p, flushed, tracker } = pool({ capBytes, flushBytes: 4000, spill });
  return { spill, p, flushed, a: tracker.slot("t", 0), b: tracker.slot("t", 1) };
}

test("a revoked partition's spilled records are read back and discarded with the rest", async (t) => {
  // A 3 KiB bound: "d" (2,048 + 512 bytes of blocks) spills as "e" (512 + 512) comes in.
  const { spill, p, flushed, a, b } = spillingPool(t, 6 << 10);
  p.add("d", a, rec(0, "a".repeat(600)));
  p.add("d", b, rec(1, "b".repeat(600)));
  p.add("e", a, rec(2, "e".repeat(40)));
  assert.equal(p.stats().bytes, 41);
  p.add("d", a, rec(3, "tail"));
  assert.equal(p.discardSlots(new Set([b])), 1);
  p.flushAll();
  const d = flushed.find((x) => x.destination === "d") as FlushBatch;
  assert.deepEqual(lines(d), ["a".repeat(600), "tail"]);
  assert.equal(segmentCount(d.spilled ?? []), 0, "read back into memory");
  assert.equal(d.hold.records, 2);
  for (const x of flushed) releaseFlush(x, spill);
  assert.equal(spill.bytes, 0);
});

test("a revoked partition's hand-over flushes its spilled records too, those in memory of another slot", async (t) => {
  // The third buffer takes the 4 KiB bound past it: "d" and "f" (2,048 + 512 bytes of blocks each), slot b's, spill
  // down to 3 KiB, and "e" (512 + 512) stays.
  const { spill, p, flushed, a, b } = spillingPool(t, 8 << 10);
  p.add("e", a, rec(2, "e".repeat(30)));
  p.add("d", b, rec(0, "d".repeat(1100)));
  p.add("f", b, rec(1, "f".repeat(1100)));
  assert.equal(flushed.length, 0);
  assert.equal(p.stats().records, 3);
  // In memory "d" now holds slot a alone, and "f" nothing: only their spilled records are slot b's.
  p.add("d", a, rec(3, "tail"));
  // Those holding records in memory first ("d"), then those whose records are all spilled ("f").
  p.flushSlots(new Set([b]));
  assert.deepEqual(
    flushed.map((x) => [x.destination, x.trigger, x.records, segmentCount(x.spilled ?? [])]),
    [
      ["d", "revoke", 2, 1],
      ["f", "revoke", 1, 1],
    ],
  );
  const read = await Promise.all(flushed.map(async (x) => Buffer.concat(await flushPieces(x, spill)).toString()));
  assert.deepEqual(read, [`${"d".repeat(1100)}\ntail\n`, `${"f".repeat(1100)}\n`]);
  assert.deepEqual(
    flushed.map((x) => slotsOf(x.hold)),
    [[b, a], [b]],
  );
  assert.deepEqual(p.stats(), { buffers: 1, bytes: 31, records: 1 }, "slot a's own buffer stays");
  for (const x of flushed) releaseFlush(x, spill);
  assert.equal(spill.bytes, 0);
});

test("segments gather in a chunk in memory; a full chunk goes to file in one write, unlinked once open", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "dfe-spill-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  // Chunks of 64 bytes: a segment of "hello\n" takes 6 + 12 + 12 bytes, so two fill one.
  const spill = new Spill(dir, 1 << 20, 100, 64);
  let segments: Segments = [];
  const one = () =>
    (segments = spill.write(
      [Buffer.from("hel"), Buffer.from("lo\n")],
      6,
      new Uint32Array([6]),
      new Float64Array([7]),
      [3, 1, 6],
      segments,
    ));
  one();
  one();
  assert.equal(spill.memory, 60, "in memory until its chunk is full");
  assert.deepEqual(readdirSync(dir), [], "no file before a chunk is full");
  one();
  await spill.landed();
  assert.equal(spill.memory, 30, "the full chunk is on file, the third segment's is filling");
  assert.deepEqual(readdirSync(dir), [], "nothing left to find after a crash");
  for (const back of spill.readAll(segments)) {
    assert.deepEqual(
      [back.data.toString(), [...back.ends], [...back.offsets], back.runs],
      ["hello\n", [6], [7], [3, 1, 6]],
    );
  }
  const into = Buffer.alloc(18);
  await spill.read(segments, into);
  assert.equal(into.toString(), "hello\n".repeat(3), "from file and from memory, end to end");
  assert.equal(spill.bytes, 90);
  spill.release(segments);
  assert.equal(spill.bytes, 0);
  assert.equal(spill.memory, 0, "a filling chunk with nothing live starts again");
  await spill.close();
});

/** The sizes of this process's open spill files in `dir` (unlinked, so found through /proc/self/fd). */
function spillFileSizes(dir: string): number[] {
  const sizes: number[] = [];
  for (const fd of readdirSync("/proc/self/fd")) {
    let target: string;
    try {
      target = readlinkSync(`/proc/self/fd/${fd}`);
    } catch {
      continue;
    }
    if (target.startsWith(`${dir}/`) && target.endsWith(" (deleted)")) sizes.push(fstatSync(Number(fd)).size);
  }
  return sizes;
}

test("chunks sealed together go to file in slots next to each other; later chunks take the slots of retired ones", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "dfe-spill-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  // Slots of 64 bytes: a segment of one 6-byte record takes 30, so two fill a chunk.
  const spill = new Spill(dir, 1 << 20, 1 << 20, 64);
  const fill = (text: string): Segments[] => {
    const lists: Segments[] = [];
    for (let i = 0; i < 7; i++) {
      lists.push(spill.write([Buffer.from(text)], 6, new Uint32Array([6]), new Float64Array([i]), [0, 1, 6], []));
    }
    return lists;
  };
  const first = fill("hello\n");
  await spill.landed();
  // Three chunks sealed in one turn: slots 0, 64 and 128, the last written to its length (60); the seventh fills.
  assert.deepEqual(spillFileSizes(dir), [188]);
  for (const list of first) spill.release(list);
  const second = fill("world\n");
  await spill.landed();
  assert.deepEqual(spillFileSizes(dir), [188], "written over the retired chunks' slots: the file grew no more");
  for (const [i, list] of second.entries()) {
    const [back] = spill.readAll(list);
    assert.deepEqual([back?.data.toString(), [...(back?.offsets ?? [])]], ["world\n", [i]]);
  }
  const into = Buffer.alloc(42);
  await spill.read(second.flat(), into);
  assert.equal(into.toString(), "world\n".repeat(7), "from file and from memory, end to end");
  for (const list of second) spill.release(list);
  await spill.close();
});

test("a merge copies segments from file and from memory into one, their ends and runs moved past the bytes before", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "dfe-spill-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  // Chunks of 128 bytes: the first segments go to file, the last stay in the chunk filling.
  const spill = new Spill(dir, 1 << 20, 1 << 20, 128);
  let segments: Segments = [];
  const parts = [
    { values: ["a1", "a22"], first: 10, runs: [0, 2, 7] },
    { values: ["b333"], first: 20, runs: [1, 1, 5] },
    { values: ["c1", "c2", "c3"], first: 30, runs: [0, 1, 3, 2, 2, 9] },
    { values: ["d4444"], first: 40, runs: [1, 1, 6] },
  ];
  for (const { values, first, runs } of parts) {
    const data = Buffer.from(values.map((v) => v + "\n").join(""));
    let end = 0;
    const ends = new Uint32Array(values.map((v) => (end += v.length + 1)));
    const offsets = new Float64Array(values.map((_, i) => first + i));
    segments = spill.write([data], data.length, ends, offsets, runs, segments);
  }
  await spill.landed();
  assert.ok(spill.memory < spill.bytes, "some segments are on file");
  const before = spill.bytes;
  segments = spill.merge(segments, 1);
  assert.equal(segmentCount(segments), 2, "the first segment kept, the three after it merged");
  assert.equal(spill.bytes, before, "the same records, once");
  await spill.landed();
  const [first, merged] = spill.readAll(segments);
  assert.equal(first?.data.toString(), "a1\na22\n");
  assert.deepEqual(
    [merged?.data.toString(), [...(merged?.ends ?? [])], [...(merged?.offsets ?? [])], merged?.runs],
    ["b333\nc1\nc2\nc3\nd4444\n", [5, 8, 11, 14, 20], [20, 30, 31, 32, 40], [1, 1, 5, 0, 1, 8, 2, 2, 14, 1, 1, 20]],
  );
  spill.release(segments);
  assert.equal(spill.bytes, 0);
  await spill.close();
});

test("reads wait within the read cap, and the budget bounds what is spilled", async (t) => {
  const spill = spillFor(t, 100, 100);
  await spill.take(80);
  let second = false;
  const waiting = spill.take(30).then(() => (second = true));
  await new Promise((r) => setImmediate(r));
  assert.equal(second, false, "past the cap a read waits");
  spill.give(80);
  await waiting;
  assert.equal(second, true);
  assert.equal(spill.room(100), true);
  const s = spill.write([Buffer.from("a\n")], 2, new Uint32Array([2]), new Float64Array([0]), [0, 1, 2], undefined);
  assert.equal(spill.room(100 - 26), true);
  assert.equal(spill.room(100 - 25), false, "the budget counts what is spilled, index too");
  spill.release(s);
  await spill.close();
});

test("a chunk's memory comes from the blocks' pool, and goes back to it once its write lands", async (t) => {
  const spill = spillFor(t, 1 << 20, 1 << 20, 4096);
  const before = blocks.inUse;
  let segments: Segments = [];
  const write = () =>
    (segments = spill.write(
      [Buffer.alloc(3000, 97)],
      3000,
      new Uint32Array([3000]),
      new Float64Array([0]),
      [0, 1, 3000],
      segments,
    ));
  write();
  assert.equal(blocks.inUse, before + 4096, "the chunk filling");
  write();
  assert.equal(blocks.inUse, before + 8192, "the first chunk on its way to file, the second filling");
  await spill.landed();
  assert.equal(blocks.inUse, before + 4096, "the written chunk's block is back in the pool");
  spill.release(segments);
  await spill.close();
});

test("reads waiting for room go in the order they came, however many wait", async (t) => {
  const spill = spillFor(t, 100, 10);
  await spill.take(10);
  const order: number[] = [];
  const all = Array.from({ length: 3000 }, (_, i) =>
    spill.take(1).then(() => {
      order.push(i);
      spill.give(1);
    }),
  );
  spill.give(10);
  await Promise.all(all);
  assert.deepEqual(
    order,
    Array.from({ length: 3000 }, (_, i) => i),
  );
  await spill.close();
});

test("past the cap of chunks on their way to file the spill is backed up, and says when a write lands", async (t) => {
  // Each 26-byte segment overflows a 16-byte chunk: it takes one of its own, and seals the one before. A 100-byte cap.
  const spill = spillFor(t, 1 << 20, 100, 16);
  let landed = 0;
  spill.onLanded(() => landed++);
  let segments: Segments = [];
  const write = () =>
    (segments = spill.write([Buffer.from("a\n")], 2, new Uint32Array([2]), new Float64Array([0]), [0, 1, 2], segments));
  for (let i = 0; i < 4; i++) write();
  assert.equal(spill.backedUp, false, "78 bytes on their way");
  write();
  assert.equal(spill.backedUp, true, "104 bytes on their way");
  assert.equal(spill.room(1), true, "still room: what spills more waits in memory");
  await spill.landed();
  assert.equal(spill.backedUp, false);
  assert.equal(landed, 4);
  spill.release(segments);
  await spill.close();
});

test("a spill whose write fails keeps its records in memory: the flush reads them, nothing is lost", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "dfe-spill-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  // Chunks of 32 bytes, so each spilled buffer's segment goes to file (or fails to) once the next one comes.
  const spill = new Spill(join(dir, "gone"), 1 << 20, 1 << 20, 32);
  // The spill's directory goes before its first file opens (a spool full or unmounted: the open fails).
  rmSync(join(dir, "gone"), { recursive: true });
  const { p, flushed } = pool({ capBytes: 200, spill });
  p.add("a", 0, rec(0, "a".repeat(40)));
  p.add("b", 0, rec(1, "b".repeat(30)));
  p.add("a", 0, rec(2, "A".repeat(40)));
  // Two more relieve the bound again: each spilled buffer seals the chunk before it.
  p.add("c", 0, rec(3, "c".repeat(60)));
  p.add("d", 0, rec(5, "d".repeat(60)));
  await spill.landed();
  assert.equal(spill.room(1), false, "after a failed write nothing more is spilled");
  p.add("a", 0, rec(4, "tail"));
  p.flushAll();
  const a = flushed.find((b) => b.destination === "a") as FlushBatch;
  const pieces = await flushPieces(a, spill);
  assert.deepEqual(Buffer.concat(pieces).toString().split("\n").slice(0, -1), ["a".repeat(40), "A".repeat(40), "tail"]);
  const whole = wholeBatch(a, spill);
  assert.deepEqual([...whole.offsets], [0, 2, 4]);
  for (const b of flushed) releaseFlush(b, spill);
  assert.equal(spill.bytes, 0);
  assert.equal(spill.memory, 0, "a kept chunk goes once nothing in it is live");
});

test("past the count, the least recently used buffer spills and goes cold: no frame, its records flushed later in order", (t) => {
  const spill = spillFor(t);
  const { p, flushed } = pool({ spill });
  const { buffers } = hotBufferBounds(1 << 20, 1000);
  for (let i = 0; i <= buffers; i++) p.add(`d${i}`, 0, rec(i, `r${i}`));
  assert.equal(flushed.length, 0, "evicted into the spill, not flushed");
  const stats = p.stats();
  assert.deepEqual([stats.buffers, stats.records], [buffers + 1, buffers + 1], "the cold one counts too");
  assert.equal(spill.bytes, 3 + 12 + 12, "d0's record, its end, offset and run");
  const memory = p.stats().bytes;
  p.add("d0", 0, rec(1000, "again"));
  assert.equal(spill.bytes, 3 + 12 + 12 + (6 + 12 + 12), "cold, d0 takes its next record straight into the spill");
  assert.equal(p.stats().bytes, memory, "and evicts no other buffer");
  p.flushAll();
  const d0 = flushed.find((b) => b.destination === "d0") as FlushBatch;
  assert.equal(segmentCount(d0.spilled ?? []), 2, "both records were spilled");
  assert.equal(d0.records, 2);
});

test("aged buffers flush oldest first while there is room, and the rest wait for the next tick", () => {
  const { p, flushed, advance } = pool({});
  p.add("old", 0, rec(0, "a"));
  advance(10);
  p.add("mid", 0, rec(1, "b"));
  advance(10);
  p.add("young", 0, rec(2, "c"));
  p.add("old", 0, rec(3, "d")); // recency: mid, young, old; age: old, mid, young
  advance(60_000);
  let room = 2;
  p.tick(() => room-- > 0);
  assert.deepEqual(
    flushed.map((f) => [f.destination, f.trigger]),
    [
      ["old", "age"],
      ["mid", "age"],
    ],
  );
  p.tick(() => true);
  assert.deepEqual(
    flushed.map((f) => f.destination),
    ["old", "mid", "young"],
  );
  assert.equal(p.stats().buffers, 0);
});

test("flushAll stops when there is no room and says whether any buffer is left", () => {
  const { p, flushed } = pool({});
  for (const d of ["a", "b", "c"]) p.add(d, 0, rec(0, d));
  let room = 2;
  assert.equal(
    p.flushAll(() => room-- > 0),
    false,
  );
  assert.equal(flushed.length, 2);
  assert.equal(p.flushAll(), true);
  assert.equal(flushed.length, 3);
});

test("a drain out of room goes on where it stopped, each buffer flushed once, those taken in meanwhile too", async (t) => {
  // A 3.5 KiB bound: "a" and "b" (1,024 + 512 bytes of blocks each) spill (cold) as "c" and "d" come in.
  const { p, flushed, spill } = spillingPool(t, 7 << 10);
  for (const d of ["a", "b", "c", "d"]) p.add(d, 0, rec(0, d.repeat(600)));
  let calls = 0;
  for (let once = true; ; once = false) {
    calls++;
    let room = 1;
    if (p.flushAll(() => room-- > 0)) break;
    if (!once) continue;
    // After "c": "a" is taken back into memory, and "e" comes in.
    p.add("a", 0, rec(1, "a2"));
    p.add("e", 0, rec(2, "e"));
  }
  // Started over at each call, the pass would have flushed "a" second, the first buffer in memory.
  assert.deepEqual(
    flushed.map((f) => f.destination),
    ["c", "d", "e", "a", "b"],
  );
  assert.equal(calls, 6, "one flush a call, and a last call that finds none left");
  const a = flushed.find((f) => f.destination === "a") as FlushBatch;
  assert.deepEqual(Buffer.concat(await flushPieces(a, spill)).toString(), `${"a".repeat(600)}\na2\n`);
  for (const b of flushed) releaseFlush(b, spill);
});

test("past coldPast destinations, a buffer small at flush_age spills, and flushes once it is coldAgeMs old", async (t) => {
  const spill = spillFor(t);
  const { p, flushed, advance } = pool({ spill, coldAgeMs: 300_000, coldPast: 1 });
  p.add("few", 0, rec(0, "few"));
  advance(60_000);
  p.tick();
  assert.deepEqual(
    flushed.map((b) => [b.destination, b.trigger]),
    [["few", "age"]],
    "no more destinations than coldPast: flushed at flush_age",
  );
  flushed.length = 0;
  p.add("tail", 0, rec(0, "first"));
  p.add("other", 0, rec(0, "other"));
  advance(60_000);
  p.tick();
  assert.equal(flushed.length, 0, "spilled at flush_age, not flushed");
  assert.deepEqual(p.stats(), { buffers: 2, bytes: 0, records: 2 });
  p.add("tail", 0, rec(1, "second"));
  advance(239_999);
  p.tick();
  assert.equal(flushed.length, 0);
  advance(1);
  p.tick();
  assert.deepEqual(
    flushed.map((b) => [b.destination, b.trigger, b.records, segmentCount(b.spilled ?? [])]),
    [
      ["tail", "age", 2, 1],
      ["other", "age", 1, 1],
    ],
  );
  const f = flushed[0] as FlushBatch;
  assert.equal(Buffer.concat(await flushPieces(f, spill)).toString(), "first\nsecond\n");
  for (const b of flushed) releaseFlush(b, spill);
  assert.equal(spill.bytes, 0);
});

/** "x" takes a record of 61 bytes and is relieved for another destination's 46, 8 times (a 100-byte bound). */
/** In a 1.5 KiB bound, x and another buffer (512 + 512 bytes of blocks each) take turns to spill, eight times. */
function takeBackEightTimes(p: HotBufferPool): void {
  for (let round = 0; round < 8; round++) {
    p.add("x", 0, rec(round, `x${round}`.padEnd(60, ".")));
    p.add(`o${round}`, 1, rec(round, "o".repeat(45)));
  }
}

/** A flushed batch's records, spilled ones first, without the dots that padded them. */
async function unpadded(b: FlushBatch, spill: Spill): Promise<string[]> {
  return Buffer.concat(await flushPieces(b, spill))
    .toString()
    .split("\n")
    .slice(0, -1)
    .map((l) => l.replace(/\.+$/, ""));
}

test("a cold buffer taken back with 8 segments merges them in the spill, so it holds a few numbers", async (t) => {
  const { spill, p, flushed } = spillingPool(t, 3 << 10);
  takeBackEightTimes(p);
  assert.equal(flushed.length, 0);
  p.add("x", 0, rec(8, "x8"));
  p.flushAll();
  const x = flushed.find((b) => b.destination === "x") as FlushBatch;
  // Eight of a size merge as one in the spill; x8 stays in memory behind them.
  assert.equal(segmentCount(x.spilled ?? []), 1, "its 8 segments merged as one");
  assert.deepEqual(await unpadded(x, spill), ["x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8"]);
  assert.deepEqual([...wholeBatch(x, spill).offsets], [0, 1, 2, 3, 4, 5, 6, 7, 8]);
  for (const b of flushed) releaseFlush(b, spill);
  assert.equal(spill.bytes, 0);
});

test("while the spill's writes are backed up, a cold buffer waits to merge and shed spills nothing", async (t) => {
  // 16-byte chunks and a 1-byte cap: each segment seals the chunk before it, so the spill is backed up from the second
  // segment until the writes land (nothing here awaits before then).
  const spill = spillFor(t, 1 << 20, 1, 16);
  const { p, flushed } = pool({ capBytes: 3 << 10, spill });
  takeBackEightTimes(p);
  assert.equal(spill.backedUp, true);
  p.add("x", 0, rec(8, "x8"));
  const held = p.stats().bytes;
  assert.ok(held > 0);
  p.shed();
  assert.equal(p.stats().bytes, held, "nothing shed into a backed-up spill");
  p.flushAll();
  const x = flushed.find((b) => b.destination === "x") as FlushBatch;
  assert.equal(segmentCount(x.spilled ?? []), 8, "its 8 segments left unmerged");
  await spill.landed();
  assert.deepEqual(await unpadded(x, spill), ["x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8"]);
  for (const b of flushed) releaseFlush(b, spill);
  assert.equal(spill.bytes, 0);
});

test("with the count full, a cold buffer takes records straight into the spill, newest segments merged; at flush_bytes it flushes whole", async (t) => {
  const spill = spillFor(t);
  const { p, flushed } = pool({ spill });
  const { buffers } = hotBufferBounds(1 << 20, 1000);
  p.add("x", 0, rec(0, "x0"));
  // As many other destinations evict "x" into the spill: cold from here on.
  for (let i = 0; i < buffers; i++) p.add(`o${i}`, 1, rec(i, "o"));
  const memory = p.stats().bytes;
  for (let i = 1; i < 40; i++) p.add("x", 0, rec(i, `x${i}`));
  assert.equal(flushed.length, 0);
  assert.equal(p.stats().bytes, memory, "nothing taken back into memory, no buffer evicted");
  // A record taking it to flush_bytes takes it back: it flushes at once, every record in order.
  p.add("x", 0, rec(40, "y".repeat(1000)));
  const x = flushed.find((b) => b.destination === "x") as FlushBatch;
  assert.equal(x.trigger, "bytes");
  const count = segmentCount(x.spilled ?? []);
  assert.ok(count >= 2 && count < 8, `40 records in ${count} segments, merged as they came`);
  const want = [...Array.from({ length: 40 }, (_, i) => `x${i}`), "y".repeat(1000)];
  assert.deepEqual(
    Buffer.concat(await flushPieces(x, spill))
      .toString()
      .split("\n")
      .slice(0, -1),
    want,
  );
  const whole = wholeBatch(x, spill);
  assert.deepEqual(
    [...whole.offsets],
    Array.from({ length: 41 }, (_, i) => i),
  );
  assert.deepEqual(x.hold.parts, [0, 0, 41]);
  for (const b of flushed) releaseFlush(b, spill);
  p.flushAll();
  for (const b of flushed.slice(1)) releaseFlush(b, spill);
  assert.equal(spill.bytes, 0);
});

test("compact moves buffers' blocks out of sparse slabs, which go; the records flush intact", () => {
  const { p, flushed } = pool({ flushBytes: 1 << 20, flushRecords: 1000 });
  const heldBefore = blocks.held;
  const per = SLAB_BYTES / MIN_BLOCK;
  // Slabs full of blocks, where each destination's block and index land among them: once the rest go, each slab is
  // pinned by a kilobyte.
  const filler: Buffer[] = [];
  for (let d = 0; d < 24; d++) {
    filler.push(...Array.from({ length: per }, () => blocks.alloc(MIN_BLOCK)));
    for (const b of filler.splice(filler.length - 2)) blocks.free(b);
    p.add(`d${d}`, 0, rec(d, `record of d${d}`));
  }
  for (const b of filler) blocks.free(b);
  const pinned = blocks.held;
  assert.ok(pinned >= heldBefore + 24 * SLAB_BYTES, "24 slabs pinned");
  const inUse = blocks.inUse;
  p.compact();
  assert.equal(blocks.inUse, inUse, "each block moved, none lost or doubled");
  assert.ok(blocks.held <= pinned - 12 * SLAB_BYTES, `held ${blocks.held} of ${pinned}`);
  p.flushAll();
  assert.deepEqual(
    flushed.map((b) => [b.destination, lines(b), [...b.offsets]]),
    Array.from({ length: 24 }, (_, d) => [`d${d}`, [`record of d${d}`], [d]]),
  );
  for (const b of flushed) releaseFlush(b);
});

test("whatever comes, the buffers' blocks stay within the bound, counted whole, and all go back", () => {
  const base = blocks.inUse;
  // A 64 KiB cap: a 32 KiB bound of blocks. Each flush gives its blocks back at once.
  const { p } = pool({ capBytes: 64 << 10, flushBytes: 8000, onFlush: (b) => releaseFlush(b) });
  let seed = 11;
  const rand = (n: number) => Math.floor(((seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32) * n);
  for (let i = 0; i < 3000; i++) {
    p.add(`d${rand(60)}`, rand(2), rec(i, "r".repeat(1 + rand(3000))));
    assert.ok(blocks.inUse - base <= 32 << 10, `${blocks.inUse - base} bytes of blocks at record ${i}`);
    if (i % 97 === 0) p.compact();
    if (i % 301 === 0) p.shed();
    if (i % 499 === 0) p.discardSlots(new Set([1]));
  }
  p.flushAll();
  assert.equal(blocks.inUse, base);
});
