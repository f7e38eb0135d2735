// LZ4 frames, the format of Kafka's lz4 batches (magic, descriptor, blocks, end mark), decoded by the WebAssembly
// block decoder of wasm/lz4.wat into a memory laid out as wasm/memory.ts maps it, and read where it was decoded. On
// the bench's batches (1,448 records of 680 bytes, 64 KiB blocks) lz4-napi's decompressFrameSync ran at 0.4 GB/s,
// its output built afresh and faulted in each batch; this runs at 2.1-2.8 GB/s. The batch's CRC-32C, checked before,
// already covers every compressed byte, so the frame's optional checksums are skipped; every length and offset is
// still bounds-checked, so a malformed frame throws and never reads or writes out of place.

import { ArchiverError } from "../errors.ts";
import { compiledOnce, Wasm, WASM_PAGE, type WasmMemory } from "../wasm/loader.ts";
import { LZ4_MODULE } from "../wasm/lz4-module.ts";
import { DECODED_AT, registerDecoderMemory } from "../wasm/memory.ts";

const FRAME_MAGIC = 0x184d2204;
/** Skippable frames: magic 0x184D2A50 to 0x184D2A5F, then a u32 length. */
const SKIPPABLE_MASK = 0xfffffff0;
const SKIPPABLE = 0x184d2a50;
/** The decoder may store up to this many bytes past its output (see lz4.wat). */
const SLACK = 16;

interface Lz4Exports {
  readonly memory: WasmMemory;
  block(ip: number, end: number, op: number, limit: number, lowest: number): number;
}

function corrupt(message: string): ArchiverError {
  // Permanent: a fetch of the same offset returns the same bytes.
  return new ArchiverError("kafka_batch_malformed", `kafka record batch malformed: lz4 ${message}`, "permanent");
}

function readU32(b: Uint8Array, p: number): number {
  return (
    ((b[p] as number) | ((b[p + 1] as number) << 8) | ((b[p + 2] as number) << 16) | ((b[p + 3] as number) << 24)) >>> 0
  );
}

/** A frame's descriptor, read at `ip` (just past the magic). */
interface Descriptor {
  readonly blockMax: number;
  readonly independent: boolean;
  readonly blockChecksum: number;
  readonly contentChecksum: number;
  /** Where the first block header is. */
  readonly blocksAt: number;
}

function descriptor(src: Uint8Array, ip: number): Descriptor {
  if (src.length - ip < 3) throw corrupt("frame descriptor cut short");
  const flg = src[ip] as number;
  const bd = src[ip + 1] as number;
  if (flg >> 6 !== 1) throw corrupt(`frame version ${flg >> 6}`);
  if ((flg & 0x02) !== 0 || (bd & 0x8f) !== 0) throw corrupt("reserved descriptor bits set");
  if ((flg & 0x01) !== 0) throw corrupt("frame needs a dictionary, which Kafka never uses");
  const id = (bd >> 4) & 7;
  if (id < 4) throw corrupt(`block size id ${id}`);
  // FLG, BD, an 8-byte content size if flagged, then the header checksum byte.
  const blocksAt = ip + 2 + ((flg & 0x08) !== 0 ? 8 : 0) + 1;
  if (blocksAt > src.length) throw corrupt("frame descriptor cut short");
  return {
    blockMax: 1 << (2 * id + 8),
    independent: (flg & 0x20) !== 0,
    blockChecksum: (flg & 0x10) !== 0 ? 4 : 0,
    contentChecksum: (flg & 0x04) !== 0 ? 4 : 0,
    blocksAt,
  };
}

/** A frame's extent: its descriptor, its blocks, and where it ends (past its checksum). */
interface Frame {
  readonly d: Descriptor;
  readonly blocks: number;
  /** Just past the end mark. */
  readonly blocksEnd: number;
  readonly end: number;
}

/** The frames of `src`, skippable ones left out, each walked block header by block header. */
function framesOf(src: Uint8Array): Frame[] {
  const frames: Frame[] = [];
  let ip = 0;
  while (ip < src.length) {
    if (src.length - ip < 4) throw corrupt(`${src.length - ip} bytes after a frame`);
    const magic = readU32(src, ip);
    if ((magic & SKIPPABLE_MASK) >>> 0 === SKIPPABLE) {
      if (src.length - ip < 8) throw corrupt("skippable frame cut short");
      ip += 8 + readU32(src, ip + 4);
      if (ip > src.length) throw corrupt("skippable frame runs past the batch");
      continue;
    }
    if (magic !== FRAME_MAGIC) throw corrupt(`frame magic 0x${magic.toString(16)}`);
    const d = descriptor(src, ip + 4);
    let blocks = 0;
    let end = d.blocksAt;
    for (;;) {
      if (src.length - end < 4) throw corrupt("block header cut short");
      const header = readU32(src, end);
      end += 4;
      if (header === 0) break;
      const size = header & 0x7fffffff;
      if (size > d.blockMax || src.length - end < size + d.blockChecksum) throw corrupt(`block of ${size} bytes`);
      end += size + d.blockChecksum;
      blocks++;
    }
    if (src.length - end < d.contentChecksum) throw corrupt("content checksum cut short");
    frames.push({ d, blocks, blocksEnd: end, end: end + d.contentChecksum });
    ip = end + d.contentChecksum;
  }
  return frames;
}

