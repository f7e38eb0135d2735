// kafkajs decodes only gzip batches by itself; producers mostly send lz4, zstd or snappy. These decoders (and
// encoders, for the DLQ producer) plug the project's native codecs into kafkajs's codec table.
import { promisify } from "node:util";
import { zstdCompress, zstdDecompress } from "node:zlib";
import kafkajs from "kafkajs";
import { compressFrame, decompressFrame } from "lz4-napi";
import { compress as snappyCompress, uncompress as snappyUncompress } from "snappy";
import { xerialBlocks } from "./record-batch.ts";

const zstdC = promisify(zstdCompress);
const zstdD = promisify(zstdDecompress);

export async function snappyDecode(buf: Buffer): Promise<Buffer> {
  const blocks = xerialBlocks(buf);
  if (blocks === undefined) return (await snappyUncompress(buf)) as Buffer;
  return Buffer.concat(await Promise.all(blocks.map(async (b) => (await snappyUncompress(b)) as Buffer)));
}

type Encoder = { buffer: Buffer };

// kafkajs is CommonJS and sets these after load, so they are not named ESM exports.
const { CompressionCodecs, CompressionTypes } = kafkajs;
let registered = false;

export function registerKafkaCodecs(): void {
  if (registered) return;
  registered = true;
  CompressionCodecs[CompressionTypes.LZ4] = () => ({
    compress: (e: Encoder) => compressFrame(e.buffer),
    decompress: (b: Buffer) => decompressFrame(b),
  });
  CompressionCodecs[CompressionTypes.ZSTD] = () => ({
    compress: (e: Encoder) => zstdC(e.buffer),
    decompress: (b: Buffer) => zstdD(b),
  });
  CompressionCodecs[CompressionTypes.Snappy] = () => ({
    compress: (e: Encoder) => snappyCompress(e.buffer),
    decompress: (b: Buffer) => snappyDecode(b),
  });
}
