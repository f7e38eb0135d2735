import { test } from "node:test";
import assert from "node:assert/strict";
import type { Hold } from "../../src/delivery/hold.ts";
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

test("a slot dropped from the hold with its lowest offset lifts the floor to the next hold's", () => {
  const t = new OffsetTracker({ holdsCommit: true });
  const p = t.slot("x", 0);
  const [a, b] = [t.open(), t.open()];
  a.add(p, 0);
  b.add(p, 5);
  t.received(p, 9);
  assert.deepEqual(offsetsOf(t), { "x/0": "0" });
  a.dropSlot(p);
  assert.deepEqual(offsetsOf(t), { "x/0": "5" });
  a.add(p, 7);
  assert.deepEqual(offsetsOf(t), { "x/0": "5" }, "a holds the slot again, above b");
  b.add(p, 3);
  assert.deepEqual(offsetsOf(t), { "x/0": "3" }, "b's lowest offset lowered");
});

test("floors and held bytes match every hold visited, through adds, merges, drops, releases and revokes", () => {
  const t = new OffsetTracker({ holdsCommit: true });
  const slots = Array.from({ length: 4 }, (_, i) => t.slot("x", i));
  const open: Hold[] = [];
  const errored: Hold[] = [];
  const next = slots.map(() => 0);
  // A fixed linear congruential sequence: the same run each time.
  let seed = 12345;
  const rand = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % n;
  };
  const brute = () => {
    const floors = next.map((n) => n);
    for (const h of [...open, ...errored]) {
      for (let i = 0; i < h.parts.length; i += 3) {
        const s = h.parts[i] ?? 0;
        if ((h.parts[i + 2] ?? 0) > 0) floors[s] = Math.min(floors[s] ?? 0, h.parts[i + 1] ?? 0);
      }
    }
    return floors;
  };
  for (let step = 0; step < 40_000; step++) {
    const op = rand(100);
    if (op < 60 || open.length === 0) {
      // Mostly in order, sometimes an offset read again below the last (a re-read after a rebalance).
      const s = rand(slots.length);
      const at = rand(10) === 0 ? Math.max(0, (next[s] ?? 0) - rand(50)) : (next[s] ?? 0);
      next[s] = Math.max(next[s] ?? 0, at + 1);
      t.received(slots[s] ?? 0, at);
      const h = open.length === 0 || rand(8) === 0 ? t.open() : open[rand(open.length)];
      if (h !== undefined && !open.includes(h)) open.push(h);
      h?.add(slots[s] ?? 0, at);
    } else if (op < 85) {
      const h = open.splice(rand(open.length), 1)[0] as Hold;
      if (rand(20) === 0) {
        t.release(h, "errored");
        errored.push(h);
      } else t.release(h, "done");
    } else if (op < 95 && open.length > 1) {
      const into = open[rand(open.length)] as Hold;
      const i = rand(open.length);
      const from = open[i] as Hold;
      if (into !== from && t.merge(into, from)) open.splice(i, 1);
    } else (open[rand(open.length)] as Hold).dropSlot(slots[rand(slots.length)] ?? 0);
    if (step % 97 === 0) {
      const floors = brute();
      const want = Object.fromEntries(slots.map((s, i) => [`x/${s}`, String(floors[i])]));
      const got = Object.fromEntries(t.commitable().map((o) => [`${o.topic}/${o.partition}`, o.offset]));
      for (const [k, v] of Object.entries(got)) assert.equal(v, want[k], `step ${step}: floor of ${k}`);
      assert.equal(
        t.heldBytes(),
        open.reduce((n, h) => n + h.bytes, 0),
        `step ${step}: held bytes`,
      );
    }
  }
});
