// reply.wat through ReplyPutter: records an lz4 decoder left, put into a reply's shared WebAssembly memory a table of
// copies at a time, against the records themselves.
import assert from "node:assert/strict";
import { test } from "node:test";
import { putterFor, ReplyPutter, sharedReplyMemory } from "../../src/route/reply-wasm.ts";
import { decoderMemory } from "../../src/wasm/memory.ts";
import { lz4Decoded } from "../../../e2e/support/batches.ts";
import type { WasmMemory } from "../../src/wasm/loader.ts";

test("records are put where asked, each with its newline, end and offset, across many tables", () => {
  // More records than one table holds (2048 rows), of uneven lengths, put in reverse order.
  const records = Array.from({ length: 5000 }, (_, i) => JSON.stringify({ n: i, pad: "x".repeat((i * 13) % 300) }));
  const views = lz4Decoded(records);
  const memory = decoderMemory((views[0] as Buffer).buffer);
  assert.ok(memory !== undefined);
  const bytes = records.reduce((n, r) => n + Buffer.byteLength(r) + 1, 0);
  const endsAt = bytes + 8;
  const offsetsAt = endsAt + records.length * 4 + 8;
  const reply = sharedReplyMemory(offsetsAt + records.length * 8);
  const putter = new ReplyPutter(memory, reply);
  const starts: number[] = [];
  let to = 0;
  for (const r of records) {
    starts.push(to);
    to += Buffer.byteLength(r) + 1;
  }
  for (let i = records.length - 1; i >= 0; i--) {
    const view = views[i] as Buffer;
    const at = starts[i] as number;
    putter.put(at, view.byteOffset, view.length, endsAt + i * 4, at + view.length + 1, offsetsAt + i * 8, 1e12 + i);
  }
  putter.done();
  const out = Buffer.from(reply.buffer);
  assert.equal(out.toString("utf8", 0, bytes), records.map((r) => `${r}\n`).join(""));
  const data = new DataView(reply.buffer);
  records.forEach((r, i) => {
    assert.equal(data.getUint32(endsAt + i * 4, true), (starts[i] as number) + Buffer.byteLength(r) + 1);
    assert.equal(data.getFloat64(offsetsAt + i * 8, true), 1e12 + i);
  });
});

test("records not in a decoder's memory, or a reply not in a WebAssembly memory, take no putter", () => {
  const [view] = lz4Decoded(['{"a":1}']);
  assert.ok(view !== undefined);
  const putters = new Map<WasmMemory, ReplyPutter>();
  const wasm = sharedReplyMemory(1024);
  const first = putterFor(view.buffer, wasm, putters);
  assert.ok(first !== undefined);
  assert.equal(putterFor(view.buffer, wasm, putters), first, "one putter a decoder's memory and reply");
  assert.equal(putterFor(new ArrayBuffer(8), wasm, putters), undefined);
  assert.equal(putterFor(view.buffer, { buffer: new SharedArrayBuffer(1024) }, new Map()), undefined);
});
