import { test } from "node:test";
import assert from "node:assert/strict";
import { codecLanes } from "../../src/codec/lanes.ts";
import {
  encodeRouteBlock,
  readRouted,
  routeBlock,
  routeBatch,
  type Routed,
  type RouteSpec,
} from "../../src/route/block.ts";
import { createRouter, type TOO_DEEP } from "../../src/route/router.ts";
import type { RecordsBatch } from "../../src/transport/types.ts";

const spec: RouteSpec = { mode: "expression", fields: ["_org_id", "event_type"], defaultSegment: "unknown", chunk: 4 };

function batch(values: (string | null)[]): RecordsBatch {
  return {
    topic: "events",
    partition: 2,
    records: values.map((v, i) => ({ value: v === null ? null : Buffer.from(v), offset: String(100 + i) })),
  };
}

const deep = "[".repeat(65) + "]".repeat(65);
const values = [
  '{"_org_id":"a","event_type":"x","n":1}',
  '{"_org_id":"b","event_type":"x"}',
  deep,
  '{"_org_id":"a","event_type":"x","n":2}',
  "not json",
  null,
  '{"_org_id":"../é","event_type":""}',
  '{"_org_id":"a","event_type":"x","n":3}',
  '{"_org_id":{"o":1},"event_type":"x"}',
];

test("a routed block groups each chunk by destination, in record order, as the router routes each record", () => {
  const routed = readRouted(Buffer.from(routeBlock(encodeRouteBlock(spec, batch(values)))));
  const router = createRouter({ ...spec, fields: [...spec.fields] });
  // The same records routed one by one, cut into chunks of spec.chunk.
  const expected = [];
  for (let from = 0; from < values.length; from += spec.chunk) {
    const groups = new Map<string | typeof TOO_DEEP, { lines: string[]; offsets: number[] }>();
    values.slice(from, from + spec.chunk).forEach((v, k) => {
      const key = router.route("events", Buffer.from(v ?? ""));
      const g = groups.get(key) ?? { lines: [], offsets: [] };
      g.lines.push(v ?? "");
      g.offsets.push(100 + from + k);
      groups.set(key, g);
    });
    expected.push([...groups].map(([key, g]) => ({ key, ...g })));
  }
  const got = routed.chunks.map((c) =>
    c.groups.map((g) => ({
      key: g.key,
      lines: g.data.toString().split("\n").slice(0, -1),
      offsets: [...g.offsets],
    })),
  );
  assert.deepEqual(got, expected);
  assert.deepEqual(
    routed.chunks.map((c) => [c.records, c.lastOffset]),
    [
      [4, 103],
      [4, 107],
      [1, 108],
    ],
  );
  const first = routed.chunks[0]?.groups[0];
  assert.deepEqual([...(first?.ends ?? [])], [values[0]!.length + 1, values[0]!.length + values[3]!.length + 2]);
  const stats = router.drainStats();
  assert.equal(routed.errors, stats.errors);
  assert.equal(routed.tooDeep, 1);
  assert.deepEqual(routed.fallbacks, [stats.fallbacks.get("_org_id") ?? 0, stats.fallbacks.get("event_type") ?? 0]);
  assert.ok(routed.errors >= 2 && (routed.fallbacks[1] ?? 0) >= 1, "the invalid, null and blank cases were met");
});

test("topic mode and a push with no topic route by the default segment, nothing parsed", () => {
  const topicSpec: RouteSpec = { ...spec, mode: "topic", chunk: 10 };
  const routed = readRouted(
    Buffer.from(routeBlock(encodeRouteBlock(topicSpec, { ...batch(["x", "y"]), topic: undefined }))),
  );
  assert.deepEqual(
    routed.chunks[0]?.groups.map((g) => [g.key, g.data.toString()]),
    [["unknown", "x\ny\n"]],
  );
  assert.equal(readRouted(Buffer.from(routeBlock(encodeRouteBlock(topicSpec, batch([]))))).chunks.length, 0);
});

test("routing on a lane gives what routing here gives", async () => {
  const here = readRouted(Buffer.from(routeBlock(encodeRouteBlock(spec, batch(values)))));
  const there = await routeBatch(spec, batch(values));
  assert.deepEqual({ ...there, memory: [] }, { ...here, memory: [] });
});

/** A routed batch as plain data: per chunk, per group, its key and records. */
const plain = (r: Routed) =>
  r.chunks.map((c) => c.groups.map((g) => [g.key, g.data.toString(), [...g.ends], [...g.offsets]]));

test("a lane writes later replies into memory given back, and they read as replies in fresh memory do", async () => {
  const many = (tag: string, n: number) =>
    Array.from({ length: n }, (_, i) => `{"_org_id":"o${i % 5}","event_type":"${tag}","pad":"${"x".repeat(i % 97)}"}`);
  const big = batch(many("first", 400));
  const first = await routeBatch(spec, big);
  assert.deepEqual(plain(first), plain(readRouted(routeBlock(encodeRouteBlock(spec, big)))));
  assert.equal(first.memory.length, 1, "a lane's reply is memory of its own");
  const size = first.memory[0]?.byteLength;
  codecLanes().recycle(first.memory);
  // Smaller, so the memory given back holds it; its records differ, so anything left of the first would show.
  const small = batch(many("second", 150));
  const second = await routeBatch(spec, small);
  assert.equal(second.memory[0]?.byteLength, size, "the reply was not written into the memory given back");
  assert.deepEqual(plain(second), plain(readRouted(routeBlock(encodeRouteBlock(spec, small)))));
});
