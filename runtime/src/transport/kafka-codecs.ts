// kafkajs decodes only gzip batches by itself; producers mostly send lz4, zstd or snappy. These decoders (and
// encoders, for the DLQ producer) plug the project's native codecs into kafkajs's codec table.
import { promisify } from "node:util";
import { zstdCompress, zstdDecompress } from "node:zlib";
import kafkajs from "kafkajs";
import { compressFrame, decompressFrame } from "lz4-napi";
import { compress as snappyCompress, uncompress as snappyUncompress } from "snappy";

const zstdC = promisify(zstdCompress);
const zstdD = promisify(zstdDecompress);

// snappy-java (the Java producer) frames its output: a magic header, then [u32 big-endian length][raw block]...
const XERIAL_MAGIC = Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00]);
const XERIAL_HEADER = 16;

export async function snappyDecode(buf: Buffer): Promise<Buffer> {
  if (buf.length < XERIAL_HEADER || !buf.subarray(0, 8).equals(XERIAL_MAGIC)) {
    return (await snappyUncompress(buf)) as Buffer;
  }
  const blocks: Buffer[] = [];
  for (let pos = XERIAL_HEADER; pos < buf.length;) {
    const len = buf.readUInt32BE(pos);
    pos += 4;
    blocks.push((await snappyUncompress(buf.subarray(pos, pos + len))) as Buffer);
    pos += len;
  }
  return Buffer.concat(blocks);
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
