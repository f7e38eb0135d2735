import { test } from "node:test";
import assert from "node:assert/strict";
import { OffsetTracker } from "../../src/delivery/tracker.ts";

const offsetsOf = (t: OffsetTracker) =>
  Object.fromEntries(t.commitable().map((o) => [`${o.topic}/${o.partition}`, o.offset]));

test("a partition commits only below the lowest offset an unreleased hold carries", () => {
  const t = new OffsetTracker({ holdsCommit: true });
  const p = t.slot("events", 0);
  const a = t.open();
  const b = t.open();
  // Interleaved destinations: even offsets to a, odd to b.
  for (let o = 0; o < 10; o++) (o % 2 === 0 ? a : b).add(p, o);
  t.received(p, 9);
  assert.deepEqual(offsetsOf(t), { "events/0": "0" });
  t.release(b, "done");
  assert.deepEqual(offsetsOf(t), { "events/0": "0" }, "offset 0 is still held by a");
  t.release(a, "done");
  assert.deepEqual(offsetsOf(t), { "events/0": "10" });
  t.committed(t.commitable());
  assert.deepEqual(t.commitable(), [], "nothing new to commit once committed");
});

test("rejected and dropped release like done; errored withholds for good", () => {
  const t = new OffsetTracker({ holdsCommit: true });
  const p = t.slot("x", 3);
  const [h1, h2, h3] = [t.open(), t.open(), t.open()];
  h1.add(p, 0);
  h2.add(p, 1);
  h3.add(p, 2);
  t.received(p, 2);
  t.release(h1, "rejected");
  t.release(h2, "dropped");
  assert.deepEqual(offsetsOf(t), { "x/3": "2" });
  t.release(h3, "errored");
  assert.equal(t.withheld, true);
  assert.deepEqual(offsetsOf(t), { "x/3": "2" }, "an errored hold keeps the floor at its lowest offset");
  assert.equal(t.release(h3, "done"), 0, "a hold is released once");
  assert.deepEqual(offsetsOf(t), { "x/3": "2" });
});

test("with acknowledgements off the floor is what was received", () => {
  const t = new OffsetTracker({ holdsCommit: false });
  const p = t.slot("x", 0);
  t.open().add(p, 0);
  t.received(p, 41);
  assert.deepEqual(offsetsOf(t), { "x/0": "42" });
});

test("a revoked partition is never committed, and counts again from its next assignment", () => {
  const t = new OffsetTracker({ holdsCommit: true });
  const p = t.slot("x", 0);
  const q = t.slot("x", 1);
  const h = t.open();
  h.add(p, 5);
  t.received(p, 5);
  t.received(q, 7);
  assert.deepEqual(t.revoked([{ topic: "x", partition: 0 }]), [p]);
  assert.deepEqual(offsetsOf(t), { "x/1": "8" });
  t.assigned([{ topic: "x", partition: 0 }]);
  assert.deepEqual(offsetsOf(t), { "x/1": "8" }, "nothing read since the new assignment");
  t.received(p, 9);
  assert.deepEqual(offsetsOf(t), { "x/0": "5", "x/1": "8" }, "the old hold still pins the floor");
  t.release(h, "done");
  assert.deepEqual(offsetsOf(t), { "x/0": "10", "x/1": "8" });
});

test("a partition is handed over once every record received of it is released and committed", () => {
  const t = new OffsetTracker({ holdsCommit: true });
  const p = t.slot("x", 0);
  const q = t.slot("x", 1);
  const both = new Set([p, q]);
  assert.equal(t.handedOver(both), true, "nothing received: nothing to hand over");
  const h = t.open();
  h.add(p, 0);
  h.add(p, 1);
  t.received(p, 1);
  t.received(q, 4);
  assert.equal(t.handedOver(new Set([p])), false, "held by an open hold");
  t.committed(t.commitable());
  assert.equal(t.handedOver(new Set([q])), true, "q's floor is committed");
  assert.equal(t.handedOver(new Set([p])), false, "p's floor is below what it received");
  t.release(h, "done");
  assert.equal(t.handedOver(new Set([p])), false, "released, not yet committed");
  t.committed(t.commitable());
  assert.equal(t.handedOver(both), true);
  const e = t.open();
  e.add(p, 2);
  t.received(p, 2);
  t.release(e, "errored");
  t.committed(t.commitable());
  assert.equal(t.handedOver(new Set([p])), false, "an errored hold is never handed over");
});

test("held offsets cost far less than the seed's 32 bytes a record", () => {
  const t = new OffsetTracker({ holdsCommit: true });
  const slots = Array.from({ length: 6 }, (_, i) => t.slot("bench", i));
  const holds = Array.from({ length: 200 }, () => t.open());
  let n = 0;
  for (let o = 0; o < 50_000; o++) {
    for (const s of slots) {
      holds[(o * 7 + s) % holds.length]?.add(s, o);
      n++;
    }
  }
  assert.equal(t.heldRecords(), n);
  const perRecord = t.heldBytes() / n;
  assert.ok(perRecord < 2, `held bytes per record ${perRecord.toFixed(3)} should be under 2`);
});

test("holds merged into their file's hold keep the floor and release together", () => {
  const t = new OffsetTracker({ holdsCommit: true });
  const p = t.slot("x", 0);
  const q = t.slot("x", 1);
  const [file, flush1, flush2] = [t.open(), t.open(), t.open()];
  file.add(p, 4);
  flush1.add(p, 2);
  flush1.add(q, 9);
  flush2.add(q, 7);
  t.received(p, 10);
  t.received(q, 10);
  assert.equal(t.merge(file, flush1), true);
  assert.equal(t.merge(file, flush2), true);
  assert.equal(t.merge(file, flush2), false, "a hold merges once");
  assert.equal(t.heldRecords(), 4);
  assert.deepEqual(offsetsOf(t), { "x/0": "2", "x/1": "7" });
  t.release(file, "done");
  assert.deepEqual(offsetsOf(t), { "x/0": "11", "x/1": "11" });
});

test("held records follow adds, merges, dropped slots and releases, an Errored hold included", () => {
  const t = new OffsetTracker({ holdsCommit: true });
  const p = t.slot("x", 0);
  const q = t.slot("x", 1);
  const [file, flush, lost] = [t.open(), t.open(), t.open()];
  file.addRun(p, 0, 5);
  flush.addRun(q, 3, 4);
  lost.add(p, 9);
  assert.equal(t.heldRecords(), 10);
  assert.equal(t.merge(file, flush), true);
  assert.equal(t.heldRecords(), 10, "a merge moves records, it adds none");
  flush.add(q, 20);
  assert.equal(t.heldRecords(), 10, "a hold merged away counts no more");
  assert.equal(file.dropSlot(q), 4);
  assert.equal(t.heldRecords(), 6);
  assert.equal(t.release(lost, "errored"), 1);
  assert.equal(t.heldRecords(), 5);
  lost.add(p, 10);
  assert.equal(t.heldRecords(), 5, "a released hold counts no more");
  t.release(file, "done");
  assert.equal(t.heldRecords(), 0);
  assert.equal(file.records, 5, "dropSlot left the rest of the hold");
});
