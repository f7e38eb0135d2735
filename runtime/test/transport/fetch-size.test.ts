import assert from "node:assert/strict";
import { test } from "node:test";
import { fetchBytes } from "../../src/transport/open.ts";

const MIB = 1 << 20;

test("a fetch is a 1024th of the memory limit, a partition at most a quarter of it or batch_size kilobytes", () => {
  assert.deepEqual(fetchBytes(10_000, 1024 * MIB), { maxBytes: MIB, maxBytesPerPartition: 256 * 1024 });
  assert.deepEqual(fetchBytes(10_000, 8192 * MIB), { maxBytes: 8 * MIB, maxBytesPerPartition: 2 * MIB });
  assert.deepEqual(fetchBytes(10_000, 65536 * MIB), { maxBytes: 64 * MIB, maxBytesPerPartition: 10_000 * 1024 });
  assert.deepEqual(fetchBytes(100, 16384 * MIB), { maxBytes: 16 * MIB, maxBytesPerPartition: 256 * 1024 });
  assert.deepEqual(fetchBytes(10_000, 2 * MIB), { maxBytes: MIB, maxBytesPerPartition: 256 * 1024 }, "floors");
  assert.equal(fetchBytes(10_000, 2 ** 40).maxBytes, 64 * MIB, "ceiling");
});
