// zstd and gzip through Node's built-in zlib. Its async one-shot calls run on libuv's thread pool, so compression is
// off the event loop and two flushes compress on two cores at once.

import { promisify } from "node:util";
import zlib from "node:zlib";
import type { Codec } from "./index.ts";
import { corrupt, refused } from "./refusal.ts";

const zstdCompress = promisify(zlib.zstdCompress);
const zstdDecompress = promisify(zlib.zstdDecompress);
const gzip = promisify(zlib.gzip);
const gunzip = promisify(zlib.gunzip);

/**
 * zlib's one-shot calls return a view into their 64 KiB output chunk, so a frame of a few hundred bytes (a flush of
 * a few records, as with thousands of destinations) would hold 64 KiB until its append lands: thousands of flushes
 * in flight held hundreds of megabytes. A frame well under its chunk is copied into memory of its own.
 */
export function owned(frame: Buffer): Buffer {
  if (frame.byteLength * 2 > frame.buffer.byteLength) return frame;
  const copy = Buffer.allocUnsafeSlow(frame.byteLength);
  frame.copy(copy);
  return copy;
}

export class ZstdCodec implements Codec {
  readonly name = "zstd";
  readonly suffix = ".zst";
  readonly level: number;
  // The checksum lets `zstd -d` and read-back detect a corrupt file; the content size goes in the frame header.
  readonly #params: Record<number, number>;

  constructor(level: number) {
    this.level = level;
    this.#params = { [zlib.constants.ZSTD_c_compressionLevel]: level, [zlib.constants.ZSTD_c_checksumFlag]: 1 };
  }

  async compress(input: Buffer): Promise<Buffer> {
    try {
      // The pledged size also lets zstd size its tables to the flush rather than to the level's full window.
      return owned(await zstdCompress(input, { pledgedSrcSize: input.length, params: this.#params }));
    } catch (err) {
      throw refused(this.name, err);
    }
  }

  async decompress(block: Buffer): Promise<Buffer> {
    try {
      return await zstdDecompress(block);
    } catch (err) {
      throw corrupt(this.name, err);
    }
  }
}

export class GzipCodec implements Codec {
  readonly name = "gzip";
  readonly suffix = ".gz";
  readonly level: number;

  constructor(level: number) {
    this.level = level;
  }

  async compress(input: Buffer): Promise<Buffer> {
    try {
      return owned(await gzip(input, { level: this.level }));
    } catch (err) {
      throw refused(this.name, err);
    }
  }

  async decompress(block: Buffer): Promise<Buffer> {
    try {
      return await gunzip(block);
    } catch (err) {
      throw corrupt(this.name, err);
    }
  }
}
