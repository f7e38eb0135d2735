// Regulation alone (pipeline/regulation.ts): the latch over the held records the test sets, pausing and resuming a
// transport that records what it was told, and the one transport health component it shows on.
import assert from "node:assert/strict";
import { test } from "node:test";
import { pino } from "pino";
import { parseConfigText } from "../../src/config/load.ts";
import type { PartitionRef } from "../../src/delivery/tracker.ts";
import { Health } from "../../src/observe/health.ts";
import { createMetrics } from "../../src/observe/metrics.ts";
import { Regulation, type RegulationDeps } from "../../src/pipeline/regulation.ts";
import { SinkTally } from "../../src/regulate/circuit.ts";

/** Far above this process's RSS, so only the held records the test sets move the latch. */
const MEMORY = 64 * 2 ** 30;

function harness(over: Partial<RegulationDeps> = {}) {
  const { config } = parseConfigText(
    ["kafka: { brokers: ['127.0.0.1:9'], topics: [t] }", "archive: { destination: 'file:///tmp/unused' }"].join("\n"),
    { env: {}, sourceName: "test.yaml" },
  );
  const calls: string[] = [];
  const names = (ps: readonly PartitionRef[]) => ps.map((p) => `${p.topic}/${p.partition}`).join(",");
  const state = { held: 0, shed: 0 };
  const health = new Health();
  const localWrites = new SinkTally();
  const metrics = createMetrics({ defaultMetrics: false });
  const regulation = new Regulation({
    config,
    memory: { bytes: MEMORY, source: "env" },
    hotBufferCapBytes: MEMORY / 4,
    transport: {
      pause: (ps) => void calls.push(`pause ${names(ps)}`),
      resume: (ps) => void calls.push(`resume ${names(ps)}`),
    },
    metrics,
    log: pino({ level: "silent" }),
    health,
    staging: undefined,
    localWrites,
    heldRecords: () => state.held,
    shed: () => void state.shed++,
    settled: () => true,
    ...over,
  });
  /** Held records past (or back under) the held_records source's pause point. */
  const heldHigh = () => (state.held = MEMORY);
  const heldLow = () => (state.held = 0);
  const transportHealth = () => health.snapshot().components.transport;
  return { regulation, calls, state, heldHigh, heldLow, transportHealth, localWrites, metrics };
}

test("held records past the pause point pause every assigned partition, and those assigned while paused", () => {
  const h = harness();
  h.regulation.assigned([
    { topic: "t", partition: 0 },
    { topic: "t", partition: 1 },
  ]);
  h.regulation.check();
  assert.deepEqual(h.calls, []);
  h.heldHigh();
  h.regulation.check();
  assert.deepEqual(h.calls, ["pause t/0,t/1"]);
  assert.equal(h.transportHealth()?.state, "degraded");
  assert.match(h.transportHealth()?.reason ?? "", /self-regulation \(held_records\)/);
  h.regulation.assigned([{ topic: "t", partition: 2 }]);
  h.regulation.revoked([{ topic: "t", partition: 0 }]);
  h.heldLow();
  h.regulation.check();
  assert.deepEqual(h.calls, ["pause t/0,t/1", "pause t/2", "resume t/1,t/2"]);
  assert.equal(h.transportHealth()?.state, "ok");
  // Paused on held records, not memory: nothing is shed for it.
  assert.equal(h.state.shed, 0);
});

test("the client's own view of its connection shows unless a pause by the latch does", () => {
  const h = harness();
  h.regulation.connection("degraded", "broker unreachable");
  assert.deepEqual(h.transportHealth(), { state: "degraded", reason: "broker unreachable" });
  h.heldHigh();
  h.regulation.check();
  assert.match(h.transportHealth()?.reason ?? "", /self-regulation/);
  h.heldLow();
  h.regulation.check();
  assert.deepEqual(h.transportHealth(), { state: "degraded", reason: "broker unreachable" });
  h.regulation.connection("ok");
  assert.equal(h.transportHealth()?.state, "ok");
});

test("every local write failing opens the sink circuit, which holds the scaling pressure at 0", async () => {
  const h = harness();
  const reading = { lagRecords: 1e9, receivedRecords: 0, bufferBytes: 0 };
  h.regulation.cycle(reading);
  h.regulation.cycle(reading);
  assert.ok(h.regulation.pressure() > 0, "a lag of a billion records read no pressure");
  for (let i = 0; i < 50; i++) h.localWrites.fail();
  h.regulation.cycle(reading);
  assert.equal((await h.metrics.sinkCircuitOpen.get()).values[0]?.value, 1);
  assert.equal(h.regulation.pressure(), 0);
  h.localWrites.ok();
  h.regulation.cycle(reading);
  assert.equal((await h.metrics.sinkCircuitOpen.get()).values[0]?.value, 0);
  assert.ok(h.regulation.pressure() > 0);
});

test("paused on memory at a limit under the process's floor: resumes once nothing is left to free", () => {
  // At a 250 MiB limit the memory source pauses at 200 MiB and resumed only under 150 MiB, while the process holds
  // 206-229 MiB with nothing buffered: intake sat paused for 80 s of a 90 s run.
  const MIB = 2 ** 20;
  const state = { rss: 230 * MIB, settled: false, collections: 0 };
  const h = harness({
    memory: { bytes: 250 * MIB, source: "env" },
    hotBufferCapBytes: (250 * MIB) / 4,
    rss: () => state.rss,
    settled: () => state.settled,
    reclaim: () => {
      state.collections++;
      return true;
    },
  });
  h.regulation.assigned([{ topic: "t", partition: 0 }]);
  h.regulation.check();
  assert.deepEqual(h.calls, ["pause t/0"]);
  h.regulation.check();
  assert.equal(h.state.shed, 1, "at the pause point: what the hot buffers hold is flushed");
  state.rss = 220 * MIB;
  h.regulation.check();
  assert.deepEqual(h.calls, ["pause t/0"], "flushes in flight: still paused");
  state.settled = true;
  h.regulation.check();
  assert.deepEqual(h.calls, ["pause t/0", "resume t/0"], "nothing left to free: resumed at 220 MiB");
  assert.ok(state.collections >= 3);
  state.rss = 260 * MIB;
  h.regulation.check();
  assert.deepEqual(h.calls, ["pause t/0", "resume t/0"], "within the band above the floor");
  state.rss = 290 * MIB;
  h.regulation.check();
  assert.deepEqual(h.calls, ["pause t/0", "resume t/0", "pause t/0"]);
});
