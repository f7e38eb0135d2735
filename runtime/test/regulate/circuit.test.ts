import { test } from "node:test";
import assert from "node:assert/strict";
import { createSinkCircuit, SinkTally } from "../../src/regulate/circuit.ts";

function harness() {
  const changes: boolean[] = [];
  const gauge: number[] = [];
  const tally = new SinkTally();
  const circuit = createSinkCircuit({ onChange: (open) => changes.push(open), gauge: { set: (v) => gauge.push(v) } });
  const cycle = () => circuit.cycle({ succeeded: tally.succeeded, failed: tally.failed });
  return { changes, gauge, tally, circuit, cycle };
}

test("a cycle in which every attempt failed opens the circuit; the next success closes it", () => {
  const { changes, gauge, tally, circuit, cycle } = harness();
  assert.equal(cycle(), false, "no attempt yet");
  tally.ok();
  tally.fail();
  assert.equal(cycle(), false, "a cycle with a success stays closed, failures or not");
  tally.fail();
  tally.fail();
  assert.equal(cycle(), true);
  assert.equal(circuit.open, true);
  assert.equal(cycle(), true, "a cycle with no attempt (an upload waiting out its backoff) keeps it open");
  tally.fail();
  assert.equal(cycle(), true);
  tally.fail();
  tally.ok();
  assert.equal(cycle(), false, "one success closes it");
  assert.equal(cycle(), false);
  assert.deepEqual(changes, [true, false], "one callback per change");
  assert.deepEqual(gauge, [0, 1, 0]);
});

test("the live tally can be passed itself: each cycle reads what changed since the last", () => {
  const tally = new SinkTally();
  const circuit = createSinkCircuit({ onChange: () => undefined });
  tally.fail();
  assert.equal(circuit.cycle(tally), true);
  tally.ok();
  assert.equal(circuit.cycle(tally), false);
});

test("counts are read as totals: only what happened since the last cycle matters", () => {
  const { circuit } = harness();
  assert.equal(circuit.cycle({ succeeded: 100, failed: 0 }), false);
  assert.equal(circuit.cycle({ succeeded: 100, failed: 5 }), true, "100 old successes do not hold it closed");
  assert.equal(circuit.cycle({ succeeded: 101, failed: 9 }), false);
});
