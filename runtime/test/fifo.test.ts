import assert from "node:assert/strict";
import { test } from "node:test";
import { Fifo } from "../src/fifo.ts";

test("a Fifo gives items back in the order they came, through its cutbacks, and counts what it gave", () => {
  const q = new Fifo<number>();
  const out: number[] = [];
  for (let i = 0; i < 5000; i++) {
    q.push(i);
    // Two in, one out, so the head runs far past the cutback point while items remain.
    if (i % 2 === 1) out.push(q.shift() as number);
  }
  assert.equal(q.length, 2500);
  assert.equal(q.peek(), 2500);
  for (let v = q.shift(); v !== undefined; v = q.shift()) out.push(v);
  assert.deepEqual(
    out,
    Array.from({ length: 5000 }, (_, i) => i),
  );
  assert.equal(q.taken, 5000);
  assert.equal(q.length, 0);
  assert.equal(q.shift(), undefined);
  assert.equal(q.taken, 5000, "an empty shift takes nothing");
});
