// Kafka's record batch format (magic 2), read where it is routed: on a route lane, synchronously, through
// KAFKA_BATCHES (the EncodedFormat the lanes and the pipeline are given), so the event loop never decodes a record. Layout (big-endian): i64 base offset, i32 length (of what follows), i32 leader epoch, i8 magic,
// u32 CRC-32C (of attributes to the end), i16 attributes, i32 last offset delta, i64 first and max timestamps,
// i64 producer id, i16 producer epoch, i32 base sequence, i32 record count, then the records (compressed as a whole
// per attributes bits 0-2). A record: varint length, i8 attributes, varlong timestamp delta, varint offset delta,
// varint key length and key, varint value length (-1: null) and value, varint header count and headers.

import zlib from "node:zlib";
import type * as Crc32 from "@node-rs/crc32";
import type * as Snappy from "snappy";
import { ArchiverError } from "../errors.ts";
import { lazyNative } from "../native.ts";
import type { AbortedTransaction, EncodedFormat, RecordVisitor } from "../records.ts";
import { lz4Bound, Lz4Frames } from "./lz4-frame.ts";

// Hardware CRC-32C (SSE 4.2, ARMv8 CRC): 15 GB/s here, where @platformatic/wasm-utils' table-driven WebAssembly ran
// at 1.8 GB/s, 0.14 s of the lanes on the 2M-record bench. Loaded on a batch's first read (lazyNative), as is snappy:
// the event loop imports this module for splitBatches alone.
const crc32 = lazyNative<typeof Crc32>("@node-rs/crc32");
const snappyNative = lazyNative<typeof Snappy>("snappy");
const uncompressSync = (block: Buffer): Buffer => snappyNative().uncompressSync(block) as Buffer;

// snappy-java (the Java producer) frames its output: a magic header, then [u32 big-endian length][raw block]...
const XERIAL_MAGIC = Buffer.from([0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00]);
const XERIAL_HEADER = 16;

/** The raw snappy blocks of a snappy-java framed buffer, or undefined when `buf` is one plain snappy block. */
export function xerialBlocks(buf: Buffer): Buffer[] | undefined {
  if (buf.length < XERIAL_HEADER || !buf.subarray(0, 8).equals(XERIAL_MAGIC)) return undefined;
  const blocks: Buffer[] = [];
  for (let pos = XERIAL_HEADER; pos < buf.length;) {
    const len = buf.readUInt32BE(pos);
    pos += 4;
    blocks.push(buf.subarray(pos, pos + len));
    pos += len;
  }
  return blocks;
}

const BATCH_HEAD = 61;
const LENGTH_AT = 8;
const MAGIC_AT = 16;
const CRC_AT = 17;
const ATTRIBUTES_AT = 21;
const LAST_DELTA_AT = 23;
const PRODUCER_AT = 43;
const COUNT_AT = 57;
const LOG_OVERHEAD = 12;
const COMPRESSION = 0x07;
const LZ4 = 3;
const TRANSACTIONAL = 0x10;
const CONTROL = 0x20;
const ABORT_MARKER = 0;

/** The length of the whole batch at `p`, or 0 where none is: too few bytes left, or one the broker cut. */
function wholeBatchAt(view: DataView, p: number): number {
  const left = view.byteLength - p;
  if (left < BATCH_HEAD) return 0;
  const size = LOG_OVERHEAD + view.getInt32(p + LENGTH_AT);
  return size < BATCH_HEAD || left < size ? 0 : size;
}

/** Whole batches at the start of `bytes`: the broker may cut the last one at the fetch size. */
export function wholeBatches(bytes: Uint8Array): { readonly end: number; readonly lastOffset: number } {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let p = 0;
  let lastOffset = -1;
  for (let size; (size = wholeBatchAt(view, p)) > 0; p += size) {
    lastOffset = Number(view.getBigInt64(p)) + view.getInt32(p + LAST_DELTA_AT);
  }
  return { end: p, lastOffset };
}

/**
 * `bytes` (whole batches) cut at batch boundaries into at most `pieces` runs of about equal records, none under
 * `minRecords` but the last: a fetch's batches of one partition, routed on several lanes at once.
 */
