// The lz4 frame decoder against frames written by tools it did not write: the lz4 CLI (every block size, linked and
// independent blocks, checksums, content size, stored blocks, concatenated and skippable frames) and lz4-napi.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { compressFrameSync } from "lz4-napi";
import { ArchiverError } from "../../src/errors.ts";
import { lz4Bound, Lz4Frames } from "../../src/transport/lz4-frame.ts";

/** JSON lines like the bench's: long repeats, so matches overlap and reach back across blocks. */
function records(n: number, seed = 0): Buffer {
  const lines: string[] = [];
  for (let i = 0; i < n; i++) {
    const k = (i * 2654435761 + seed) >>> 0;
    lines.push(JSON.stringify({ _org_id: `org-${k % 97}`, id: i, msg: "m".repeat(k % 300), tag: k.toString(36) }));
  }
  return Buffer.from(lines.join("\n"));
}

const lz4Cli = (input: Buffer, args: string[]) => execFileSync("lz4", ["-c", "-q", ...args], { input });

/** A run of one decode, begun with the room it takes. */
function decodeOne(frames: Lz4Frames, bytes: Buffer): Buffer {
  frames.begin(lz4Bound(bytes));
  return frames.decode(bytes);
}

test("frames the lz4 CLI writes decode to their input, whatever the block size, linking and checksums", () => {
  const data = Buffer.concat([records(3000), randomBytes(70_000), records(500, 7)]);
  const frames = new Lz4Frames();
  for (const args of [
    ["-B4"],
    ["-B5", "-BD"],
    ["-B6", "--content-size"],
    ["-B7", "-BX"],
    ["-B4", "-BD", "-BX", "--no-frame-crc"],
    ["-9", "-B4", "-BD"],
  ]) {
    assert.ok(decodeOne(frames, lz4Cli(data, args)).equals(data), args.join(" "));
  }
});

test("lz4-napi's frames decode too, with and without checksums, and an empty input's frame to nothing", () => {
  const data = records(2000, 3);
  const frames = new Lz4Frames();
  for (const opts of [{}, { contentChecksum: true }, { blockChecksums: true, contentChecksum: true }]) {
    assert.ok(decodeOne(frames, compressFrameSync(data, opts)).equals(data), JSON.stringify(opts));
  }
  assert.equal(decodeOne(frames, lz4Cli(Buffer.alloc(0), [])).length, 0);
});

test("concatenated and skippable frames decode end to end, as lz4 -d reads them", () => {
  const a = records(800, 1);
  const b = records(900, 2);
  const skippable = Buffer.alloc(8 + 5);
  skippable.writeUInt32LE(0x184d2a53, 0);
  skippable.writeUInt32LE(5, 4);
  const stream = Buffer.concat([lz4Cli(a, ["-BD"]), skippable, lz4Cli(b, [])]);
  const expected = execFileSync("lz4", ["-dc", "-q"], { input: stream });
  const out = decodeOne(new Lz4Frames(), stream);
  assert.ok(out.equals(Buffer.concat([a, b])) && out.equals(expected));
});

test("a run's outputs stay whole side by side until the next run begins; past its bound a decode is refused", () => {
  const frames = new Lz4Frames();
  const inputs = Array.from({ length: 12 }, (_, i) => records(2000 + i * 300, i));
  const compressed = inputs.map((d, i) => lz4Cli(d, i % 2 === 0 ? ["-B4"] : ["-B5", "-BD"]));
  // Far more than the memory first holds: it grows once, at the start of the run.
  frames.begin(compressed.reduce((n, c) => n + lz4Bound(c), 0));
  const outputs = compressed.map((c) => frames.decode(c));
  outputs.forEach((o, i) => assert.ok(o.equals(inputs[i] as Buffer), `output ${i}`));
  frames.begin(lz4Bound(compressed[0] as Buffer));
  assert.ok(frames.decode(compressed[0] as Buffer).equals(inputs[0] as Buffer));
  assert.throws(() => frames.decode(compressed[11] as Buffer), /past the bound its run began with/);
});

test("a malformed frame throws kafka_batch_malformed wherever it is cut or broken, and never hangs", () => {
  const frame = lz4Cli(records(400, 5), ["-B4", "-BD", "-BX"]);
  const frames = new Lz4Frames();
  const refused = (bytes: Buffer, what: string) =>
    assert.throws(
      () => decodeOne(frames, bytes),
      (err: unknown) => err instanceof ArchiverError && err.code === "kafka_batch_malformed" && !err.retryable,
      what,
    );
  for (let cut = 1; cut < frame.length; cut += Math.max(1, Math.floor(frame.length / 400))) {
    refused(frame.subarray(0, cut), `cut at ${cut}`);
  }
  const bad = (at: number, value: number) => {
    const b = Buffer.from(frame);
    b[at] = value;
    return b;
  };
  refused(bad(0, 0x05), "magic");
  refused(bad(4, 0x80 | (frame[4] as number)), "version");
  refused(bad(4, 0x01 | (frame[4] as number)), "dictionary");
  refused(bad(5, 0x30), "block size id 3");
  // Every byte of the first block's sequences flipped in turn: each either decodes (to something) or is refused.
  for (let at = 11; at < Math.min(frame.length, 600); at++) {
    try {
      decodeOne(frames, bad(at, (frame[at] as number) ^ 0xff));
    } catch (err) {
      assert.ok(err instanceof ArchiverError && err.code === "kafka_batch_malformed", `byte ${at}: ${String(err)}`);
    }
  }
});

test("memory a large run grew is given back at the next run that fits in less", () => {
  const frames = new Lz4Frames();
  const big = lz4Cli(Buffer.alloc(48 << 20, 0x61), ["-B4"]);
  frames.begin(lz4Bound(big));
  const out = frames.decode(big);
  assert.ok(out.length === 48 << 20 && out.every((b) => b === 0x61));
  const small = lz4Cli(records(100), []);
  frames.begin(lz4Bound(small));
  // The large run's view was of the memory dropped: still whole, and nothing decodes into it any more.
  const again = frames.decode(small);
  assert.ok(again.equals(records(100)) && again.buffer !== out.buffer && again.buffer.byteLength < 32 << 20);
  assert.ok(out.buffer.byteLength > 48 << 20 && out[0] === 0x61);
});
