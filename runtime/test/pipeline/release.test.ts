// Release alone (pipeline/release.ts): every held record's outcome, over a real offset tracker and a DLQ whose
// sends the test resolves or fails.
import assert from "node:assert/strict";
import { test } from "node:test";
import { pino } from "pino";
import type { CompletedFile } from "../../src/archive/writers.ts";
import type { FlushBatch } from "../../src/buffer/hot.ts";
import { createCodec } from "../../src/codec/index.ts";
import type { Hold } from "../../src/delivery/hold.ts";
import { OffsetTracker } from "../../src/delivery/tracker.ts";
import type { DeadLetter } from "../../src/dlq/kafka.ts";
import { createMetrics } from "../../src/observe/metrics.ts";
import { Release } from "../../src/pipeline/release.ts";
import type { RoutedGroup } from "../route/groups.ts";
import { TOO_DEEP } from "../../src/route/router.ts";

const metricValue = async (c: { get(): Promise<{ values: { value: number; labels: object }[] }> }, label?: string) =>
  (await c.get()).values
    .filter((v) => label === undefined || Object.values(v.labels).includes(label))
    .reduce((n, v) => n + v.value, 0);

/** `dlq`: a DLQ taking payloads up to 8 bytes, each send waiting for the test; undefined for the DLQ off. */
function harness(opts: { offsetsHeld: boolean; dlq: boolean }) {
  const tracker = new OffsetTracker({ holdsCommit: true });
  const slot = tracker.slot("t", 3);
  const metrics = createMetrics({ defaultMetrics: false });
  const sends: { letters: readonly DeadLetter[]; ok: () => void; fail: (err: Error) => void }[] = [];
  const tracked: Promise<void>[] = [];
  const state = { commits: 0, withheld: [] as string[] };
  const release = new Release({
    offsetsHeld: opts.offsetsHeld,
    defaultSegment: "default",
    tracker,
    dlq: opts.dlq
      ? {
          ceiling: 8,
          fits: (bytes) => bytes <= 8,
          send: (letters) => new Promise<void>((ok, fail) => void sends.push({ letters, ok, fail })),
        }
      : undefined,
    staging: undefined,
    spill: undefined,
    codec: createCodec("zstd"),
    metrics,
    log: pino({ level: "silent" }),
    scheduleCommit: () => void state.commits++,
    track: (work) => void tracked.push(work),
    withhold: (reason) => void state.withheld.push(reason),
  });
  /** A hold of records at offsets 10, 11, ... of partition 3, one per value. */
  const hold = (values: readonly string[]): Hold => {
    const h = tracker.open();
    values.forEach((_, i) => h.add(slot, 10 + i));
    return h;
  };
  /** Partition 3's commit floor: received up to offset 19, so 20 once nothing holds below. */
  const floor = () => {
    tracker.received(slot, 19);
    return tracker.commitable()[0]?.offset;
  };
  return { release, tracker, slot, metrics, sends, tracked, state, hold, floor };
}

function flushBatch(hold: Hold, slot: number, values: readonly string[]): FlushBatch {
  const pieces = values.map((v) => Buffer.from(`${v}\n`));
  const ends = new Uint32Array(values.length);
  let at = 0;
  pieces.forEach((p, i) => (ends[i] = at += p.length));
  return {
    destination: "t/org",
    pieces,
    bytes: at,
    records: values.length,
    hold,
    trigger: "bytes",
    blocks: [],
    ends,
    offsets: Float64Array.from(values, (_, i) => 10 + i),
    runs: [slot, values.length, at],
    spilled: undefined,
    spilledBytes: 0,
    openedAt: 0,
  };
}

function file(tickets: Hold[], outcome: "done" | "errored", error?: Error): CompletedFile<Hold> {
  const records = tickets.reduce((n, h) => n + h.records, 0);
  return {
    relPath: "t/org/f.zst",
    destination: "t/org",
    tickets,
    records,
    rawBytes: 0,
    bytes: 0,
    openedAt: 0,
    closedAt: 0,
    outcome,
    ...(error === undefined ? {} : { error }),
  };
}

