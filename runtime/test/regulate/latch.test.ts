import { test } from "node:test";
import assert from "node:assert/strict";
import { createLatch, latchSources, MemorySource, type LatchOptions } from "../../src/regulate/latch.ts";

function harness(sources: Record<string, number>, over: Partial<LatchOptions> = {}) {
  const values = { ...sources };
  const events: string[] = [];
  const gauge: number[] = [];
  const latch = createLatch({
    pauseAbove: 0.8,
    resumeBelow: 0.6,
    enabled: true,
    sources: Object.fromEntries(Object.keys(values).map((k) => [k, () => values[k] ?? 0])),
    onPause: (source, ratio) => events.push(`pause ${source} ${ratio}`),
    onResume: () => events.push("resume"),
    gauge: { set: (v) => gauge.push(v) },
    ...over,
  });
  return { values, events, gauge, latch };
}

test("hysteresis: pauses at pause_above, holds between the bounds, resumes below resume_below", () => {
  const { values, events, gauge, latch } = harness({ held_records: 0.5 });
  assert.deepEqual(latch.check(), { paused: false, source: "held_records", ratio: 0.5 });
  values.held_records = 0.79;
  assert.equal(latch.check().paused, false);
  values.held_records = 0.8;
  assert.deepEqual(latch.check(), { paused: true, source: "held_records", ratio: 0.8 });
  assert.equal(latch.paused, true);
  values.held_records = 0.7;
  assert.equal(latch.check().paused, true, "0.7 is above resume_below: still paused");
  values.held_records = 0.6;
  assert.equal(latch.check().paused, true, "resume_below is strict");
  values.held_records = 0.59;
  assert.equal(latch.check().paused, false);
  values.held_records = 0.7;
  assert.equal(latch.check().paused, false, "0.7 is below pause_above: stays resumed");
  assert.deepEqual(events, ["pause held_records 0.8", "resume"], "one callback per transition");
  assert.deepEqual(gauge, [0, 1, 0]);
});

test("any source pauses; resuming waits for every source", () => {
  const { values, events, latch } = harness({ held_records: 0.1, staged_bytes: 0.1, memory: 0.1 });
  values.staged_bytes = 0.9;
  values.memory = 0.85;
  assert.deepEqual(latch.check(), { paused: true, source: "staged_bytes", ratio: 0.9 });
  values.staged_bytes = 0.2;
  assert.deepEqual(latch.check(), { paused: true, source: "memory", ratio: 0.85 }, "memory still holds it");
  values.memory = 0.65;
  assert.equal(latch.check().paused, true);
  values.memory = 0.3;
  values.held_records = 0.75;
  assert.equal(latch.check().paused, true, "held records rose into the band while memory fell");
  values.held_records = 0.5;
  assert.deepEqual(latch.check(), { paused: false, source: "held_records", ratio: 0.5 });
  assert.deepEqual(events, ["pause staged_bytes 0.9", "resume"]);
});

test("disabled: reports the ratio but never pauses", () => {
  const { events, gauge, latch } = harness({ memory: 5 }, { enabled: false });
  assert.deepEqual(latch.check(), { paused: false, source: "memory", ratio: 5 });
  assert.equal(latch.paused, false);
  assert.deepEqual(events, []);
  assert.deepEqual(gauge, [0]);
});

test("a pause that throws leaves the latch running, and the next check pauses again", () => {
  let fail = true;
  const paused: string[] = [];
  const latch = createLatch({
    pauseAbove: 0.8,
    resumeBelow: 0.6,
    enabled: true,
    sources: { staged_bytes: () => 1 },
    onPause: (s) => {
      if (fail) throw new Error("transport gone");
      paused.push(s);
    },
    onResume: () => undefined,
  });
  assert.throws(() => latch.check(), /transport gone/);
  assert.equal(latch.paused, false);
  fail = false;
  assert.equal(latch.check().paused, true);
  assert.deepEqual(paused, ["staged_bytes"]);
});

test("a NaN source reads as idle, so it cannot hold the latch paused", () => {
  const { values, latch } = harness({ staged_bytes: 0.9, other: 0 });
  assert.equal(latch.check().paused, true);
  values.staged_bytes = 0.1;
  values.other = NaN;
  assert.equal(latch.check().paused, false);
});

test("no sources: never pauses", () => {
  const { latch } = harness({});
  assert.deepEqual(latch.check(), { paused: false, ratio: 0 });
});

test("latchSources: held records at 32 bytes against a quarter of the limit; staged pressure and memory passed through", () => {
  const s = latchSources({
    memoryLimitBytes: 1024 * 1024 * 1024,
    heldRecords: () => 2 * 1024 * 1024, // 64 MiB of offsets against a 256 MiB quarter
    stagedPressure: () => 0.42,
    memory: new MemorySource({
      limitBytes: 1000,
      pressureThreshold: 0.8,
      pauseAbove: 0.8,
      resumeBelow: 0.6,
      rss: () => 500,
    }),
  });
  assert.deepEqual(Object.keys(s).sort(), ["held_records", "memory", "staged_bytes"]);
  assert.equal(s.held_records!(), 0.25);
  assert.equal(s.staged_bytes!(), 0.42);
  assert.equal(s.memory!(), 0.5);
  assert.deepEqual(Object.keys(latchSources({ memoryLimitBytes: 1000, heldRecords: () => 0 })), ["held_records"]);
});

