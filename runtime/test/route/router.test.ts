import assert from "node:assert/strict";
import { test } from "node:test";
import { ConfigError } from "../../src/errors.ts";
import { createRouter, TOO_DEEP, type RouterOptions } from "../../src/route/router.ts";

const rec = (v: unknown) => Buffer.from(typeof v === "string" ? v : JSON.stringify(v));
const expression = (fields: string[], extra: Partial<RouterOptions> = {}) =>
  createRouter({ mode: "expression", fields, defaultSegment: "default", ...extra });
const nested = (levels: number) =>
  Buffer.from('{"_org_id":"acme","d":' + "[".repeat(levels - 1) + "]".repeat(levels - 1) + "}");

test("the seed's examples", () => {
  const kafka = expression(["_org_id", "event_type"]);
  assert.equal(
    kafka.route("events", rec({ _org_id: "acme", event_type: "login", data: { a: [1] } })),
    "events/acme/login",
  );
  const grpc = expression(["_source", "_org_id"]);
  assert.equal(grpc.route(undefined, rec({ _source: "cisco_ios.log", _org_id: "acme" })), "cisco_ios.log/acme");
  assert.equal(
    expression(["tags.category"]).route("events", rec({ tags: { category: "security" } })),
    "events/security",
  );
  assert.deepEqual(kafka.drainStats(), { fallbacks: new Map(), errors: 0, tooDeep: 0 });
});

test("missing, null and blank fields take the default, counted by field path", () => {
  const r = expression(["_org_id", "event_type"]);
  assert.equal(r.route("events", rec({ event_type: "login" })), "events/default/login");
  assert.equal(r.route("events", rec({ _org_id: null, event_type: "" })), "events/default/default");
  assert.equal(r.route("events", rec({ _org_id: "  \t", event_type: "\u00a0\u2028" })), "events/default/default");
  assert.equal(r.route("events", rec({ _org_id: " x ", event_type: 0 })), "events/=20x=20/0");
  assert.equal(r.route(undefined, rec({})), "default/default");
  assert.deepEqual(r.drainStats(), {
    fallbacks: new Map([
      ["_org_id", 4],
      ["event_type", 3],
    ]),
    errors: 0,
    tooDeep: 0,
  });
  assert.deepEqual(r.drainStats(), { fallbacks: new Map(), errors: 0, tooDeep: 0 });
});

test("invalid JSON or an object/array value is a routing error, archived under the topic alone", () => {
  const r = expression(["_org_id", "event_type"]);
  assert.equal(r.route("events", rec("{not json")), "events");
  assert.equal(r.route("events", rec('{"_org_id":"acme"} trailing')), "events");
  assert.equal(r.route("events", rec({ _org_id: { id: "acme" }, event_type: "login" })), "events");
  assert.equal(r.route("events", rec({ _org_id: "acme", event_type: ["login"] })), "events");
  assert.equal(r.route(undefined, rec("")), "default");
  assert.equal(r.route("a/b", rec("nope")), "a=2Fb");
  // An error record counts no fallback even when a field is also missing.
  assert.equal(r.route("events", rec({ _org_id: {} })), "events");
  assert.deepEqual(r.drainStats(), { fallbacks: new Map(), errors: 7, tooDeep: 0 });
});

test("nesting past maxDepth returns TOO_DEEP without routing; 64 levels still route", () => {
  const r = expression(["_org_id"]);
  assert.equal(r.route("events", nested(64)), "events/acme");
  assert.equal(r.route("events", nested(65)), TOO_DEEP);
  assert.equal(r.route("events", Buffer.from("[".repeat(20_000))), TOO_DEEP);
  // Invalid and deep: the depth check comes first.
  assert.equal(r.route("events", Buffer.from("x" + "[".repeat(65))), TOO_DEEP);
  assert.deepEqual(r.drainStats(), { fallbacks: new Map(), errors: 0, tooDeep: 3 });
  const shallow = expression(["_org_id"], { maxDepth: 2 });
  assert.equal(shallow.route("t", rec({ _org_id: "a", b: [1] })), "t/a");
  assert.equal(shallow.route("t", rec({ _org_id: "a", b: [[1]] })), TOO_DEEP);
});

test("topic mode parses nothing: every record goes under its topic, or the default", () => {
  const r = createRouter({ mode: "topic", fields: ["_org_id"], defaultSegment: "default" });
  assert.equal(r.route("events", rec({ _org_id: "acme" })), "events");
  assert.equal(r.route("logs", rec("not json")), "logs");
  assert.equal(r.route("logs", Buffer.from("[".repeat(1000))), "logs");
  assert.equal(r.route(undefined, rec({ _org_id: "acme" })), "default");
  assert.equal(r.route("..", rec({})), "=2E=2E");
  assert.deepEqual(r.drainStats(), { fallbacks: new Map(), errors: 0, tooDeep: 0 });
});

