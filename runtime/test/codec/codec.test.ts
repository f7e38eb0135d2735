import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { random } from "../../../e2e/support/random.ts";
import { need } from "../../../e2e/support/testbed.ts";
import { after, before, describe, it } from "node:test";
import { ArchiverError, ConfigError } from "../../src/errors.ts";
import { CODEC_LEVELS, CODEC_NAMES, createCodec, type CodecName } from "../../src/codec/index.ts";

const dir = mkdtempSync(join(tmpdir(), "codec-test-"));
after(() => rmSync(dir, { recursive: true, force: true }));

function jsonLines(bytes: number, seed: number): Buffer {
  const next = random(seed);
  const levels = ["info", "warn", "error", "debug"];
  const lines: string[] = [];
  let size = 0;
  for (let i = 0; size < bytes; i++) {
    const line = JSON.stringify({
      id: i,
      ts: 1_700_000_000_000 + Math.floor(next() * 1e9),
      level: levels[Math.floor(next() * levels.length)],
      user: `user-${Math.floor(next() * 5000)}`,
      trace: Math.floor(next() * 2 ** 48).toString(16),
      msg: `request ${Math.floor(next() * 1e6)} took ${Math.floor(next() * 900)}ms`,
    });
    lines.push(line);
    size += line.length + 1;
  }
  return Buffer.from(lines.join("\n") + "\n").subarray(0, bytes);
}

function noise(bytes: number, seed: number): Buffer {
  const next = random(seed);
  const out = Buffer.allocUnsafe(bytes);
  for (let i = 0; i < bytes; i++) out[i] = Math.floor(next() * 256);
  return out;
}

// One batch per flush, as the pipeline would hand them over: text, binary, the smallest, chunk-boundary sizes
// (snappy frames 64 KiB chunks), and a 5 MB flush mixing text, incompressible bytes and a run of zeros.
const INCOMPRESSIBLE = 3;
const FLUSHES: readonly Buffer[] = [
  jsonLines(300_000, 1),
  Buffer.from([0x00]),
  jsonLines(65_536, 2),
  noise(256 * 1024, 3),
  jsonLines(65_537, 4),
  Buffer.alloc(0),
  Buffer.from("one line without its newline"),
  Buffer.concat([jsonLines(3_000_000, 5), noise(1_000_000, 6), Buffer.alloc(1_000_000), jsonLines(242_880, 7)]),
];
const WHOLE = Buffer.concat(FLUSHES);
let large: Buffer | undefined;

interface Tool {
  readonly command: string;
  readonly args: (file: string) => string[];
  /** What provides the command: the package list that scripts/bootstrap installs, or the testbed. */
  readonly from: string;
}

// Readers the project did not write. Snappy's is klauspost/compress's s2d (built by the testbed), a Go implementation
// of the framing format: not the Rust snap crate that the runtime's snappy package encodes with.
const TOOLS: Record<CodecName, Tool> = {
  zstd: { command: "zstd", args: (f) => ["-dc", "--", f], from: "scripts/packages.txt" },
  lz4: { command: "lz4", args: (f) => ["-dc", f], from: "scripts/packages.txt" },
  gzip: { command: "gzip", args: (f) => ["-dc", "--", f], from: "scripts/packages.txt" },
  snappy: { command: need("TESTBED_S2D"), args: (f) => ["-c", "-q", f], from: "e2e/testbed/tools/up.sh" },
};

/** Decodes `file` with the codec's own tool; fails (never skips) when the tool is not installed. */
function decodeWithTool(codec: CodecName, file: string): { ok: true; out: Buffer } | { ok: false; stderr: string } {
  const tool = TOOLS[codec];
  const run = spawnSync(tool.command, tool.args(file), { maxBuffer: 256 * 1024 * 1024 });
  if ((run.error as NodeJS.ErrnoException | undefined)?.code === "ENOENT") {
    assert.fail(`${tool.command} (to decode ${codec}) is missing: npm test installs it (${tool.from})`);
  }
  if (run.error) throw run.error;
  return run.status === 0 ? { ok: true, out: run.stdout } : { ok: false, stderr: run.stderr.toString() };
}

function flipped(file: Buffer, at: number): Buffer {
  const copy = Buffer.from(file);
  copy[at] = (copy[at] ?? 0) ^ 0x10;
  return copy;
}

async function rejectsWith(promise: Promise<unknown>, code: string): Promise<void> {
  await assert.rejects(promise, (err: unknown) => {
    assert.ok(err instanceof ArchiverError, `expected an ArchiverError, got ${String(err)}`);
    assert.equal(err.code, code);
    assert.equal(err.kind, "permanent");
    return true;
  });
}