test("MemorySource: reaches pause_above exactly at pressure_threshold x limit", () => {
  let rss = 0;
  const opts = { limitBytes: 1000, resumeBelow: 0.6, rss: () => rss };
  const mem = new MemorySource({ ...opts, pressureThreshold: 0.5, pauseAbove: 0.8 });
  rss = 500;
  assert.equal(mem.ratio(), 0.8, "rss at the threshold reads as pause_above");
  // Resuming (below 0.6) needs rss below threshold x resume_below / pause_above of the limit: 375 bytes.
  rss = 375.1;
  assert.ok(mem.ratio() > 0.6);
  rss = 374.9;
  assert.ok(mem.ratio() < 0.6);
  // With the defaults the threshold and pause_above coincide: the ratio is rss over the limit.
  const dflt = new MemorySource({ ...opts, pressureThreshold: 0.8, pauseAbove: 0.8 });
  rss = 800;
  assert.equal(dflt.ratio(), 0.8);
});

test("latchSources feed the latch: held records pause intake at 80% of the quarter", () => {
  let held = 0;
  const events: string[] = [];
  const latch = createLatch({
    pauseAbove: 0.8,
    resumeBelow: 0.6,
    enabled: true,
    sources: latchSources({ memoryLimitBytes: 4 * 32 * 1000, heldRecords: () => held }),
    onPause: (s) => events.push(s),
    onResume: () => events.push("resume"),
  });
  held = 799;
  assert.equal(latch.check().paused, false);
  held = 800;
  assert.equal(latch.check().paused, true);
  held = 599;
  assert.equal(latch.check().paused, false);
  assert.deepEqual(events, ["held_records", "resume"]);
});

const MIB = 2 ** 20;

/** The memory source at a 250 MiB limit (pause at 200 MiB, resume under 150 MiB) over an RSS the test sets. */
function memoryAt250() {
  const state = { rss: 0 };
  const memory = new MemorySource({
    limitBytes: 250 * MIB,
    pressureThreshold: 0.8,
    pauseAbove: 0.8,
    resumeBelow: 0.6,
    rss: () => state.rss,
  });
  return { state, memory };
}

test("MemorySource: a floor found above the resume point moves the band up by what it lies above", () => {
  const { state, memory } = memoryAt250();
  state.rss = 220 * MIB;
  assert.equal(memory.ratio(), 0.88);
  memory.settled();
  const lift = memory.liftBytes;
  // The floor reads just under resume_below (by an eighth of the 50 MiB band).
  assert.equal(lift, 220 * MIB - 150 * MIB + (50 * MIB) / 8);
  assert.ok(memory.ratio() < 0.6);
  // It pauses again once RSS climbs the band's width (and the margin) above the floor: 270 MiB and more.
  state.rss = 270 * MIB;
  assert.ok(memory.ratio() < 0.8);
  state.rss = 277 * MIB;
  assert.ok(memory.ratio() >= 0.8);
  // RSS falling lowers the floor with it, down to none.
  state.rss = 180 * MIB;
  assert.ok(memory.ratio() < 0.6);
  assert.equal(memory.liftBytes, 180 * MIB - 150 * MIB + (50 * MIB) / 8);
  state.rss = 100 * MIB;
  assert.equal(memory.ratio(), 0.4);
  assert.equal(memory.liftBytes, 0);
  state.rss = 200 * MIB;
  assert.equal(memory.ratio(), 0.8, "with the floor gone, the pause point is the threshold's again");
  state.rss = 100 * MIB;
  memory.settled();
  assert.equal(memory.liftBytes, 0, "a floor under the resume point moves nothing");
});

test("a latch paused on memory by a floor it cannot free resumes once the floor is found", () => {
  // The old latch held a settled memory source down to pause_above: a process whose RSS with nothing buffered
  // (220 MiB) lay above a 250 MiB limit's pause point (200 MiB) stayed paused for good.
  const { state, memory } = memoryAt250();
  const events: string[] = [];
  let settled = false;
  const latch = createLatch({
    pauseAbove: 0.8,
    resumeBelow: 0.6,
    enabled: true,
    sources: latchSources({ memoryLimitBytes: 250 * MIB, heldRecords: () => 0, memory }),
    onPause: (s) => events.push(`pause ${s}`),
    onResume: () => events.push("resume"),
    whilePaused: () => {
      if (settled) memory.settled();
    },
  });
  state.rss = 230 * MIB;
  assert.equal(latch.check().paused, true);
  state.rss = 220 * MIB;
  assert.equal(latch.check().paused, true, "flushes still in flight: waits");
  assert.equal(latch.check().paused, true);
  settled = true;
  assert.equal(latch.check().paused, false, "nothing left to free: resumes");
  settled = false;
  state.rss = 240 * MIB;
  assert.equal(latch.check().paused, false, "within the band above the floor");
  state.rss = 280 * MIB;
  assert.equal(latch.check().paused, true, "a band's width above the floor");
  assert.deepEqual(events, ["pause memory", "resume", "pause memory"]);
});
