// The WebAssembly scan reading records where an lz4 decoder left them (Kafka's lz4 batches), its tables at the head
// of the decoder's memory, against the same records copied into the scanner's own memory.
import assert from "node:assert/strict";
import { test } from "node:test";
import { WasmScanner, WasmVerdict } from "../../src/route/scan-wasm.ts";
import { Lz4Frames } from "../../src/transport/lz4-frame.ts";
import { lz4Decoded } from "../../../e2e/support/batches.ts";

function lines(n: number, pad = 40): string[] {
  return Array.from({ length: n }, (_, i) =>
    JSON.stringify({ _org_id: `org-${i % 7}`, msg: "m".repeat((i * 37) % pad), tag: `t\\${i}`, n: i }),
  );
}

function scanner(key: string): WasmScanner {
  const s = WasmScanner.open([Buffer.from(key)]);
  assert.ok(s !== undefined, "Node 24 has WebAssembly SIMD");
  return s;
}

/** The routed key's value text as the scan found it, read from `buf` where the record starts at `start`. */
function found(s: WasmScanner, buf: Buffer, start: number, end: number): string {
  assert.equal(s.scan(buf, start, end, 64), WasmVerdict.Ok);
  return buf.toString("utf8", s.start(0, start), s.end(0, start));
}

test("a record an lz4 decoder left is scanned where it lies, any other from a copy, with the same spans", () => {
  const records = lines(500);
  const views = lz4Decoded(records);
  const s = scanner("_org_id");
  views.forEach((view, i) => {
    const expected = JSON.stringify(JSON.parse(records[i] as string)._org_id);
    // The view's own coordinates, and the decoder's output as a whole with the record at its offset there.
    assert.equal(found(s, view, 0, view.length), expected);
    assert.ok(s.inPlace, `record ${i} read in place`);
    const whole = Buffer.from(view.buffer);
    assert.equal(found(s, whole, view.byteOffset, view.byteOffset + view.length), expected);
    assert.ok(s.inPlace);
    const copy = Buffer.from(records[i] as string);
    assert.equal(found(s, copy, 0, copy.length), expected);
    assert.equal(s.inPlace, false);
  });
  // A record refused as JSON is refused in place too.
  const [broken] = lz4Decoded(['{"_org_id":"x",}']);
  assert.ok(broken !== undefined);
  assert.equal(s.scan(broken, 0, broken.length, 64), WasmVerdict.Invalid);
  assert.ok(s.inPlace);
});

test("scanners of different keys take turns over one decoder's memory, each with its own keys", () => {
  const records = lines(200);
  const views = lz4Decoded(records);
  const org = scanner("_org_id");
  const tag = scanner("tag");
  views.forEach((view, i) => {
    const doc = JSON.parse(records[i] as string) as { _org_id: string; tag: string };
    const [first, second] = i % 3 === 0 ? [tag, org] : [org, tag];
    for (const s of [first, second]) {
      const value = found(s, view, 0, view.length);
      assert.equal(value, JSON.stringify(s === org ? doc._org_id : doc.tag), `record ${i}`);
      assert.ok(s.inPlace);
    }
  });
});

test("a decoder's memory grown by a later run, and a fresh decoder, are read in place at their new buffers", () => {
  const decoder = new Lz4Frames();
  const s = scanner("_org_id");
  const small = lines(10);
  for (const [i, view] of lz4Decoded(small, decoder).entries()) {
    assert.equal(found(s, view, 0, view.length), `"org-${i % 7}"`);
  }
  // Past the decoder's first memory (1 MiB): growing it replaces its buffer, and the views of the last run with it.
  const big = lines(6000, 400);
  const views = lz4Decoded(big, decoder);
  assert.ok(views.at(-1)!.buffer.byteLength > 1 << 20);
  views.forEach((view, i) => {
    assert.equal(found(s, view, 0, view.length), `"org-${i % 7}"`);
    assert.ok(s.inPlace);
  });
  for (const [i, view] of lz4Decoded(small).entries()) {
    assert.equal(found(s, view, 0, view.length), `"org-${i % 7}"`);
    assert.ok(s.inPlace);
  }
});