test("a complete file releases its records Done: counted archived, the floor past them, a commit asked", async () => {
  const h = harness({ offsetsHeld: true, dlq: false });
  h.release.completed(file([h.hold(["a", "b"]), h.hold(["c"])], "done"));
  assert.equal(h.floor(), "20");
  assert.equal(await metricValue(h.metrics.messagesArchived), 3);
  assert.equal(h.state.commits, 1);
  assert.deepEqual(h.state.withheld, []);
});

test("a file that could not complete, offsets held: Errored, the floor stays, the pipeline withholds", async () => {
  const h = harness({ offsetsHeld: true, dlq: false });
  h.release.completed(file([h.hold(["a"])], "errored", new Error("fsync failed")));
  assert.equal(h.floor(), "10");
  assert.ok(h.tracker.withheld);
  assert.deepEqual(h.state.withheld, ["archive file could not complete"]);
});

test("a failed write with acknowledgements off: dropped as unreplayable, the floor moves, no withhold", async () => {
  const h = harness({ offsetsHeld: false, dlq: false });
  const hold = h.hold(["a", "b"]);
  h.release.writeFailed(flushBatch(hold, h.slot, ["a", "b"]), new Error("EIO"));
  assert.equal(h.floor(), "20");
  assert.equal(await metricValue(h.metrics.messagesDropped, "unreplayable"), 2);
  assert.equal(await metricValue(h.metrics.archiveErrors), 1);
  assert.deepEqual(h.state.withheld, []);
  assert.equal(h.state.commits, 1);
});

test("a refused batch is dead-lettered a record an entry; too large ones dropped; Rejected once the DLQ confirms", async () => {
  const h = harness({ offsetsHeld: true, dlq: true });
  const values = ["a", "much-too-large", "c"];
  h.release.refused(flushBatch(h.hold(values), h.slot, values), new Error("codec refused"));
  assert.equal(h.sends.length, 1);
  const sent = h.sends[0]!;
  assert.deepEqual(
    sent.letters.map((l) => [l.payload.toString(), l.topic, l.partition, l.offset, l.reason]),
    [
      ["a", "t", 3, "10", "codec refused"],
      ["c", "t", 3, "12", "codec refused"],
    ],
  );
  assert.equal(await metricValue(h.metrics.messagesDropped, "dlq_too_large"), 1);
  assert.equal(h.floor(), "10", "released before the DLQ confirmed");
  sent.ok();
  await Promise.all(h.tracked);
  assert.equal(h.floor(), "20");
  assert.equal(await metricValue(h.metrics.messagesDlq), 2);
  assert.deepEqual(h.state.withheld, []);
});

test("a DLQ write that fails is Errored: the floor stays and the pipeline withholds", async () => {
  const h = harness({ offsetsHeld: true, dlq: true });
  h.release.refused(flushBatch(h.hold(["a"]), h.slot, ["a"]), new Error("refused"));
  h.sends[0]!.fail(new Error("DLQ broker away"));
  await Promise.all(h.tracked);
  assert.equal(h.floor(), "10");
  assert.deepEqual(h.state.withheld, ["DLQ write failed"]);
});

test("records nested too deep: dead-lettered under their topic with their offsets, or dropped with the DLQ off", async () => {
  const data = Buffer.from("[[[\n{{{\n");
  const ends = Uint32Array.of(4, 8);
  const group: RoutedGroup = {
    key: TOO_DEEP,
    count: 2,
    data,
    dataAt: 0,
    ends,
    endsAt: 0,
    offsets: Float64Array.of(10, 11),
    offsetsAt: 0,
  };
  const on = harness({ offsetsHeld: true, dlq: true });
  on.release.tooDeep({ topic: "t", partition: 3, records: [] }, on.slot, group);
  assert.deepEqual(
    on.sends[0]?.letters.map((l) => [l.payload.toString(), l.destination, l.offset]),
    [
      ["[[[", "t", "10"],
      ["{{{", "t", "11"],
    ],
  );
  on.sends[0]?.ok();
  await Promise.all(on.tracked);
  assert.equal(on.floor(), "20");

  const off = harness({ offsetsHeld: true, dlq: false });
  off.release.tooDeep({ topic: "t", partition: 3, records: [] }, off.slot, group);
  assert.equal(await metricValue(off.metrics.messagesDropped, "too_deep"), 2);
  assert.equal(off.floor(), "20");
});
