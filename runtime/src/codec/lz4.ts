// LZ4 frame format through lz4-napi's frame API, which runs on libuv's thread pool. Its plain `compress` writes a raw
// block that no lz4 tool reads, so only the frame calls are used.

import { compressFrame, decompressFrame } from "lz4-napi";
import type { Codec } from "./index.ts";
import { corrupt, refused } from "./refusal.ts";

// The content checksum (xxHash32 of the flush) is what lets `lz4 -d` and read-back detect a corrupt file.
const FRAME_OPTIONS = { contentChecksum: true };

export class Lz4Codec implements Codec {
  readonly name = "lz4";
  readonly suffix = ".lz4";
  readonly level = undefined;

  async compress(input: Buffer): Promise<Buffer> {
    try {
      return await compressFrame(input, FRAME_OPTIONS);
    } catch (err) {
      throw refused(this.name, err);
    }
  }

  async decompress(block: Buffer): Promise<Buffer> {
    try {
      return await decompressFrame(block);
    } catch (err) {
      throw corrupt(this.name, err);
    }
  }
}
