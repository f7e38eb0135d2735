import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { cgroupMemoryLimit, DEFAULT_LIMIT_BYTES, resolveMemoryLimit } from "../../src/regulate/memory.ts";

const GIB = 2 ** 30;

test("the limit: DFE_ARCHIVER_MEMORY_LIMIT_BYTES, else the cgroup's times the headroom", () => {
  assert.deepEqual(resolveMemoryLimit(300e6, 0.85, 2 * GIB, 24 * GIB), { bytes: 300e6, source: "env" });
  assert.deepEqual(resolveMemoryLimit(0, 0.85, 2 * GIB, 24 * GIB), {
    bytes: Math.floor(2 * GIB * 0.85),
    source: "cgroup",
  });
  assert.deepEqual(resolveMemoryLimit(0, 0.5, 512e6, 24 * GIB), { bytes: 256e6, source: "cgroup" });
});

test("with neither, a bounded default: 1 GiB (the seed's recommended), not the host's memory", () => {
  assert.equal(DEFAULT_LIMIT_BYTES, GIB);
  assert.deepEqual(resolveMemoryLimit(0, 0.85, undefined, 24 * GIB), { bytes: GIB, source: "default" });
  assert.deepEqual(
    resolveMemoryLimit(0, 0.85, undefined, GIB),
    { bytes: Math.floor(GIB * 0.85), source: "default" },
    "a host with less: its memory times the headroom",
  );
});

test("cgroup files: v2 max and v1's huge number read as no limit, a number as the limit", () => {
  const dir = mkdtempSync(join(tmpdir(), "dfe-cgroup-"));
  const file = (name: string, text: string) => {
    const f = join(dir, name);
    writeFileSync(f, text);
    return f;
  };
  assert.equal(cgroupMemoryLimit([file("v2max", "max\n")]), undefined);
  assert.equal(cgroupMemoryLimit([file("v2", "536870912\n")]), 536870912);
  assert.equal(cgroupMemoryLimit([file("v1", "9223372036854771712\n")]), undefined);
  assert.equal(cgroupMemoryLimit([join(dir, "absent"), file("second", "1048576")]), 1048576, "the first file present");
  assert.equal(cgroupMemoryLimit([join(dir, "absent")]), undefined);
});
