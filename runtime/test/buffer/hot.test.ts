import { test } from "node:test";
import assert from "node:assert/strict";
import { HotBufferPool, HOT_BUFFER_COUNT, type FlushBatch } from "../../src/buffer/hot.ts";
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

const rec = (s: string) => Buffer.from(s);
const lines = (b: FlushBatch) => b.data.toString().split("\n").slice(0, -1);

test("a buffer flushes at flush_bytes plus one record, with a newline after each payload", () => {
  const { p, flushed } = pool({ flushBytes: 11 });
  p.add("d", 0, 0, rec("aaaa"));
  p.add("d", 0, 1, rec("bbbb"));
  assert.equal(flushed.length, 0);
  p.add("d", 0, 2, rec("cccc"));
  assert.equal(flushed.length, 1);
  assert.deepEqual(lines(flushed[0]!), ["aaaa", "bbbb", "cccc"]);
  assert.equal(flushed[0]?.trigger, "bytes");
  assert.deepEqual([...flushed[0]!.ends], [5, 10, 15]);
  assert.equal(flushed[0]?.hold.records, 3);
});

test("a buffer flushes at flush_records and at flush_age", () => {
  const { p, flushed, advance } = pool({ flushRecords: 3 });
  for (let i = 0; i < 3; i++) p.add("d", 0, i, rec("x"));
  assert.equal(flushed[0]?.trigger, "records");
  p.add("e", 0, 3, rec("y"));
  advance(59_999);
  p.tick();
  assert.equal(flushed.length, 1);
  advance(1);
  p.tick();
  assert.equal(flushed[1]?.trigger, "age");
  assert.equal(flushed[1]?.destination, "e");
});

test("at most 64 destinations buffer at once: the least recently used flushes first", () => {
  const { p, flushed } = pool();
  for (let d = 0; d < HOT_BUFFER_COUNT; d++) p.add(`d${d}`, 0, d, rec("x"));
  p.add("d0", 0, 100, rec("again")); // d0 is now the most recent; d1 the least
  p.add("new", 0, 101, rec("z"));
  assert.equal(flushed.length, 1);
  assert.equal(flushed[0]?.destination, "d1");
  assert.equal(flushed[0]?.trigger, "evict");
  assert.equal(p.stats().buffers, HOT_BUFFER_COUNT);
});

test("past the shared cap the largest buffers flush first", () => {
  const { p, flushed } = pool({ capBytes: 100 });
  p.add("small", 0, 0, rec("x".repeat(10)));
  p.add("big", 0, 1, rec("y".repeat(60)));
  p.add("mid", 0, 2, rec("z".repeat(40)));
  assert.deepEqual(
    flushed.map((b) => [b.destination, b.trigger]),
    [["big", "cap"]],
  );
  assert.ok(p.stats().bytes <= 100);
});

test("a revoked partition's buffered records are discarded before any write", () => {
  const { p, flushed, emptied, tracker } = pool();
  const a = tracker.slot("t", 0);
  const b = tracker.slot("t", 1);
  p.add("d", a, 0, rec("a0"));
  p.add("d", b, 0, rec("b0"));
  p.add("d", a, 1, rec("a1"));
  p.add("only-b", b, 1, rec("b1"));
  assert.equal(p.discardSlots(new Set([b])), 2);
  assert.equal(emptied.length, 1, "the buffer left empty hands its hold back");
  p.flushAll();
  assert.equal(flushed.length, 1);
  assert.deepEqual(lines(flushed[0]!), ["a0", "a1"]);
  assert.deepEqual([...flushed[0]!.ends], [3, 6]);
  assert.equal(flushed[0]?.hold.records, 2);
  assert.deepEqual(flushed[0]?.hold.slots, [a]);
});

test("nothing is allocated before a destination's first record, and flushing hands the memory over", () => {
  const { p, flushed } = pool();
  assert.deepEqual(p.stats(), { buffers: 0, bytes: 0, records: 0 });
  p.add("d", 0, 0, rec("payload"));
  p.flushAll();
  assert.deepEqual(p.stats(), { buffers: 0, bytes: 0, records: 0 });
  assert.equal(flushed[0]?.data.length, 8);
});
