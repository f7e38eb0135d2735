import assert from "node:assert/strict";
import { test } from "node:test";
import { appendTo, appendTriple, EMPTY } from "../src/lists.ts";

test("appendTo: onto an empty list the items are the list; onto another, pushed in place", () => {
  const first = appendTriple(EMPTY, 1, 2, 3);
  assert.deepEqual(first, [1, 2, 3]);
  assert.equal(EMPTY.length, 0, "the shared empty list stays empty");
  const again = appendTo(first, 4);
  assert.equal(again, first, "a list with entries is the one returned");
  assert.deepEqual(first, [1, 2, 3, 4]);
  const own: number[] = [];
  assert.notEqual(appendTo(own, 5), own, "an empty list of its own is left as it was");
  assert.deepEqual(own, []);
});

test("EMPTY refuses to be added to, so no holder of it can change it for the others", () => {
  const shared: number[] = EMPTY;
  assert.throws(() => shared.push(1), TypeError);
  assert.equal(EMPTY.length, 0);
});
