import { test } from "node:test";
import assert from "node:assert/strict";
import { viewsOf } from "../../src/buffer/hot.ts";
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
import type { EncodedBatch, EncodedFormat, RecordsBatch } from "../../src/records.ts";
import { groupsOf } from "./groups.ts";

/** For batches of records: routing them reads no encoded format. */
const NO_FORMAT: EncodedFormat = {
  cut: () => assert.fail("a batch of records was cut as encoded"),
  forEach: () => assert.fail("a batch of records was read as encoded"),
};

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

/**
 * The block routed, beside the same records routed one by one and grouped by key, cut into chunks of spec.chunk:
 * each chunk's groups (key, lines, offsets), from the reply and from the router. Also the reply and the router.
 */
function routedBeside(s: RouteSpec, records: (string | null)[]) {
  const routed = readRouted(Buffer.from(routeBlock(encodeRouteBlock(s, batch(records)))));
  const router = createRouter({ ...s, fields: [...s.fields] });
  const expected = [];
  for (let from = 0; from < records.length; from += s.chunk) {
    const groups = new Map<string | typeof TOO_DEEP, { lines: string[]; offsets: number[] }>();
    records.slice(from, from + s.chunk).forEach((v, k) => {
      const key = router.route("events", Buffer.from(v ?? ""));
      const g = groups.get(key) ?? { lines: [], offsets: [] };
      g.lines.push(v ?? "");
      g.offsets.push(100 + from + k);
      groups.set(key, g);
    });
    expected.push([...groups].map(([key, g]) => ({ key, ...g })));
  }
  const got = routed.chunks.map((c) =>
    groupsOf(c).map((g) => ({
      key: g.key,
      lines: viewsOf(g).data.toString().split("\n").slice(0, -1),
      offsets: [...viewsOf(g).offsets],
    })),
  );
  return { routed, router, got, expected };
}

test("a routed block groups each chunk by destination, in record order, as the router routes each record", () => {
  const { routed, router, got, expected } = routedBeside(spec, values);
  assert.deepEqual(got, expected);
  assert.deepEqual(
    routed.chunks.map((c) => [c.records, c.lastOffset]),
    [
      [4, 103],
      [4, 107],
      [1, 108],
    ],
  );
  const first = routed.chunks[0] === undefined ? undefined : groupsOf(routed.chunks[0])[0];
  assert.deepEqual(
    [...(first === undefined ? [] : viewsOf(first).ends)],
    [values[0]!.length + 1, values[0]!.length + values[3]!.length + 2],
  );
  const stats = router.drainStats();
  assert.equal(routed.errors, stats.errors);
  assert.equal(routed.tooDeep, 1);
  assert.deepEqual(routed.fallbacks, [stats.fallbacks.get("_org_id") ?? 0, stats.fallbacks.get("event_type") ?? 0]);
  assert.ok(routed.errors >= 2 && (routed.fallbacks[1] ?? 0) >= 1, "the invalid, null and blank cases were met");
});

test("records whose fields read differently but route to one key share its group, in each chunk alone", () => {
  // Absent, blank and the default itself all route to events/c/unknown; the chunks (3 records each) cut the runs.
  const c = ['{"_org_id":"c"}', '{"_org_id":"c","event_type":"unknown"}', '{"_org_id":"c","event_type":" "}'];
  const d = '{"_org_id":"d","event_type":"y"}';
  const records = [c[0]!, c[1]!, d, c[2]!, c[0]!, d, c[1]!, c[1]!, c[0]!, d];
  const { routed, got, expected } = routedBeside({ ...spec, chunk: 3 }, records);
  assert.deepEqual(got, expected);
  assert.deepEqual(
    routed.chunks.map((ch) => groupsOf(ch).map((g) => [g.key, g.count])),
    [
      [
        ["events/c/unknown", 2],
        ["events/d/y", 1],
      ],
      [
        ["events/c/unknown", 2],
        ["events/d/y", 1],
      ],
      [["events/c/unknown", 3]],
      [["events/d/y", 1]],
    ],
  );
});

test("topic mode and a push with no topic route by the default segment, nothing parsed", () => {
  const topicSpec: RouteSpec = { ...spec, mode: "topic", chunk: 10 };
  const routed = readRouted(
    Buffer.from(routeBlock(encodeRouteBlock(topicSpec, { ...batch(["x", "y"]), topic: undefined }))),
  );
  assert.deepEqual(
    (routed.chunks[0] === undefined ? [] : groupsOf(routed.chunks[0])).map((g) => [g.key, viewsOf(g).data.toString()]),
    [["unknown", "x\ny\n"]],
  );
  assert.equal(readRouted(Buffer.from(routeBlock(encodeRouteBlock(topicSpec, batch([]))))).chunks.length, 0);
});

test("routing on a lane gives what routing here gives", async () => {
  const here = readRouted(Buffer.from(routeBlock(encodeRouteBlock(spec, batch(values)))));
  const there = await routeBatch(spec, batch(values), NO_FORMAT);
  // Groups are compared by their own records: the replies' padding between them is never read.
  assert.deepEqual({ ...there, chunks: plain(there), memory: [] }, { ...here, chunks: plain(here), memory: [] });
  assert.deepEqual(
    there.chunks.map((c) => [c.records, c.lastOffset]),
    here.chunks.map((c) => [c.records, c.lastOffset]),
  );
});

/** A routed batch as plain data: per chunk, per group, its key and records. */
const plain = (r: Routed) =>
  r.chunks.map((c) =>
    groupsOf(c).map((g) => {
      const v = viewsOf(g);
      return [g.key, v.data.toString(), [...v.ends], [...v.offsets]];
    }),
  );

