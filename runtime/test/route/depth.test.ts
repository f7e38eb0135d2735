import assert from "node:assert/strict";
import { test } from "node:test";
import { nestingDepthExceeds } from "../../src/route/depth.ts";

const arrays = (levels: number) => Buffer.from("[".repeat(levels) + "]".repeat(levels));
const objects = (levels: number) => Buffer.from('{"a":'.repeat(levels) + "1" + "}".repeat(levels));

test("64 levels pass, 65 exceed, for arrays, objects and a mix", () => {
  assert.equal(nestingDepthExceeds(arrays(64), 64), false);
  assert.equal(nestingDepthExceeds(arrays(65), 64), true);
  assert.equal(nestingDepthExceeds(objects(64), 64), false);
  assert.equal(nestingDepthExceeds(objects(65), 64), true);
  const mixed = (levels: number) => Buffer.from('[{"k":'.repeat(levels / 2) + "0" + "}]".repeat(levels / 2));
  assert.equal(nestingDepthExceeds(mixed(64), 64), false);
  assert.equal(nestingDepthExceeds(mixed(66), 64), true);
});

test("depth is the deepest point, not the count of containers", () => {
  const wide = Buffer.from("[" + "[[]],".repeat(1000) + "[]]");
  assert.equal(nestingDepthExceeds(wide, 3), false);
  assert.equal(nestingDepthExceeds(wide, 2), true);
  assert.equal(nestingDepthExceeds(Buffer.from("{}"), 0), true);
  assert.equal(nestingDepthExceeds(Buffer.from('"x" 1 true'), 0), false);
});

test("10,000 and 1,000,000 levels are scanned without recursion", () => {
  assert.equal(nestingDepthExceeds(arrays(10_000), 64), true);
  assert.equal(nestingDepthExceeds(arrays(10_000), 10_000), false);
  assert.equal(nestingDepthExceeds(arrays(10_000), 9_999), true);
  assert.equal(nestingDepthExceeds(arrays(1_000_000), 1_000_000), false);
});

test("brackets inside strings do not count", () => {
  const inString = Buffer.from(JSON.stringify({ a: "[[[[{{{{".repeat(20), b: ["]]]]}}}}"] }));
  assert.equal(nestingDepthExceeds(inString, 2), false);
  assert.equal(nestingDepthExceeds(inString, 1), true);
  assert.equal(nestingDepthExceeds(Buffer.from('"[[[["'), 0), false);
});

test("an escaped quote does not end a string, an escaped backslash before a quote does", () => {
  // {"a":"\"[[[["} : the brackets are still inside the string.
  assert.equal(nestingDepthExceeds(Buffer.from('{"a":"\\"[[[["}'), 1), false);
  // ["\\",[[[]]]] : the string is one backslash, then four real levels.
  const afterBackslash = Buffer.from('["\\\\",[[[]]]]');
  assert.equal(JSON.parse(afterBackslash.toString())[0], "\\");
  assert.equal(nestingDepthExceeds(afterBackslash, 4), false);
  assert.equal(nestingDepthExceeds(afterBackslash, 3), true);
});

test("20 MB inputs: flat, all strings, and all brackets", () => {
  const flat = Buffer.from("[" + '"abcdefghijklmnopq[{",'.repeat(1_000_000) + "1]");
  assert.ok(flat.length >= 20_000_000);
  assert.equal(nestingDepthExceeds(flat, 1), false);
  const brackets = Buffer.alloc(20_000_000, "[");
  assert.equal(nestingDepthExceeds(brackets, 64), true);
  assert.equal(nestingDepthExceeds(brackets, 20_000_000), false);
});

test("an unterminated string ends the scan without error", () => {
  assert.equal(nestingDepthExceeds(Buffer.from('["[[[[[[\\'), 1), false);
});