/**
 * The memory decoding `src` may take: each frame's compressed blocks and the room for all their output, with slack.
 * A sum of these is what Lz4Frames.begin needs for a run of batches.
 */
export function lz4Bound(src: Uint8Array): number {
  let frames: Frame[];
  try {
    frames = framesOf(src);
  } catch {
    // Read before the batch's CRC-32C is checked: a malformed frame is refused where it is decoded, in order.
    return 0;
  }
  let bound = 0;
  for (const f of frames) bound += f.blocks * f.d.blockMax + (f.blocksEnd - f.d.blocksAt) + 2 * SLACK;
  return bound;
}

const lz4Module = compiledOnce(LZ4_MODULE);

function instantiate(): Lz4Exports {
  return new Wasm.Instance(lz4Module()).exports as Lz4Exports;
}

/**
 * The memory a decoder keeps between runs. The bench's blocks took 7-9 MB; a fetch of a few MiB of highly
 * compressible records can take a hundred, which a lane would otherwise hold for good.
 */
const KEEP_BYTES = 32 << 20;

/**
 * Decodes lz4 frames in the WebAssembly memory and hands out views of it, so the output is never copied. Views stay
 * valid until the next `begin`, which sizes the memory for a run of decodes up front: growing it detaches every view.
 */
export class Lz4Frames {
  #wasm: Lz4Exports;
  #memory: Uint8Array;
  /** Where the next output goes. */
  #used = DECODED_AT;
  /** Where the room the run began with ends: a decode past it would need the memory grown, voiding views still read. */
  #bound = DECODED_AT;

  constructor() {
    this.#wasm = instantiate();
    this.#memory = new Uint8Array(this.#wasm.memory.buffer);
  }

  /** Starts a run of decodes that together take at most `bound` bytes (lz4Bound); voids every view handed out. */
  begin(bound: number): void {
    const end = DECODED_AT + bound;
    this.#used = DECODED_AT;
    this.#bound = end;
    // A memory never shrinks: one grown past KEEP_BYTES by a large run is dropped at the next run that fits in less.
    if (this.#wasm.memory.buffer.byteLength > KEEP_BYTES && end <= KEEP_BYTES) this.#wasm = instantiate();
    const memory = this.#wasm.memory;
    if (memory.buffer.byteLength < end) memory.grow(Math.ceil((end - memory.buffer.byteLength) / WASM_PAGE));
    // Here, as the only views handed out are of a run's buffer.
    registerDecoderMemory(memory);
    this.#memory = new Uint8Array(memory.buffer);
  }

  /** Decodes every frame of `src` (skippable ones skipped), end to end; returns a view of the output. */
  decode(src: Uint8Array): Buffer {
    const start = this.#used;
    for (const f of framesOf(src)) this.#frame(src, f);
    return Buffer.from(this.#memory.buffer, start, this.#used - start);
  }

  /**
   * One frame: its compressed blocks placed just past the output so far, then decoded block by block to where they
   * lay, a linked block's matches reaching into the frame's earlier output.
   */
  #frame(src: Uint8Array, f: Frame): void {
    const memory = this.#memory;
    const outAt = this.#used;
    const inAt = outAt + f.blocks * f.d.blockMax + SLACK;
    if (inAt + (f.blocksEnd - f.d.blocksAt) + SLACK > this.#bound) {
      throw new Error("lz4 decode past the bound its run began with (Lz4Frames.begin)");
    }
    memory.set(src.subarray(f.d.blocksAt, f.blocksEnd), inAt);
    let p = inAt;
    let op = outAt;
    for (let b = 0; b < f.blocks; b++) {
      const header = readU32(memory, p);
      const size = header & 0x7fffffff;
      p += 4;
      if (header >>> 31 === 1) {
        memory.copyWithin(op, p, p + size);
        op += size;
      } else {
        op = this.#wasm.block(p, p + size, op, op + f.d.blockMax, f.d.independent ? op : outAt);
        if (op < 0) throw corrupt("block does not decode");
      }
      p += size + f.d.blockChecksum;
    }
    this.#used = op;
  }
}
