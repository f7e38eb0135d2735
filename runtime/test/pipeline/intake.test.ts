// Intake and turns alone (pipeline/intake.ts): real routing (batches small enough to route on the event loop) into
// hot buffers that record what they were given, behind flushes whose bound the test sets.
import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { pino } from "pino";
import { viewsOf, type BufferedRecords } from "../../src/buffer/hot.ts";
import { OffsetTracker } from "../../src/delivery/tracker.ts";
import { createMetrics } from "../../src/observe/metrics.ts";
import { Intake } from "../../src/pipeline/intake.ts";
import type { InboundBatch } from "../../src/records.ts";
import { KAFKA_BATCHES } from "../../src/transport/record-batch.ts";

/** `orgs[i]` is record i's org; its offset is `first + i`. */
function batch(partition: number, first: number, orgs: readonly string[], highWatermark?: number): InboundBatch {
  return {
    topic: "t",
    partition,
    records: orgs.map((org, i) => ({ offset: String(first + i), value: Buffer.from(JSON.stringify({ org, i })) })),
    ...(highWatermark === undefined ? {} : { highWatermark: String(highWatermark) }),
  };
}

function harness() {
  const tracker = new OffsetTracker({ holdsCommit: true });
  const metrics = createMetrics({ defaultMetrics: false });
  /** Each add to the hot buffers: its destination, partition slot and records. */
  const added: { key: string; slot: number; offsets: number[] }[] = [];
  const state = { saturated: false, refusing: false, commits: 0, latchChecks: 0, withheld: [] as string[] };
  const waiters: (() => void)[] = [];
  const intake = new Intake({
    routeSpec: { mode: "expression", fields: ["org"], defaultSegment: "none", chunk: 100 },
    format: KAFKA_BATCHES,
    batchSize: 100,
    offsetsHeld: true,
    tracker,
    buffers: {
      add: (key: string, slot: number, g: BufferedRecords) =>
        void added.push({ key, slot, offsets: Array.from(viewsOf(g).offsets) }),
      settle: () => {},
    },
    metrics,
    log: pino({ level: "silent" }),
    flushes: {
      saturated: () => state.saturated,
      room: () => new Promise<void>((r) => waiters.push(r)),
    },
    refusing: () => state.refusing,
    tooDeep: () => assert.fail("no record here nests too deep"),
    checkLatch: () => void state.latchChecks++,
    scheduleCommit: () => void state.commits++,
    withhold: (reason) => void state.withheld.push(reason),
  });
  /** Flushes back under their bound: every intake waiting for room is woken. */
  const roomy = () => {
    state.saturated = false;
    for (const w of waiters.splice(0)) w();
  };
  return { intake, tracker, metrics, added, state, waiters, roomy };
}

test("a batch is buffered by destination, received up to its last offset, its lag the watermark's", async () => {
  const h = harness();
  await h.intake.onBatch(batch(0, 10, ["a", "b", "a"], 20));
  await h.intake.idle();
  const byKey = new Map(h.added.map((a) => [a.key, a.offsets]));
  assert.deepEqual([...byKey.values()].sort(), [[10, 12], [11]], `buffered: ${JSON.stringify(h.added)}`);
  assert.equal(h.intake.received, 3);
  assert.equal(h.intake.lag(), 20 - 12 - 1);
  assert.deepEqual(h.tracker.commitable(), [{ topic: "t", partition: 0, offset: "13" }]);
  // Offsets are held until durable: receiving asks for no commit; the latch reads what is held after the turn.
  assert.equal(h.state.commits, 0);
  assert.ok(h.state.latchChecks >= 1);
  h.intake.forget([h.tracker.slot("t", 0)]);
  assert.equal(h.intake.lag(), 0);
});

