import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { ArchiverError } from "../../src/errors.ts";
import { readBlocks } from "../../src/codec/blocks.ts";
import { CODEC_NAMES, createCodec, type Codec } from "../../src/codec/index.ts";

const dir = mkdtempSync(join(tmpdir(), "codec-blocks-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const FLUSHES = [
  Buffer.from('{"a":1}\n{"a":2}\n'),
  Buffer.from([0x00, 0xff, 0x0a, 0x80]),
  Buffer.from("x\n".repeat(100_000)),
  Buffer.from("last\n"),
];

async function stage(codec: Codec, name: string): Promise<{ path: string; lengths: number[]; file: Buffer }> {
  const blocks = [];
  for (const f of FLUSHES) blocks.push(await codec.compress(f));
  const path = join(dir, `${name}${codec.suffix}`);
  const file = Buffer.concat(blocks);
  writeFileSync(path, file);
  return { path, lengths: blocks.map((b) => b.length), file };
}

async function collect(blocks: AsyncIterable<Buffer>): Promise<Buffer[]> {
  const out: Buffer[] = [];
  for await (const b of blocks) out.push(b);
  return out;
}

const isCorrupt = (err: unknown) => err instanceof ArchiverError && err.code === "codec_corrupt" && !err.retryable;

describe("readBlocks", () => {
  for (const name of CODEC_NAMES) {
    it(`reads a ${name} file back a flush at a time`, async () => {
      const codec = createCodec(name);
      const { path, lengths } = await stage(codec, "whole");
      assert.deepEqual(await collect(readBlocks(codec, path, lengths)), FLUSHES);
    });
  }

  it("refuses a file whose size is not its manifest's, before yielding anything", async () => {
    const codec = createCodec("zstd");
    const { path, lengths, file } = await stage(codec, "short");
    writeFileSync(path, file.subarray(0, file.length - 1));
    const seen: Buffer[] = [];
    await assert.rejects(async () => {
      for await (const b of readBlocks(codec, path, lengths)) seen.push(b);
    }, isCorrupt);
    assert.equal(seen.length, 0);
  });

  it("yields the blocks before a corrupt one, then refuses", async () => {
    const codec = createCodec("gzip");
    const { path, lengths, file } = await stage(codec, "corrupt");
    const at = (lengths[0] ?? 0) + (lengths[1] ?? 0) + 20; // inside the third block
    file[at] = (file[at] ?? 0) ^ 0x01;
    writeFileSync(path, file);
    const seen: Buffer[] = [];
    await assert.rejects(async () => {
      for await (const b of readBlocks(codec, path, lengths)) seen.push(b);
    }, isCorrupt);
    assert.deepEqual(seen, FLUSHES.slice(0, 2));
  });

  it("refuses lengths that split the file anywhere but at its flushes", async () => {
    const codec = createCodec("lz4");
    const { path, lengths } = await stage(codec, "split");
    const [a = 0, b = 0, ...rest] = lengths;
    await assert.rejects(collect(readBlocks(codec, path, [a + 1, b - 1, ...rest])), isCorrupt);
  });
});