export function splitBatches(bytes: Uint8Array, pieces: number, minRecords: number): Uint8Array[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const countAt = (p: number) => Math.max(0, view.getInt32(p + COUNT_AT));
  let total = 0;
  for (let p = 0, size; (size = wholeBatchAt(view, p)) > 0; p += size) total += countAt(p);
  const target = Math.max(minRecords, Math.ceil(total / pieces));
  const out: Uint8Array[] = [];
  let start = 0;
  let records = 0;
  for (let p = 0, size; (size = wholeBatchAt(view, p)) > 0;) {
    records += countAt(p);
    p += size;
    if (records >= target && p < bytes.length && out.length < pieces - 1) {
      out.push(bytes.subarray(start, p));
      start = p;
      records = 0;
    }
  }
  out.push(bytes.subarray(start));
  return out;
}

function malformed(message: string): ArchiverError {
  // Permanent: a fetch of the same offset returns the same bytes, so retrying cannot clear it.
  return new ArchiverError("kafka_batch_malformed", `kafka record batch malformed: ${message}`, "permanent");
}

function inflate(codec: number, data: Buffer, lz4: Lz4Frames): Buffer {
  switch (codec) {
    case 1:
      return zlib.gunzipSync(data);
    case 2: {
      const blocks = xerialBlocks(data);
      if (blocks === undefined) return uncompressSync(data);
      return Buffer.concat(blocks.map((b) => uncompressSync(b)));
    }
    case LZ4:
      return lz4.decode(data);
    case 4:
      return zlib.zstdDecompressSync(data);
    default:
      throw malformed(`unknown compression ${codec}`);
  }
}

/** Reads varints of one record region; throws on a read past its end. */
class Cursor {
  p = 0;
  readonly b: Uint8Array;

  constructor(b: Uint8Array) {
    this.b = b;
  }

  varint(): number {
    // Up to four bytes (28 bits: every length and delta of a batch) in integer arithmetic, inline: the general loop
    // below, now for timestamps and a batch's last bytes alone, was 0.6 of the lanes' 2.3 s decoding the bench.
    const b = this.b;
    const p = this.p;
    if (p + 4 <= b.length) {
      let byte = b[p] as number;
      let value = byte & 0x7f;
      let n = 1;
      while (byte >= 0x80 && n < 4) {
        byte = b[p + n] as number;
        value |= (byte & 0x7f) << (7 * n++);
      }
      if (byte < 0x80) {
        this.p = p + n;
        return (value >>> 1) ^ -(value & 1);
      }
    }
    return this.#varlong();
  }

  #varlong(): number {
    let value = 0;
    let shift = 0;
    for (;;) {
      if (this.p >= this.b.length) throw malformed("record runs past its batch");
      const byte = this.b[this.p++] as number;
      // Multiplication, not <<, keeps 35..63-bit varlongs (timestamps) exact enough to skip.
      value += (byte & 0x7f) * 2 ** shift;
      if ((byte & 0x80) === 0) break;
      shift += 7;
      if (shift > 63) throw malformed("varint longer than 10 bytes");
    }
    // Zigzag: even values are non-negative.
    return value % 2 === 0 ? value / 2 : -(value + 1) / 2;
  }

  skip(n: number): void {
    if (n < 0 || this.p + n > this.b.length) throw malformed("record field runs past its batch");
    this.p += n;
  }
}

/**
 * Calls `visit` for each record at or past `fromOffset`, in order, skipping control batches and the records of
 * aborted transactions, with its value at records[start, end) (`records` the batch's, decompressed); a null value is
 * visited as empty. Returns the records visited. Throws a permanent ArchiverError on a batch that fails its CRC-32C
 * or does not parse. lz4 batches are decoded in `lz4`'s memory: what `visit` is given of them lasts until the next
 * call with the same `lz4`.
 */