for (const name of CODEC_NAMES) {
  describe(`${name} codec`, () => {
    const codec = createCodec(name);
    let blocks: Buffer[] = [];
    // Compressed concurrently, as two flushes in flight would be; each output must still be its own input's frame.
    before(async () => {
      blocks = await Promise.all(FLUSHES.map((f) => codec.compress(f)));
    });

    it("writes a file of many flushes that its own tool reads whole", async () => {
      const file = join(dir, `flushes${codec.suffix}`);
      writeFileSync(file, Buffer.concat(blocks));
      const decoded = decodeWithTool(name, file);
      assert.ok(decoded.ok, `decoding failed: ${decoded.ok ? "" : decoded.stderr}`);
      assert.ok(decoded.out.equals(WHOLE), `decoded ${decoded.out.length} bytes, wrote ${WHOLE.length}`);
    });

    it("decompresses each block on its own back to its flush", async () => {
      const all = blocks;
      for (const [i, block] of all.entries()) {
        const back = await codec.decompress(block);
        assert.ok(back.equals(FLUSHES[i] ?? Buffer.alloc(0)), `block ${i} decoded to ${back.length} bytes`);
      }
    });

    it("detects a flipped byte, both in its own tool and in read-back", async () => {
      const all = blocks;
      const file = Buffer.concat(all);
      const startOf = (i: number) => all.slice(0, i).reduce((n, b) => n + b.length, 0);
      const incompressible = all[INCOMPRESSIBLE] ?? Buffer.alloc(0);
      // Inside incompressible bytes the frame stores data as is, so only a checksum can notice the change.
      const positions = [startOf(INCOMPRESSIBLE) + (incompressible.length >> 1), startOf(1) - 1];
      for (const at of positions) {
        const path = join(dir, `flipped-${at}${codec.suffix}`);
        writeFileSync(path, flipped(file, at));
        const decoded = decodeWithTool(name, path);
        assert.equal(decoded.ok, false, `${TOOLS[name].command} accepted a file with byte ${at} flipped`);
      }
      await rejectsWith(codec.decompress(flipped(incompressible, incompressible.length >> 1)), "codec_corrupt");
      const first = all[0] ?? Buffer.alloc(0);
      await rejectsWith(codec.decompress(flipped(first, first.length - 1)), "codec_corrupt");
    });

    it("refuses a block that is not a frame, permanently", async () => {
      await rejectsWith(codec.decompress(Buffer.from("not a frame of anything")), "codec_corrupt");
      const first = blocks[0] ?? Buffer.alloc(0);
      await rejectsWith(codec.decompress(first.subarray(0, first.length >> 1)), "codec_corrupt");
    });

    it("compresses off the event loop", async () => {
      const big = (large ??= jsonLines(32 * 1024 * 1024, 8));
      await codec.compress(FLUSHES[0] ?? big); // starts any worker before measuring
      // Most of the CPU a large compress costs must be spent on other threads than this one. CPU time, not wall
      // time, so a loaded machine cannot make this pass or fail.
      const process0 = process.cpuUsage();
      const main0 = process.threadCpuUsage();
      await codec.compress(big);
      const main = process.threadCpuUsage(main0);
      const whole = process.cpuUsage(process0);
      const share = (main.user + main.system) / (whole.user + whole.system);
      assert.ok(share < 0.5, `the main thread spent ${(share * 100).toFixed(0)}% of the compress's CPU`);
    });
  });
}

describe("createCodec", () => {
  it("names each codec's suffix and default level", () => {
    const got = CODEC_NAMES.map((n) => {
      const c = createCodec(n);
      return [c.name, c.suffix, c.level];
    });
    assert.deepEqual(got, [
      ["zstd", ".zst", 3],
      ["lz4", ".lz4", undefined],
      ["snappy", ".sz", undefined],
      ["gzip", ".gz", 6],
    ]);
  });

  it("refuses a level outside the codec's range, naming the key", () => {
    for (const [name, level] of [
      ["zstd", 0],
      ["zstd", 23],
      ["zstd", 2.5],
      ["gzip", 0],
      ["gzip", 10],
    ] as const) {
      assert.throws(
        () => createCodec(name, level),
        (err: unknown) => err instanceof ConfigError && err.key === "compression.level",
        `${name} level ${level}`,
      );
    }
    assert.equal(createCodec("zstd", 22).level, 22);
    assert.equal(createCodec("gzip", 1).level, 1);
  });

  it("ignores a level for a codec that has none", () => {
    assert.equal(CODEC_LEVELS.lz4, undefined);
    assert.equal(createCodec("lz4", 9).level, undefined);
    assert.equal(createCodec("snappy", 3).level, undefined);
  });

  it("applies the level it is given", async () => {
    const text = jsonLines(1_000_000, 9);
    for (const [name, low, high] of [
      ["zstd", 1, 19],
      ["gzip", 1, 9],
    ] as const) {
      const fast = await createCodec(name, low).compress(text);
      const small = await createCodec(name, high).compress(text);
      assert.ok(small.length < fast.length, `${name} ${high}: ${small.length} bytes, ${low}: ${fast.length} bytes`);
    }
  });
});

describe("frame memory", () => {
  // A flush of one record with thousands of destinations: its frame must not pin zlib's 64 KiB output chunk.
  for (const name of CODEC_NAMES) {
    it(`a ${name} frame of one small record holds little more memory than its bytes`, async () => {
      const codec = createCodec(name);
      const frame = await codec.compress(jsonLines(700, 3));
      assert.ok(
        frame.buffer.byteLength <= Math.max(2 * frame.length, 8192),
        `${frame.length}-byte frame holds ${frame.buffer.byteLength} bytes`,
      );
      assert.deepEqual(await codec.decompress(frame), jsonLines(700, 3));
    });
  }
});