test("a turn buffers destination by destination, as they first came, each one's groups as they arrived", async () => {
  const h = harness();
  await Promise.all([h.intake.onBatch(batch(0, 0, ["a", "b", "a"])), h.intake.onBatch(batch(1, 5, ["c", "b", "a"]))]);
  await h.intake.idle();
  const [p0, p1] = [h.tracker.slot("t", 0), h.tracker.slot("t", 1)];
  assert.deepEqual(
    h.added.map((a) => `${a.key} ${a.slot} ${a.offsets.join(",")}`),
    [`t/a ${p0} 0,2`, `t/a ${p1} 7`, `t/b ${p0} 1`, `t/b ${p1} 6`, `t/c ${p1} 5`],
  );
});

test("past 16,384 destinations numbered the numbering starts again: every record still reaches its own", async () => {
  const h = harness();
  // 20,000 destinations once each, then 2,000 records of some of them again, a batch of 100 at a time.
  const orgOf = (offset: number): string => `o${offset < 20_000 ? offset : (offset * 7) % 20_000}`;
  for (let first = 0; first < 22_000; first += 100) {
    const orgs = Array.from({ length: 100 }, (_, i) => orgOf(first + i));
    await h.intake.onBatch(batch(0, first, orgs));
  }
  await h.intake.idle();
  const seen = new Set<number>();
  for (const a of h.added) {
    for (const o of a.offsets) {
      assert.equal(a.key, `t/${orgOf(o)}`, `offset ${o} reached ${a.key}`);
      seen.add(o);
    }
  }
  assert.equal(seen.size, 22_000);
  assert.equal(h.intake.received, 22_000);
});

test("past the flushes' bound a batch is buffered, and onBatch holds the transport until there is room", async () => {
  const h = harness();
  h.state.saturated = true;
  let resolved = false;
  const first = h.intake.onBatch(batch(0, 0, ["a"])).then(() => (resolved = true));
  await sleep(5);
  assert.equal(resolved, false, "onBatch resolved while the flushes were past their bound");
  assert.equal(h.added.length, 1, "the batch in hand was not buffered");
  h.roomy();
  await first;
  await h.intake.idle();
  assert.equal(h.intake.received, 1);
});

test("once refusing, batches waiting for their turn are let go, and one waiting for room goes on", async () => {
  const h = harness();
  h.state.saturated = true;
  const waiting = h.intake.onBatch(batch(0, 0, ["a"]));
  await sleep(5);
  // Two batches routing at once share a turn, which starts on a later turn of the event loop: the drain begins first.
  const late = [h.intake.onBatch(batch(1, 0, ["a"])), h.intake.onBatch(batch(2, 0, ["b"]))];
  h.state.refusing = true;
  for (const w of h.waiters.splice(0)) w();
  await Promise.all([waiting, ...late]);
  await h.intake.idle();
  assert.deepEqual(
    h.added.map((a) => [a.slot, a.offsets]),
    [[h.tracker.slot("t", 0), [0]]],
  );
  assert.equal(h.intake.received, 1);
});

test("batches of a partition revoked while they wait for their turn are let go, nothing of them received", async () => {
  const h = harness();
  // Two batches routing at once share a turn, which starts on a later turn of the event loop: the revocation
  // lands before it.
  const a = h.intake.onBatch(batch(0, 0, ["a", "b"]));
  const b = h.intake.onBatch(batch(1, 0, ["a"]));
  h.tracker.revoked([{ topic: "t", partition: 0 }]);
  await Promise.all([a, b]);
  await h.intake.idle();
  assert.deepEqual(
    h.added.map((x) => [x.slot, x.offsets]),
    [[h.tracker.slot("t", 1), [0]]],
  );
  assert.equal(h.intake.received, 1);
  assert.deepEqual(h.state.withheld, []);
});

test("routing fallbacks are counted once, at the report", async () => {
  const h = harness();
  await h.intake.onBatch(batch(0, 0, ["a"]));
  // No org: routed under the default segment, a fallback of the field.
  await h.intake.onBatch({ topic: "t", partition: 0, records: [{ offset: "1", value: Buffer.from("{}") }] });
  await h.intake.idle();
  h.intake.reportRouting();
  h.intake.reportRouting();
  const fallbacks = (await h.metrics.routingFallback.get()).values.reduce((n, v) => n + v.value, 0);
  assert.equal(fallbacks, 1);
});
