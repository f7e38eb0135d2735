import { test } from "node:test";
import assert from "node:assert/strict";
import { BlockPool, MIN_BLOCK, SLAB_BYTES } from "../../src/buffer/blocks.ts";

const range = (b: Buffer) => [b.buffer, b.byteOffset, b.byteOffset + b.length] as const;

test("a block is the power of two at or above the size asked, at least 512 bytes, in shared memory", () => {
  const pool = new BlockPool();
  assert.equal(pool.alloc(1).length, MIN_BLOCK);
  assert.equal(pool.alloc(513).length, 1024);
  assert.equal(pool.alloc(4096).length, 4096);
  assert.ok(pool.alloc(100).buffer instanceof SharedArrayBuffer);
  assert.equal(pool.inUse, 512 + 1024 + 4096 + 512);
  const huge = pool.alloc(SLAB_BYTES + 1);
  assert.equal(huge.length, SLAB_BYTES + 1, "past a slab: memory of its own");
  pool.free(huge);
  assert.equal(pool.inUse, 512 + 1024 + 4096 + 512);
});

test("blocks never overlap, and every byte given back is carved again (buddies merge back into a whole slab)", () => {
  const pool = new BlockPool();
  let seed = 7;
  const rand = () => (seed = (seed * 1103515245 + 12345) >>> 0) / 2 ** 32;
  const live: Buffer[] = [];
  for (let step = 0; step < 5000; step++) {
    if (live.length > 0 && rand() < 0.45) {
      const [gone] = live.splice(Math.floor(rand() * live.length), 1);
      pool.free(gone as Buffer);
    } else {
      const b = pool.alloc(1 + Math.floor(rand() * 70_000));
      b.fill(step & 0xff);
      live.push(b);
    }
  }
  const spans = live.map(range).sort((a, b) => (a[0] === b[0] ? a[1] - b[1] : 0));
  for (const buf of new Set(spans.map((s) => s[0]))) {
    const inSlab = spans.filter((s) => s[0] === buf).sort((a, b) => a[1] - b[1]);
    for (let i = 1; i < inSlab.length; i++) assert.ok((inSlab[i - 1]?.[2] ?? 0) <= (inSlab[i]?.[1] ?? 0), "overlap");
  }
  for (const b of live) pool.free(b);
  assert.equal(pool.inUse, 0);
  // Everything merged back: one whole slab's block comes from a slab already held.
  const held = pool.held;
  pool.alloc(SLAB_BYTES);
  assert.equal(pool.held, held);
});

test("a block given back twice, or one the pool did not carve, is ignored", () => {
  const pool = new BlockPool();
  const a = pool.alloc(1000);
  pool.free(a);
  pool.free(a);
  pool.free(Buffer.alloc(1024));
  assert.equal(pool.inUse, 0);
  const b = pool.alloc(1000);
  const c = pool.alloc(1000);
  assert.notEqual(b.byteOffset === c.byteOffset && b.buffer === c.buffer, true, "one block handed out twice");
});

test("whole free slabs past the few kept go; addresses past 2^31 (the 513th slab) still merge", () => {
  const pool = new BlockPool({ keepSlabs: 2 });
  const slabs = Array.from({ length: 520 }, () => pool.alloc(SLAB_BYTES));
  assert.equal(pool.held, 520 * SLAB_BYTES);
  const last = slabs.pop() as Buffer;
  pool.free(last);
  // Halves of the 520th slab, carved and given back: they merge back into its whole.
  const halves = [pool.alloc(SLAB_BYTES / 2), pool.alloc(SLAB_BYTES / 2)];
  assert.ok(halves.every((h) => h.buffer === last.buffer));
  for (const h of halves) pool.free(h);
  for (const s of slabs) pool.free(s);
  assert.equal(pool.inUse, 0);
  assert.equal(pool.held, 2 * SLAB_BYTES);
});

