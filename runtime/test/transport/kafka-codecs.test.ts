import { test } from "node:test";
import assert from "node:assert/strict";
import { compress } from "snappy";
import { snappyDecode } from "../../src/transport/kafka-codecs.ts";

test("snappy batches decode both raw and in snappy-java's xerial framing", async () => {
  const a = Buffer.from("first block ".repeat(100));
  const b = Buffer.from("second block ".repeat(50));
  assert.deepEqual(await snappyDecode(await compress(a)), a);
  const blocks = [await compress(a), await compress(b)];
  const header = Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00, 0, 0, 0, 1, 0, 0, 0, 1]);
  const framed = Buffer.concat([
    header,
    ...blocks.flatMap((blk) => {
      const len = Buffer.alloc(4);
      len.writeUInt32BE(blk.length);
      return [len, blk];
    }),
  ]);
  assert.deepEqual(await snappyDecode(framed), Buffer.concat([a, b]));
});
