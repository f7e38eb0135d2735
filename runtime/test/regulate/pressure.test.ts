import { test } from "node:test";
import assert from "node:assert/strict";
import { createPressure, type PressureInputs, type PressureOptions } from "../../src/regulate/pressure.ts";

const MB = 1_000_000;
const base = (over: Partial<PressureOptions> = {}): PressureOptions => ({
  enabled: true,
  memoryGateThreshold: 0.8,
  memoryLimitBytes: 1000 * MB,
  hotBufferCapBytes: 250 * MB,
  kafkaLag: true,
  lagHorizonSecs: 60,
  lagFloorRecords: 10_000,
  ...over,
});
/** Floating-point figures compared to a millionth. */
const near = (actual: number, expected: number, msg?: string) =>
  assert.ok(Math.abs(actual - expected) < 1e-6, `${msg ?? "value"}: ${actual}, expected ${expected}`);
const idle: PressureInputs = { lagRecords: 0, receivedRecords: 0, bufferBytes: 0, rssBytes: 0, nowMs: 0 };

test("the composite is the hottest term x 100", () => {
  const gauge: number[] = [];
  const p = createPressure(base({ gauge: { set: (v) => gauge.push(v) } }));
  assert.equal(p.update(idle), 0);
  assert.equal(p.update({ ...idle, bufferBytes: 100 * MB, rssBytes: 300 * MB, lagRecords: 2000 }), 40);
  assert.deepEqual(p.terms(), { kafkaLag: 0.2, bufferDepth: 0.4, memory: 0.3 });
  near(p.update({ ...idle, bufferBytes: 100 * MB, rssBytes: 550 * MB, lagRecords: 2000 }), 55);
  near(p.update({ ...idle, bufferBytes: 100 * MB, rssBytes: 300 * MB, lagRecords: 7000 }), 70);
  near(p.value(), 70);
  assert.equal(gauge.length, 5);
  [0, 0, 40, 55, 70].forEach((v, i) => near(gauge[i]!, v, `gauge ${i}`));
});

test("clamped to 0..100", () => {
  const p = createPressure(base());
  assert.equal(p.update({ ...idle, bufferBytes: 600 * MB }), 100, "in-flight bytes can run past the cap");
  assert.equal(p.update({ ...idle, lagRecords: 1e9 }), 100);
  assert.equal(p.update({ ...idle, lagRecords: -5 }), 0);
  assert.equal(p.update({ ...idle, lagRecords: NaN }), 0);
});

test("the lag term is measured in seconds of the pod's recent intake, with a floor", () => {
  const p = createPressure(base({ rateTauSecs: 1 }));
  // At no intake the floor is the reference.
  p.update({ ...idle, lagRecords: 5000 });
  assert.equal(p.terms().kafkaLag, 0.5);
  // A steady 1000 records/s for long enough that the average has settled: the reference is 60 s of it.
  let received = 0;
  for (let t = 1; t <= 30; t++) p.update({ ...idle, receivedRecords: (received += 1000), nowMs: t * 1000 });
  p.update({ ...idle, receivedRecords: received + 1000, nowMs: 31_000, lagRecords: 30_000 });
  near(p.terms().kafkaLag!, 0.5, "30k lag at ~1000/s over 60 s");
  near(p.value(), 50);
});

test("the intake rate ignores a counter reset and a repeated timestamp", () => {
  const p = createPressure(base({ rateTauSecs: 1, lagFloorRecords: 1 }));
  p.update({ ...idle, receivedRecords: 1_000_000, nowMs: 0 });
  p.update({ ...idle, receivedRecords: 0, nowMs: 50_000, lagRecords: 60 });
  assert.equal(p.terms().kafkaLag, 60, "no intake after the reset: the floor of 1 record is the reference");
  p.update({ ...idle, receivedRecords: 1000, nowMs: 50_000, lagRecords: 60 });
  assert.equal(p.terms().kafkaLag, 60, "a second update at the same instant measures no interval");
});

test("grpc drops the lag term", () => {
  const p = createPressure(base({ kafkaLag: false }));
  assert.equal(p.update({ ...idle, lagRecords: 1e9, bufferBytes: 25 * MB }), 10);
  assert.equal(p.terms().kafkaLag, undefined);
});

test("the memory gate forces 100 at its threshold", () => {
  const p = createPressure(base({ memoryGateThreshold: 0.7 }));
  near(p.update({ ...idle, rssBytes: 699 * MB }), 69.9);
  assert.equal(p.update({ ...idle, rssBytes: 700 * MB }), 100);
  assert.equal(p.update({ ...idle, rssBytes: 500 * MB }), 50);
});

test("an open sink circuit zeroes the composite, gate included, until it closes", () => {
  const p = createPressure(base());
  const hot = { ...idle, rssBytes: 900 * MB, lagRecords: 1e6 };
  assert.equal(p.update(hot), 100);
  p.setSinkOpen(true);
  assert.equal(p.value(), 0, "zeroed at once, not at the next tick");
  assert.equal(p.update(hot), 0);
  assert.equal(p.terms().memory, 0.9, "the terms are still measured");
  p.setSinkOpen(false);
  assert.equal(p.value(), 0, "closing waits for the next update");
  assert.equal(p.update(hot), 100);
});

test("scaling disabled: always 0", () => {
  const p = createPressure(base({ enabled: false }));
  assert.equal(p.update({ ...idle, rssBytes: 990 * MB, bufferBytes: 250 * MB, lagRecords: 1e9 }), 0);
  assert.equal(p.value(), 0);
});