test("free blocks merged into their buddies are never carved twice, over rounds of churn", () => {
  const pool = new BlockPool();
  for (let round = 0; round < 20; round++) {
    // Small blocks, given back in an order that merges most of them, then larger ones from the same memory.
    const small = Array.from({ length: 3000 }, (_, i) => pool.alloc(MIN_BLOCK << (i % 3)));
    for (let i = 0; i < small.length; i += 2) pool.free(small[i] as Buffer);
    const large = Array.from({ length: 200 }, () => pool.alloc(8 * MIN_BLOCK));
    const live = [...small.filter((_, i) => i % 2 === 1), ...large];
    for (const buf of new Set(live.map((b) => b.buffer))) {
      const inSlab = live
        .filter((b) => b.buffer === buf)
        .map(range)
        .sort((a, b) => a[1] - b[1]);
      for (let i = 1; i < inSlab.length; i++) assert.ok((inSlab[i - 1]?.[2] ?? 0) <= (inSlab[i]?.[1] ?? 0), "overlap");
    }
    for (const b of live) pool.free(b);
    assert.equal(pool.inUse, 0);
  }
});

test("past 32 MiB free, the sparsest slabs retire: nothing is carved from them, each goes with its last block", () => {
  const pool = new BlockPool({ keepSlabs: 0 });
  const per = SLAB_BYTES / MIN_BLOCK;
  const small = Array.from({ length: 20 * per }, () => pool.alloc(MIN_BLOCK));
  const dense = Array.from({ length: 2 }, () => pool.alloc(SLAB_BYTES));
  // Twenty slabs of small blocks, the first holding one block, the next two, and so on.
  const kept = small.filter((_, i) => i % per <= Math.floor(i / per));
  for (const b of small) if (!kept.includes(b)) pool.free(b);
  assert.equal(pool.held, 22 * SLAB_BYTES);
  assert.equal(pool.retireSparse(), true);
  const retired = new Set(kept.filter((b) => pool.retiring(b)).map((b) => b.buffer));
  assert.equal(retired.size, 11, "the eleven sparsest, leaving more than 32 MiB free in the others");
  assert.ok(
    kept.every((b) => pool.retiring(b) === kept.indexOf(b) < (11 * 12) / 2),
    "the sparsest retire first",
  );
  assert.ok(
    dense.every((b) => !pool.retiring(b)),
    "a full slab stays",
  );
  const fresh = Array.from({ length: 100 }, () => pool.alloc(MIN_BLOCK));
  assert.ok(
    fresh.every((b) => !retired.has(b.buffer)),
    "carved from a slab not retiring",
  );
  assert.equal(pool.held, 22 * SLAB_BYTES);
  for (const b of kept) if (retired.has(b.buffer)) pool.free(b);
  assert.equal(pool.held, 11 * SLAB_BYTES, "each retiring slab went with its last block");
  assert.equal(pool.retireSparse(), false, "32 MiB and a little more free: room for the next growth");
  for (const b of [...fresh, ...dense, ...kept]) pool.free(b);
  assert.equal(pool.inUse, 0);
});

test("up to 32 MiB free in slabs stays as room for the next growth", () => {
  const pool = new BlockPool({ keepSlabs: 0 });
  const per = SLAB_BYTES / MIN_BLOCK;
  const small = Array.from({ length: 8 * per }, () => pool.alloc(MIN_BLOCK));
  for (let i = 0; i < small.length; i++) if (i % per !== 0) pool.free(small[i] as Buffer);
  assert.equal(pool.retireSparse(), false);
});

test("a slab's blocks share one pair of word views, which read each block at its byteOffset", () => {
  const pool = new BlockPool();
  const a = pool.alloc(1024);
  const b = pool.alloc(4096);
  const views = pool.views(a);
  assert.equal(pool.views(b), views, "the same views for every block of the slab");
  assert.equal(views.f64.buffer, a.buffer);
  new Float64Array(b.buffer, b.byteOffset, 2).set([1.5, 2 ** 40]);
  new Uint32Array(a.buffer, a.byteOffset + 8, 1)[0] = 7;
  assert.deepEqual([views.f64[b.byteOffset / 8], views.f64[b.byteOffset / 8 + 1]], [1.5, 2 ** 40]);
  assert.equal(views.u32[a.byteOffset / 4 + 2], 7);
  // A block larger than a slab lies in memory of its own, read from its start.
  const big = pool.alloc(SLAB_BYTES + 12);
  const own = pool.views(big);
  assert.notEqual(own, views);
  assert.deepEqual([own.f64.length, own.u32.length], [SLAB_BYTES / 8 + 1, SLAB_BYTES / 4 + 3]);
});