test("a lane writes later replies into memory given back, and they read as replies in fresh memory do", async () => {
  const many = (tag: string, n: number) =>
    Array.from({ length: n }, (_, i) => `{"_org_id":"o${i % 5}","event_type":"${tag}","pad":"${"x".repeat(i % 97)}"}`);
  const big = batch(many("first", 400));
  const first = await routeBatch(spec, big, NO_FORMAT);
  assert.deepEqual(plain(first), plain(readRouted(routeBlock(encodeRouteBlock(spec, big)))));
  assert.equal(first.memory.length, 1, "a lane's reply is memory of its own");
  const size = first.memory[0]?.byteLength;
  codecLanes().recycle(first.memory);
  // Smaller, so the memory given back holds it; its records differ, so anything left of the first would show.
  const small = batch(many("second", 150));
  const second = await routeBatch(spec, small, NO_FORMAT);
  assert.equal(second.memory[0]?.byteLength, size, "the reply was not written into the memory given back");
  assert.deepEqual(plain(second), plain(readRouted(routeBlock(encodeRouteBlock(spec, small)))));
});

/** Per chunk, each group's key and its records' text, in the reply's order. */
const grouped = (r: Routed) => r.chunks.map((c) => groupsOf(c).map((g) => [g.key, viewsOf(g).data.toString()]));

test("one group per key and chunk, even when a record that cannot be read takes a key a readable one has", () => {
  // Without a topic, a record that is not JSON takes the default segment alone, as does one whose only field is
  // missing or blank: two ways to one key, which must still share one group, in record order.
  const oneField: RouteSpec = { ...spec, fields: ["_org_id"], chunk: 100 };
  const push = (vals: string[]) => ({ ...batch(vals), topic: undefined });
  const vals = ['{"_org_id":"a"}', "not json", "{}", '{"_org_id":"a","n":2}', '{"_org_id":" "}', "[1"];
  const routed = readRouted(Buffer.from(routeBlock(encodeRouteBlock(oneField, push(vals)))));
  assert.deepEqual(grouped(routed), [
    [
      ["a", `${vals[0]}\n${vals[3]}\n`],
      ["unknown", `${vals[1]}\n${vals[2]}\n${vals[4]}\n${vals[5]}\n`],
    ],
  ]);
});

test("blocks routed one after another group by their own records, whatever the keys met before", () => {
  const three: RouteSpec = { ...spec, chunk: 3 };
  const rec = (org: string, n: number) => `{"_org_id":"${org}","event_type":"t","n":${n}}`;
  const first = [rec("x", 1), rec("y", 2), rec("x", 3), rec("y", 4), rec("z", 5)];
  const second = [rec("y", 6), rec("z", 7), rec("y", 8), rec("x", 9)];
  const expected = (vals: string[]) => {
    const chunks: [string, string][][] = [];
    for (let i = 0; i < vals.length; i += three.chunk) {
      const groups = new Map<string, string>();
      for (const v of vals.slice(i, i + three.chunk)) {
        const key = `events/${(JSON.parse(v) as { _org_id: string })._org_id}/t`;
        groups.set(key, (groups.get(key) ?? "") + v + "\n");
      }
      chunks.push([...groups]);
    }
    return chunks;
  };
  for (const vals of [first, second, first]) {
    const routed = readRouted(Buffer.from(routeBlock(encodeRouteBlock(three, batch(vals)))));
    assert.deepEqual(grouped(routed), expected(vals));
  }
});

test("an encoded batch's records are read by the format given, from its offset, aborted transactions passed on", () => {
  // Not Kafka's: lines of "offset value", so the route stage is seen to read records through the format alone.
  const seen: { fromOffset: number; aborted: unknown }[] = [];
  const lines: EncodedFormat = {
    cut: (bytes) => [bytes],
    forEach(bytes, fromOffset, visit, aborted) {
      seen.push({ fromOffset, aborted });
      const text = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      let visited = 0;
      for (let at = 0; at < text.length;) {
        const space = text.indexOf(0x20, at);
        const end = text.indexOf(0x0a, space);
        const offset = Number(text.toString("utf8", at, space));
        if (offset >= fromOffset) {
          visit(text, space + 1, end, offset);
          visited++;
        }
        at = end + 1;
      }
      return visited;
    },
  };
  const vals = [
    '{"_org_id":"a","event_type":"x"}',
    '{"_org_id":"b","event_type":"x"}',
    '{"_org_id":"a","event_type":"y"}',
  ];
  const bytes = Buffer.from(vals.map((v, i) => `${40 + i} ${v}\n`).join(""));
  const aborted = [{ producerId: 7, firstOffset: 12 }];
  const encoded: EncodedBatch = {
    topic: "events",
    partition: 0,
    encoded: { bytes, fromOffset: 41, lastOffset: 42, aborted },
  };
  const routed = readRouted(
    Buffer.from(routeBlock(encodeRouteBlock({ ...spec, chunk: 10 }, encoded), undefined, lines)),
  );
  assert.deepEqual(seen, [{ fromOffset: 41, aborted }]);
  assert.deepEqual(
    (routed.chunks[0] === undefined ? [] : groupsOf(routed.chunks[0])).map((g) => [
      g.key,
      viewsOf(g).data.toString(),
      [...viewsOf(g).offsets],
    ]),
    [
      ["events/b/x", `${vals[1]}\n`, [41]],
      ["events/a/y", `${vals[2]}\n`, [42]],
    ],
  );
  assert.throws(() => routeBlock(encodeRouteBlock(spec, encoded)), /no EncodedFormat/);
});