test("every segment is encoded: topic, values and the default", () => {
  const r = createRouter({ mode: "expression", fields: ["_org_id"], defaultSegment: "no org" });
  assert.equal(r.route("a/b", rec({ _org_id: "../etc" })), "a=2Fb/..=2Fetc");
  assert.equal(r.route("t", rec({ _org_id: ".." })), "t/=2E=2E");
  assert.equal(r.route("t", rec({ _org_id: "." })), "t/=2E");
  assert.equal(r.route("t", rec({ _org_id: "=" })), "t/=3D");
  assert.equal(r.route("t", rec({ _org_id: "日本" })), "t/=E6=97=A5=E6=9C=AC");
  assert.equal(r.route("t", rec({})), "t/no=20org");
  assert.equal(r.route("t", rec({ _org_id: true })), "t/true");
  assert.equal(r.route("t", rec({ _org_id: 1.5e300 })), "t/1.5e=2B300");
  assert.equal(r.route("", rec({ _org_id: "x" })), "=/x");
});

test("the segment cache stays correct past its capacity and across topics", () => {
  const r = expression(["_org_id"]);
  for (let round = 0; round < 2; round++) {
    for (let i = 0; i < 10_000; i++) {
      const topic = i % 3 === 0 ? "t/" + (i % 7) : "events";
      const head = i % 3 === 0 ? "t=2F" + (i % 7) : "events";
      assert.equal(r.route(topic, rec({ _org_id: `org/${i}` })), `${head}/org=2F${i}`);
    }
  }
});

test("expression mode needs a field", () => {
  assert.throws(() => expression([]), ConfigError);
  assert.equal(createRouter({ mode: "topic", fields: [], defaultSegment: "d" }).route(undefined, rec("")), "d");
});

test("a key met before is the same string, and its fallbacks are counted again on every record", () => {
  const r = expression(["_org_id", "event_type"]);
  const first = r.route("events", rec({ _org_id: "acme", event_type: "" }));
  const again = r.route("events", rec({ id: 2, _org_id: "acme", nested: { event_type: "x" }, event_type: "" }));
  assert.equal(first, "events/acme/default");
  assert.ok(Object.is(first, again));
  // The same text under another topic, or the same value written another way, is its own key.
  assert.equal(r.route("audit", rec({ _org_id: "acme", event_type: "" })), "audit/acme/default");
  assert.equal(r.route("events", Buffer.from('{"_org_id":"\\u0061cme","event_type":null}')), "events/acme/default");
  assert.equal(r.route("events", rec({ _org_id: 1.0, event_type: true })), "events/1/true");
  assert.equal(r.route("events", Buffer.from('{"_org_id":1e0,"event_type":"true"}')), "events/1/true");
  assert.deepEqual(r.drainStats(), { fallbacks: new Map([["event_type", 4]]), errors: 0, tooDeep: 0 });
});

test("a key's mark is the same for the same text, its own for other text, and none when nothing was matched", () => {
  const r = expression(["_org_id", "event_type"]);
  r.route("events", rec({ _org_id: "acme", event_type: "x" }));
  const mark = r.last;
  assert.ok(mark !== undefined);
  mark.stamp = 7;
  mark.value = 42;
  r.route("events", rec({ n: 2, _org_id: "acme", event_type: "x" }));
  assert.equal(r.last, mark);
  assert.deepEqual({ ...r.last }, { ...mark, stamp: 7, value: 42 });
  // Other fields around the same text: the same mark. The same key from other text: a mark of its own, unstamped.
  assert.equal(r.route("events", rec({ _org_id: "acme", event_type: "x", z: 1 })), "events/acme/x");
  assert.equal(r.last, mark);
  assert.equal(r.route("events", Buffer.from('{"_org_id":"\\u0061cme","event_type":"x"}')), "events/acme/x");
  assert.notEqual(r.last, mark);
  assert.equal(r.last?.stamp, -1);
  for (const v of ["not json", '{"_org_id":{"a":1}}']) {
    r.route("events", Buffer.from(v));
    assert.equal(r.last, undefined, v);
  }
  r.route("events", rec({ _org_id: "acme", event_type: "x" }));
  assert.equal(r.last, mark);
  assert.equal(r.route("events", nested(65)), TOO_DEEP);
  assert.equal(r.last, undefined);
  const topics = createRouter({ mode: "topic", fields: [], defaultSegment: "default" });
  topics.route("events", rec({ _org_id: "acme" }));
  assert.equal(topics.last, undefined);
});

test("records within a larger buffer route as they would alone, past the table's size too", () => {
  const r = expression(["_org_id", "n"]);
  const alone = expression(["_org_id", "n"]);
  const texts = Array.from({ length: 40_000 }, (_, i) => JSON.stringify({ _org_id: `org-${i % 20_000}`, n: i % 3 }));
  // A number that ends its record is followed here by the next record's digits, as in a Kafka batch.
  texts.push("12", "34");
  const buf = Buffer.from(texts.join(""));
  let at = 0;
  for (const t of texts) {
    const end = at + Buffer.byteLength(t);
    assert.equal(r.route("t", buf, at, end), alone.route("t", Buffer.from(t)), t);
    at = end;
  }
  assert.deepEqual(r.drainStats(), alone.drainStats());
});
