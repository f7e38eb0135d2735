// The codec lanes batch every job asked for in one turn of the event loop into one message per lane: each job must
// still get its own answer, and appends to one file must land in the order they were asked for.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { createCodec } from "../../src/codec/index.ts";
import { viewsOf } from "../../src/buffer/hot.ts";
import { codecLanes, copyInto, IDLE_TRIM_MS, ReplyLeases } from "../../src/codec/lanes.ts";
import { encodeRouteBlock, readRouted, routeBlock, type Routed, type RouteSpec } from "../../src/route/block.ts";
import { createFileStore } from "../../src/store/file.ts";
import type { RecordsBatch } from "../../src/records.ts";
import { groupsOf } from "../route/groups.ts";

const dir = mkdtempSync(join(tmpdir(), "lanes-test-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const flush = (i: number): Buffer =>
  Buffer.from(Array.from({ length: 1 + (i % 13) }, (_, k) => `{"id":${i},"k":${k},"org":"org-${i % 7}"}\n`).join(""));

/**
 * `buf` in pieces, as a flush hands them to its lane: the first third in shared memory of its own, the middle in
 * plain memory, the rest in shared memory at an odd offset (every fifth flush whole, in one piece).
 */
function inPieces(buf: Buffer, i: number): Buffer[] {
  if (i % 5 === 0) return [buf];
  const shared = (part: Buffer, at: number): Buffer => {
    const copy = Buffer.from(new SharedArrayBuffer(at + part.length + 3), at, part.length);
    part.copy(copy);
    return copy;
  };
  const a = Math.floor(buf.length / 3);
  const b = Math.floor((2 * buf.length) / 3);
  return [shared(buf.subarray(0, a), 0), Buffer.from(buf.subarray(a, b)), shared(buf.subarray(b), 5)];
}

test("a thousand flushes asked for in one turn each come back as their own frame", async () => {
  const codec = createCodec("zstd", 3);
  const inputs = Array.from({ length: 1000 }, (_, i) => flush(i));
  const frames = await Promise.all(inputs.map((f) => codec.compress(f)));
  const back = await Promise.all(frames.map((f) => codec.decompress(f)));
  for (const [i, b] of back.entries()) assert.ok(b.equals(inputs[i] ?? Buffer.alloc(0)), `flush ${i}`);
  // And the file of all of them, read by zstd itself, is every flush in order.
  const file = join(dir, "all.zst");
  writeFileSync(file, Buffer.concat(frames));
  const decoded = spawnSync("zstd", ["-dc", "--", file], { maxBuffer: 64 << 20 });
  assert.equal(decoded.status, 0, decoded.stderr?.toString());
  assert.ok(decoded.stdout.equals(Buffer.concat(inputs)));
});

test("levels and codecs mixed in one batch each use their own context", async () => {
  const input = Buffer.concat(Array.from({ length: 400 }, (_, i) => flush(i)));
  const [fast, small, gz, lz] = await Promise.all([
    createCodec("zstd", 1).compress(input),
    createCodec("zstd", 19).compress(input),
    createCodec("gzip", 6).compress(input),
    createCodec("lz4").compress(input),
  ]);
  assert.ok(fast !== undefined && small !== undefined && gz !== undefined && lz !== undefined);
  assert.ok(small.length < fast.length, `level 19: ${small.length} bytes, level 1: ${fast.length}`);
  assert.ok((await createCodec("zstd", 3).decompress(small)).equals(input));
  assert.ok((await createCodec("gzip").decompress(gz)).equals(input));
  assert.ok((await createCodec("lz4").decompress(lz)).equals(input));
});

test("appends to several files asked for in one turn land whole, each file in its own order", async () => {
  const store = createFileStore(dir);
  const files = await Promise.all(["a", "b", "c"].map((n) => store.open(`d/${n}.jsonl`)));
  const expected = files.map(() => [] as string[]);
  const appends: Promise<void>[] = [];
  for (let i = 0; i < 300; i++) {
    const which = (i * 7) % files.length;
    const text = `${which}:${i};`.repeat(1 + (i % 5));
    expected[which]?.push(text);
    appends.push(files[which]?.append(Buffer.from(text)) ?? Promise.resolve());
  }
  await Promise.all(appends);
  for (const [i, f] of files.entries()) {
    assert.equal(f.size, Buffer.byteLength(expected[i]?.join("") ?? ""));
    await f.complete({ records: 0, codec: "none", openedAt: 0, closedAt: 0, blockLengths: [], blockRecords: [] });
    assert.equal(readFileSync(join(dir, `d/${["a", "b", "c"][i]}.jsonl`), "utf8"), expected[i]?.join(""));
  }
});

test("flushes compressed where they are appended land as one frame each, in order, and zstd reads the file whole", async () => {
  const store = createFileStore(dir);
  const codec = createCodec("zstd", 3);
  const files = await Promise.all(["x", "y"].map((n) => store.open(`c/${n}.jsonl.zst`)));
  const inputs = files.map(() => [] as Buffer[]);
  const appends: Promise<number>[] = [];
  for (let i = 0; i < 400; i++) {
    const which = i % 3 === 0 ? 1 : 0;
    inputs[which]?.push(flush(i));
    appends.push(files[which]?.appendCompressed(codec, inPieces(flush(i), i)) ?? Promise.resolve(0));
  }
  const lengths = await Promise.all(appends);
  for (const [i, f] of files.entries()) {
    const own = lengths.filter((_, k) => (k % 3 === 0 ? 1 : 0) === i);
    assert.equal(
      f.size,
      own.reduce((n, l) => n + l, 0),
      "the file's size is its frames' lengths",
    );
    await f.complete({ records: 0, codec: "zstd", openedAt: 0, closedAt: 0, blockLengths: own, blockRecords: [] });
    const path = join(dir, `c/${["x", "y"][i]}.jsonl.zst`);
    // Each length delimits one frame that decodes to its own flush.
    const bytes = readFileSync(path);
    let at = 0;
    for (const [k, l] of own.entries()) {
      assert.ok((await codec.decompress(bytes.subarray(at, at + l))).equals(inputs[i]?.[k] ?? Buffer.alloc(0)));
      at += l;
    }
    const decoded = spawnSync("zstd", ["-dc", "--", path], { maxBuffer: 64 << 20 });
    assert.equal(decoded.status, 0, decoded.stderr?.toString());
    assert.ok(decoded.stdout.equals(Buffer.concat(inputs[i] ?? [])));
  }
});

test("a compressed append that the disk refuses fails as a write (ENOSPC, nothing written), not as the codec's refusal", async () => {
  const fd = openSync("/dev/full", "a");
  try {
    const err = await createCodec("zstd", 3)
      .compressAppend(fd, [flush(3)])
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    assert.deepEqual(err, { kind: "fs", code: "ENOSPC", message: (err as { message?: string }).message, written: 0 });
  } finally {
    closeSync(fd);
  }
});

test("lanes started ahead of any job leave the process free to exit, idle or after a job", () => {
  const lanesTs = new URL("../../src/codec/lanes.ts", import.meta.url).href;
  for (const job of ["", `await codecLanes().run("compress", 0, new Uint8Array(8));`]) {
    const script = join(dir, "start-lanes.mjs");
    writeFileSync(script, `import { codecLanes } from ${JSON.stringify(lanesTs)};\ncodecLanes().start();\n${job}\n`);
    const r = spawnSync(process.execPath, [script], { timeout: 20_000 });
    assert.equal(r.error, undefined, `the process did not exit (job: ${job || "none"})`);
    assert.equal(r.status, 0, r.stderr.toString());
  }
});

test("copyInto copies shared memory to any offset exactly, and an empty copy touches nothing", () => {
  const shared = Buffer.from(new SharedArrayBuffer(4096));
  for (let i = 0; i < shared.length; i++) shared[i] = (i * 7 + 3) & 0xff;
  for (const [from, length, at] of [
    [0, 4096, 1],
    [5, 1000, 3],
    [8, 8, 0],
    [1, 0, 9],
  ] as const) {
    const into = Buffer.alloc(4200, 0xee);
    copyInto(into, at, shared.subarray(from, from + length));
    assert.deepEqual(into.subarray(at, at + length), shared.subarray(from, from + length));
    assert.ok(
      into.subarray(0, at).every((b) => b === 0xee),
      "bytes before the copy changed",
    );
    assert.ok(
      into.subarray(at + length).every((b) => b === 0xee),
      "bytes after the copy changed",
    );
  }
  assert.throws(() => copyInto(Buffer.alloc(4), 2, Buffer.alloc(3)), RangeError);
});

test("a route block given up is moved to the lane, not copied: routed as a copy would be, and gone from here", async () => {
  const spec: RouteSpec = { mode: "expression", fields: ["org"], defaultSegment: "unknown", chunk: 1000 };
  const batch: RecordsBatch = {
    topic: "t",
    partition: 0,
    records: Array.from({ length: 300 }, (_, i) => ({
      value: Buffer.from(`{"id":${i},"org":"org-${i % 7}"}`),
      offset: String(i),
    })),
  };
  const here = readRouted(routeBlock(encodeRouteBlock(spec, batch)));
  // Memory of their own, as routeBatch gives the blocks it moves: a pooled Buffer's would detach the pool.
  const moved = encodeRouteBlock(spec, batch, Buffer.allocUnsafeSlow);
  const kept = encodeRouteBlock(spec, batch, Buffer.allocUnsafeSlow);
  const [fromMoved, fromKept] = await Promise.all([
    codecLanes().run("route", 0, moved, true),
    codecLanes().run("route", 0, kept),
  ]);
  assert.equal(moved.buffer.byteLength, 0, "the moved block's memory went with the message");
  assert.ok(kept.byteLength > 0, "a block not given up stays the caller's");
  const keys = (r: Routed) => r.chunks.flatMap((c) => groupsOf(c).map((g) => [g.key, viewsOf(g).data.toString()]));
  assert.deepEqual(keys(readRouted(fromMoved)), keys(here));
  assert.deepEqual(keys(readRouted(fromKept)), keys(here));
});

test("an idle lane's spare reply memory is let go: kept for the next replies only while routes keep coming", async () => {
  const spec: RouteSpec = { mode: "topic", fields: [], defaultSegment: "unknown", chunk: 1000 };
  const batch: RecordsBatch = {
    topic: "t",
    partition: 0,
    records: Array.from({ length: 100 }, (_, i) => ({ value: Buffer.from(`{"id":${i}}`), offset: String(i) })),
  };
  const routed = readRouted(await codecLanes().run("route", 0, encodeRouteBlock(spec, batch, Buffer.allocUnsafeSlow)));
  assert.ok(routed.memory.length > 0, "a lane's reply lies in memory it made");
  const before = codecLanes().sparesHeld;
  codecLanes().recycle(routed.memory);
  assert.equal(codecLanes().sparesHeld, before + routed.memory.length, "recycled: held for the lane's next replies");
  await sleep(IDLE_TRIM_MS + 500);
  assert.equal(codecLanes().sparesHeld, 0, "idle past IDLE_TRIM_MS: let go");
});

test("route reply memory recycled while leased goes back for reuse at its last reader's release, and only then", () => {
  const given: SharedArrayBuffer[] = [];
  const leases = new ReplyLeases((m) => given.push(m));
  const read = new SharedArrayBuffer(8);
  leases.lease(read);
  leases.lease(read);
  leases.recycle(read);
  assert.deepEqual(given, [], "two readers hold it");
  leases.release(read);
  assert.deepEqual(given, [], "one reader still holds it");
  leases.release(read);
  assert.deepEqual(given, [read]);
  leases.release(read);
  assert.equal(given.length, 1, "a release past the last gives nothing back twice");

  const unread = new SharedArrayBuffer(8);
  leases.recycle(unread);
  assert.deepEqual(given, [read, unread], "memory nothing leased goes back at once");
  const kept = new SharedArrayBuffer(8);
  leases.lease(kept);
  leases.release(kept);
  assert.equal(given.length, 2, "memory released but never recycled stays with its batch");
  leases.recycle(kept);
  assert.deepEqual(given, [read, unread, kept]);
});
