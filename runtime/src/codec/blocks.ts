// Read-back of a staged file, a flush at a time: the manifest lists each block's length, and each block is one
// complete frame decompressed on its own, so a file the store refused can be dead-lettered block by block.

import { open } from "node:fs/promises";
import { ArchiverError } from "../errors.ts";
import type { Codec } from "./index.ts";

/**
 * Yields each block of `path` decompressed, in file order. Rejects with ArchiverError `codec_corrupt` (permanent) when
 * the file's size is not the sum of `blockLengths` or a block does not decode; the file then cannot be read back.
 */
export async function* readBlocks(codec: Codec, path: string, blockLengths: readonly number[]): AsyncGenerator<Buffer> {
  const file = await open(path, "r");
  try {
    const expected = blockLengths.reduce((sum, n) => sum + n, 0);
    const { size } = await file.stat();
    if (size !== expected) throw unreadable(path, `is ${size} bytes, its manifest's blocks sum to ${expected}`);
    let position = 0;
    for (const [i, length] of blockLengths.entries()) {
      const block = Buffer.allocUnsafe(length);
      const { bytesRead } = await file.read(block, 0, length, position);
      if (bytesRead !== length) throw unreadable(path, `ended inside block ${i}`);
      position += length;
      yield await codec.decompress(block);
    }
  } finally {
    await file.close();
  }
}

const unreadable = (path: string, why: string) =>
  new ArchiverError("codec_corrupt", `staged file ${path} cannot be read back: it ${why}`, "permanent");