export function forEachRecord(
  bytes: Uint8Array,
  fromOffset: number,
  visit: RecordVisitor,
  aborted: readonly AbortedTransaction[] = [],
  lz4: Lz4Frames = new Lz4Frames(),
): number {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let lz4Room = 0;
  for (let p = 0, size; (size = wholeBatchAt(view, p)) > 0; p += size) {
    if ((view.getInt16(p + ATTRIBUTES_AT) & COMPRESSION) === LZ4)
      lz4Room += lz4Bound(bytes.subarray(p + BATCH_HEAD, p + size));
  }
  lz4.begin(lz4Room);
  const pending = [...aborted].sort((a, b) => a.firstOffset - b.firstOffset);
  const abortedNow = new Set<number>();
  let visited = 0;
  let p = 0;
  while (p < bytes.length) {
    if (bytes.length - p < BATCH_HEAD) throw malformed(`${bytes.length - p} trailing bytes`);
    const size = LOG_OVERHEAD + view.getInt32(p + LENGTH_AT);
    if (size < BATCH_HEAD || p + size > bytes.length) throw malformed(`batch length ${size} at byte ${p}`);
    const magic = view.getInt8(p + MAGIC_AT);
    if (magic !== 2) throw malformed(`magic ${magic} (only the v2 format, Kafka 0.11 and later, is read)`);
    const base = Number(view.getBigInt64(p));
    const crc = view.getUint32(p + CRC_AT);
    const actual = crc32().crc32c(bytes.subarray(p + ATTRIBUTES_AT, p + size));
    if (crc !== actual) throw malformed(`CRC-32C mismatch in the batch at offset ${base}`);
    const attributes = view.getInt16(p + ATTRIBUTES_AT);
    const last = base + view.getInt32(p + LAST_DELTA_AT);
    const producer = Number(view.getBigInt64(p + PRODUCER_AT));
    const count = view.getInt32(p + COUNT_AT);
    const body = bytes.subarray(p + BATCH_HEAD, p + size);
    p += size;
    const transactional = (attributes & TRANSACTIONAL) !== 0;
    // Markers too: a fetch from past an aborted transaction's records lists it, and its marker must end it.
    while (transactional && pending.length > 0 && (pending[0] as AbortedTransaction).firstOffset <= last) {
      abortedNow.add((pending.shift() as AbortedTransaction).producerId);
    }
    if ((attributes & CONTROL) !== 0) {
      // A marker ends its transaction: the producer's later batches belong to a new one.
      if (transactional && controlType(body) === ABORT_MARKER) abortedNow.delete(producer);
      continue;
    }
    if (transactional && abortedNow.has(producer)) continue;
    if (last < fromOffset) continue;
    const codec = attributes & COMPRESSION;
    const raw = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
    const records = codec === 0 ? raw : inflate(codec, raw, lz4);
    const c = new Cursor(records);
    for (let i = 0; i < count; i++) {
      const length = c.varint();
      const end = c.p + length;
      if (length < 0 || end > records.length) throw malformed(`record length ${length} in the batch at ${base}`);
      c.skip(1);
      c.varint();
      const offset = base + c.varint();
      // Key, then value: a length of -1 is null; a null value reads as empty.
      c.skip(Math.max(0, c.varint()));
      const valueLength = c.varint();
      const valueAt = c.p;
      c.skip(Math.max(0, valueLength));
      const valueEnd = c.p;
      if (c.p > end) throw malformed(`record value runs past its record in the batch at ${base}`);
      c.p = end;
      if (offset >= fromOffset) {
        visit(records, valueAt, valueEnd, offset);
        visited++;
      }
    }
  }
  return visited;
}

/** A control record's type, from its key (i16 version, i16 type): 0 abort, 1 commit. */
function controlType(body: Uint8Array): number {
  const c = new Cursor(body);
  c.varint();
  c.skip(1);
  c.varint();
  c.varint();
  const keyLength = c.varint();
  if (keyLength < 4) throw malformed("control record without its type");
  return new DataView(body.buffer, body.byteOffset + c.p + 2, 2).getInt16(0);
}

/** This thread's decoder for KAFKA_BATCHES: a lane keeps one, its memory reused batch after batch. */
let decoder: Lz4Frames | undefined;

/** Kafka's record batches as an EncodedFormat: lz4 batches decoded in this thread's one decoder memory. */
export const KAFKA_BATCHES: EncodedFormat = {
  cut: splitBatches,
  forEach: (bytes, fromOffset, visit, aborted) =>
    forEachRecord(bytes, fromOffset, visit, aborted, (decoder ??= new Lz4Frames())),
};
