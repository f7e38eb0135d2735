import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { test } from "node:test";
import { HEAP_SIZED_ENV, heapFlags, missingHeapFlags } from "../../src/regulate/heap.ts";

const MIB = 1 << 20;

test("heap flags from the limit: half for the old space, a 64th per semi-space, within V8's bounds", () => {
  assert.deepEqual(heapFlags(512 * MIB), { oldSpaceMiB: 256, semiSpaceMiB: 8 });
  assert.deepEqual(heapFlags(2 * MIB), { oldSpaceMiB: 256, semiSpaceMiB: 1 }, "never under what the process needs");
  assert.deepEqual(heapFlags(16384 * MIB), { oldSpaceMiB: 8192, semiSpaceMiB: 64 });
});

test("only flags the operator did not set are added, and no old-space ceiling with the default limit", () => {
  const env = { bytes: 512 * MIB, source: "env" } as const;
  assert.deepEqual(missingHeapFlags(env, []), ["--max-old-space-size=256", "--max-semi-space-size=8"]);
  assert.deepEqual(missingHeapFlags(env, ["--max-old-space-size=100"]), ["--max-semi-space-size=8"]);
  assert.deepEqual(missingHeapFlags(env, ["--max_semi_space_size=4", "--max-old-space-size=1"]), []);
  assert.deepEqual(missingHeapFlags({ bytes: 512 * MIB, source: "cgroup" }, ["--max-old-space-size=256"]), [
    "--max-semi-space-size=8",
  ]);
  assert.deepEqual(missingHeapFlags({ bytes: 1024 * MIB, source: "default" }, []), ["--max-semi-space-size=2"]);
  assert.deepEqual(missingHeapFlags({ bytes: 1024 * MIB, source: "default" }, ["--max-semi-space-size=2"]), []);
});

test("a process given a limit restarts itself once, in place, with the flags", () => {
  const script = `
    import { sizeHeap } from ${JSON.stringify(new URL("../../src/regulate/heap.ts", import.meta.url).href)};
    import v8 from "node:v8";
    sizeHeap({ bytes: 512 * 1048576, source: "env" });
    console.log(JSON.stringify({ execArgv: process.execArgv, marker: process.env.${HEAP_SIZED_ENV}, pid: process.pid,
      limitMiB: v8.getHeapStatistics().heap_size_limit / 1048576, arenas: process.env.MALLOC_ARENA_MAX,
      mmap: process.env.MALLOC_MMAP_THRESHOLD_ }));`;
  const env = Object.fromEntries(
    Object.entries({ ...process.env, MALLOC_ARENA_MAX: "4" }).filter(
      ([k]) => k !== HEAP_SIZED_ENV && k !== "MALLOC_MMAP_THRESHOLD_",
    ),
  );
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", env });
  assert.equal(r.status, 0, r.stderr);
  const lines = r.stdout.trim().split("\n");
  assert.equal(lines.length, 1, "printed once: the restarted process does not restart again");
  const out = JSON.parse(lines[0] ?? "{}") as {
    execArgv: string[];
    marker: string;
    pid: number;
    limitMiB: number;
    arenas: string;
    mmap: string;
  };
  assert.equal(out.arenas, "4", "the operator's own allocator setting wins");
  assert.equal(out.mmap, "131072");
  assert.ok(out.execArgv.includes("--max-old-space-size=256") && out.execArgv.includes("--max-semi-space-size=8"));
  assert.equal(out.marker, "--max-old-space-size=256 --max-semi-space-size=8");
  assert.equal(out.pid, r.pid, "restarted in place: same pid");
  assert.ok(out.limitMiB < 512, `heap limit ${out.limitMiB} MiB`);
});
