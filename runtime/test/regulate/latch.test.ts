import { test } from "node:test";
import assert from "node:assert/strict";
import { createLatch, latchSources, type LatchOptions } from "../../src/regulate/latch.ts";

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

test("latchSources: held records at 32 bytes against a quarter of the limit; staged pressure passed through", () => {
  const s = latchSources({
    memoryLimitBytes: 1024 * 1024 * 1024,
    pressureThreshold: 0.8,
    pauseAbove: 0.8,
    heldRecords: () => 2 * 1024 * 1024, // 64 MiB of offsets against a 256 MiB quarter
    stagedPressure: () => 0.42,
    rss: () => 0,
  });
  assert.deepEqual(Object.keys(s).sort(), ["held_records", "memory", "staged_bytes"]);
  assert.equal(s.held_records!(), 0.25);
  assert.equal(s.staged_bytes!(), 0.42);
});

test("latchSources: memory reaches pause_above exactly at pressure_threshold x limit", () => {
  let rss = 0;
  const limit = 1000;
  const opts = { memoryLimitBytes: limit, heldRecords: () => 0, rss: () => rss };
  const mem = latchSources({ ...opts, pressureThreshold: 0.5, pauseAbove: 0.8 }).memory!;
  rss = 500;
  assert.equal(mem(), 0.8, "rss at the threshold reads as pause_above");
  // Resuming (below 0.6) needs rss below threshold x resume_below / pause_above of the limit: 375 bytes.
  rss = 375.1;
  assert.ok(mem() > 0.6);
  rss = 374.9;
  assert.ok(mem() < 0.6);
  // With the defaults the threshold and pause_above coincide: the ratio is rss over the limit.
  const dflt = latchSources({ ...opts, pressureThreshold: 0.8, pauseAbove: 0.8 }).memory!;
  rss = 800;
  assert.equal(dflt(), 0.8);
  assert.equal(latchSources({ ...opts, pressureThreshold: 0, pauseAbove: 0.8 }).memory, undefined);
  assert.equal(latchSources({ ...opts, pressureThreshold: 0.8, pauseAbove: 0.8 }).staged_bytes, undefined);
});

test("latchSources feed the latch: held records pause intake at 80% of the quarter", () => {
  let held = 0;
  const events: string[] = [];
  const latch = createLatch({
    pauseAbove: 0.8,
    resumeBelow: 0.6,
    enabled: true,
    sources: latchSources({
      memoryLimitBytes: 4 * 32 * 1000,
      pressureThreshold: 0.8,
      pauseAbove: 0.8,
      heldRecords: () => held,
      rss: () => 0,
    }),
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

test("a settled source holds a paused latch only at pause_above: a floor above resume_below cannot pause it for good", () => {
  let settled = false;
  const { values, events, latch } = harness(
    { memory: 0.5, held_records: 0.1 },
    { settled: (source) => source === "memory" && settled },
  );
  values.memory = 0.9;
  assert.equal(latch.check().paused, true);
  values.memory = 0.65;
  assert.equal(latch.check().paused, true, "work still in flight: waits for resume_below");
  settled = true;
  values.held_records = 0.7;
  assert.equal(latch.check().paused, true, "an unsettled source in the band still holds it");
  values.held_records = 0.1;
  values.memory = 0.8;
  assert.equal(latch.check().paused, true, "settled, but at pause_above");
  values.memory = 0.65;
  assert.equal(latch.check().paused, false, "settled and below pause_above: resumes");
  assert.deepEqual(events, ["pause memory 0.9", "resume"]);
});
