// Hot buffers: a buffer flushes at flush_bytes plus one record, flush_records, or flush_age_secs. All of them together
// hold at most HOT_BUFFER_FLUSHES x flush_bytes (128 MiB by default) and never more than the shared cap (a quarter of
// the memory limit), counted as the memory they hold (footprint); past that the largest flush first, down to three
// quarters of it. They are bounded by bytes, not by count: 64 buffers, each evicted by a record for a 65th
// destination, flushed a record or two a frame once destinations outnumbered them thousands to one (10,000
// destinations: 7k records/s). A count remains, at one buffer per MIN_BUFFER_SHARE of the bound, so what each buffer
// costs beside its records stays a small part of the memory; past it, and past the bound in bytes, buffers go to the
// spill (spill.ts) and stay as cold buffers, which hold no memory but where their records lie, until their next
// record, their age, the drain or a revoke.
// A buffer allocates nothing until a record arrives, and then little more than it holds.
// Large groups of records are not copied where they are buffered: a buffer holds views of the route replies they
// arrived in (pieces), and a flush hands those to its lane, which reads them where they lie. The event loop's two
// copies of every record (into a buffer, then into shared memory for the lane) were a third of its time on the bench.
// What is still buffered when a turn ends is copied into the buffer's own block (settle), so no reply stays pinned by a
// buffer that flushes only at its age; a group of a few records is copied there at once (see VIEW_BYTES). Blocks come
// from a pool of shared memory (blocks.ts): a flush hands its block over as it is, and the block goes back to the pool
// once the flush has landed (releaseFlush).
import type { Hold } from "../delivery/hold.ts";
import { codecLanes, copyInto } from "../codec/lanes.ts";
import { appendTo, EMPTY } from "../lists.ts";
import { blocks } from "./blocks.ts";
import { segmentBytes, segmentCount, type Segments, type Spill, type SpilledRecords } from "./spill.ts";

/** The hot buffers together hold at most this many times flush_bytes (and never more than the shared cap). */
export const HOT_BUFFER_FLUSHES = 128;
/**
 * One buffer at most for each this many bytes of the bound: past it the least recently used spills or flushes first.
 * A buffer holding memory costs a block of at least 512 bytes for its index and a power-of-two block for its records
 * beside its heap: with one per 2 KiB, the 100,000-destination row's 32,768 buffers held one to three records each,
 * 63 MiB of records in about 114 MiB of blocks, and it peaked at 567-590 MiB; with one per 4 KiB, at 526 MiB (Zipf: 514
 * rather than 532). Below 16,384 destinations (10,000 uniform ones) nothing changes.
 */
export const MIN_BUFFER_SHARE = 4096;
/**
 * A cold buffer taken back with this many segments, or one taking records straight into the spill, merges its newest
 * ones in the spill (see mergeTail). 100,000 destinations kept about 20 segments each by 2M records and ran the 256 MiB
 * heap out. Read back into memory whole instead, 10,000 uniform destinations copied each one's records again at every
 * 8 segments (10k row: 26.8 s, peak RSS 699 MiB; merged in the spill, 22.8 s and 513 MiB).
 */
const MERGE_SEGMENTS = 8;
/**
 * While the spill's writes are backed up, a buffer merges only at this many segments: a merge's copy is a write that
 * would wait in memory with them, and no intake waits on it. Uniform destinations reach MERGE_SEGMENTS together: on
 * the 10,000-destination row their merges put 329 MiB of chunks on their way to file at once, against the spill's 32
 * MiB cap, and RSS reached 696 MiB under a 512 MiB limit.
 */
const MERGE_SEGMENTS_BACKED_UP = 4 * MERGE_SEGMENTS;
/**
 * A group of records this large or larger is held as a view of its route reply (a piece); a smaller one is copied into
 * the block at once. A view saves a copy only when its buffer flushes in the same turn, which a group of a few records
 * rarely takes a buffer to, and each view was an object that outlived the young generation when buffers held them
 * across a turn: at 10,000 destinations a group is a record, and the views were 313 MB of the 1,293 MB promoted.
 */
export const VIEW_BYTES = 16 * 1024;
/** Room a buffer's ends and offsets first take, in records. */
const FIRST_RECORDS = 16;
/** The index views of a buffer with no index. */
const NO_OFFSETS = new Float64Array(0);
const NO_ENDS = new Uint32Array(0);

/**
 * What the hot buffers may hold together (their footprint), and how many may be open, for the shared cap and
 * flush_bytes: half the cap, as the spill's chunks, flushes in flight and read-backs take blocks of the same pool.
 * Counted in records' bytes at the full cap, a 512 MiB limit's buffers alone took 256 MiB and the process reached the
 * limit.
 */
export function hotBufferBounds(capBytes: number, flushBytes: number): { bytes: number; buffers: number } {
  const bytes = Math.min(Math.floor(capBytes / 2), HOT_BUFFER_FLUSHES * flushBytes);
  return { bytes, buffers: Math.max(64, Math.floor(bytes / MIN_BUFFER_SHARE)) };
}

export type FlushTrigger = "bytes" | "records" | "age" | "evict" | "cap" | "drain" | "revoke";

/** What a buffer hands over when it flushes: payloads, each followed by a newline, and the hold of their offsets. */
export interface FlushBatch {
  readonly destination: string;
  /**
   * The payloads, in pieces read as their concatenation: views of route replies, and a copy of what the buffer held
   * in its block. Each is read until releaseFlush.
   */
  readonly pieces: readonly Buffer[];
  /** The pieces' length together. */
  readonly bytes: number;
  readonly records: number;
  readonly hold: Hold;
  readonly trigger: FlushTrigger;
  /** When the buffer took its first record (epoch milliseconds): the file it lands in rolls by that age. */
  readonly openedAt: number;
  /** The pooled blocks the batch reads (its first piece's, its ends' and offsets'), given back by releaseFlush. */
  readonly blocks: readonly Buffer[];
  /** Byte offset one past each record's newline, so a refused batch can be split back into records. */
  readonly ends: Uint32Array;
  /** Each record's offset in its partition. */
  readonly offsets: Float64Array;
  /** Runs of consecutive records from one partition slot: [slot, records, endByte] triples. */
  readonly runs: readonly number[];
  /**
   * Records spilled ahead of the pieces (see spill.ts), read back by spilledPieces before the batch is written;
   * `bytes` and `records` count them, `ends` and `offsets` do not.
   */
  readonly spilled: Segments | undefined;
  readonly spilledBytes: number;
}

/**
 * Records of one destination and partition slot (a routed group): where they lie in views of a route reply, which
 * hold the reply's other groups too. A group of views of its own cost three typed arrays, each an object that lived
 * until its turn and was promoted with the group: a fifth of what the event loop allocated on the bench.
 */
export interface BufferedRecords {
  readonly count: number;
  /** The records from dataAt, end to end, each followed by a newline. */
  readonly data: Buffer;
  readonly dataAt: number;
  /** From endsAt, per record: one past its newline, counted from dataAt. */
  readonly ends: Uint32Array;
  readonly endsAt: number;
  /** From offsetsAt, per record: its offset in its partition. */
  readonly offsets: Float64Array;
  readonly offsetsAt: number;
}

/** A flush's payloads in one buffer of their own (a copy), for what reads them past releaseFlush (dead letters). */
export function joined(b: FlushBatch): Buffer {
  return Buffer.concat(b.pieces, b.bytes);
}

/** What the spilled records of a batch were read back into, until releaseFlush. */
const readBack = new WeakMap<FlushBatch, Buffer>();

/**
 * The batch's payloads, its spilled records read back first (into a pooled block, within the spill's read cap);
 * the batch's own pieces when it spilled nothing.
 */
export async function flushPieces(b: FlushBatch, spill: Spill | undefined): Promise<readonly Buffer[]> {
  if (b.spilled === undefined || segmentCount(b.spilled) === 0 || spill === undefined) return b.pieces;
  let block = readBack.get(b);
  if (block === undefined) {
    await spill.take(b.spilledBytes);
    block = blocks.alloc(b.spilledBytes);
    readBack.set(b, block);
  }
  const data = block.subarray(0, b.spilledBytes);
  await spill.read(b.spilled, data);
  return [data, ...b.pieces];
}

/** The batch whole and now, its spilled records included: for what splits it back into records (dead letters). */
export function wholeBatch(b: FlushBatch, spill: Spill | undefined): SpilledRecords {
  const own = { data: joined(b), ends: b.ends, offsets: b.offsets, runs: b.runs };
  if (b.spilled === undefined || segmentCount(b.spilled) === 0 || spill === undefined) return own;
  return stitch(spill.readAll(b.spilled), own);
}

/** Records in parts, joined end to end, each part's ends and runs moved past the bytes before it. */
function stitch(parts: readonly SpilledRecords[], last: SpilledRecords): SpilledRecords {
  const all = [...parts, last];
  const records = all.reduce((n, p) => n + p.ends.length, 0);
  const ends = new Uint32Array(records);
  const offsets = new Float64Array(records);
  const runs: number[] = [];
  let at = 0;
  let base = 0;
  for (const p of all) {
    for (let i = 0; i < p.ends.length; i++) ends[at + i] = base + (p.ends[i] ?? 0);
    offsets.set(p.offsets, at);
    for (let i = 0; i < p.runs.length; i += 3)
      runs.push(p.runs[i] ?? 0, p.runs[i + 1] ?? 0, base + (p.runs[i + 2] ?? 0));
    at += p.ends.length;
    base += p.data.length;
  }
  return { data: Buffer.concat(all.map((p) => p.data)), ends, offsets, runs };
}

/** A flush's pieces are read no more: its block and route replies go back for reuse. Call once. */
export function releaseFlush(b: FlushBatch, spill?: Spill): void {
  const back = readBack.get(b);
  if (back !== undefined) {
    blocks.free(back);
    readBack.delete(b);
    spill?.give(b.spilledBytes);
  }
  if (spill !== undefined && b.spilled !== undefined) spill.release(b.spilled);
  for (const block of b.blocks) blocks.free(block);
  for (const piece of b.pieces) {
    if (piece.buffer instanceof SharedArrayBuffer) codecLanes().releaseReply(piece.buffer);
  }
}

/** The records' own views: their bytes, ends and offsets alone. */
export function viewsOf(r: BufferedRecords): { data: Buffer; ends: Uint32Array; offsets: Float64Array } {
  const ends = r.ends.subarray(r.endsAt, r.endsAt + r.count);
  return {
    data: r.data.subarray(r.dataAt, r.dataAt + (r.count > 0 ? (ends[r.count - 1] ?? 0) : 0)),
    ends,
    offsets: r.offsets.subarray(r.offsetsAt, r.offsetsAt + r.count),
  };
}

export interface HotBufferOptions {
  flushBytes: number;
  flushRecords: number;
  flushAgeMs: number;
  /**
   * With a spill, while more than `coldPast` destinations are buffered (the files the writers keep in progress): a
   * buffer still far from flush_bytes at flush_age goes to the spill instead of flushing, and flushes once its oldest
   * record is coldAgeMs old (the roll interval), unless flush_bytes, the drain or a revoke come first. Flushed at its
   * age, each of a skewed workload's 90,000 tail destinations wrote a frame of a few records a minute, each into a file
   * of its own once parked files outnumbered their bound: 273,756 files for 2M records.
   */
  coldAgeMs?: number;
  coldPast?: number;
  /** The shared cap: bytes all buffers together may hold, at most (see hotBufferBounds). */
  capBytes: number;
  /** A new hold for a buffer that receives its first record. */
  openHold: () => Hold;
  onFlush: (batch: FlushBatch) => void;
  /** A hold left with no records once a discard emptied its buffer: the owner releases it. */
  onEmptied: (hold: Hold) => void;
  /** Where a buffer relieved for the bound puts its records (see spill.ts); without it, it flushes them. */
  spill?: Spill;
  /** A buffer's records went to the spill. */
  onSpill?: () => void;
  now?: () => number;
}

class HotBuffer {
  readonly destination: string;
  /** The block: the first blockLength bytes of what the buffer holds. */
  data: Buffer | undefined;
  blockLength = 0;
  /** The rest, in order: views of route replies, each leased (Lanes.leaseReply) until copied or flushed. */
  pieces: Buffer[] = EMPTY;
  length = 0;
  records = 0;
  /**
   * The pooled block its index lies in, room records of each: their offsets (f64), ends and partition slots (u32),
   * read through views of the whole slab (BlockPool.views) at offsetsAt, endsAt and slotsAt.
   */
  index: Buffer | undefined;
  room = 0;
  f64: Float64Array = NO_OFFSETS;
  u32: Uint32Array = NO_ENDS;
  offsetsAt = 0;
  endsAt = 0;
  slotsAt = 0;
  hold: Hold | undefined;
  openedAt = 0;
  /** Records spilled ahead of what the buffer holds in memory, in order (made at the first spill). */
  segments: Segments | undefined;
  spilledBytes = 0;
  spilledRecords = 0;
  /**
   * What it held in memory when it last spilled: taken back, its block starts at half that, so it grows once before
   * its next spill rather than four times from MIN_BLOCK, each growth a pooled block and a copy.
   */
  reached = 0;
  /** All its records are spilled (see HotBufferPool's cold buffers): it is in no recency list. */
  cold = false;
  /** Its neighbours in the recency list while it holds memory. */
  older: HotBuffer | undefined;
  newer: HotBuffer | undefined;

  constructor(destination: string) {
    this.destination = destination;
  }
}

/**
 * The buffers holding memory, least recently used first, linked through the buffers themselves. A Map re-inserted at
 * every touch kept its recency order too, but every few thousand touches rebuilt its table, large enough at 10,000
 * destinations to be allocated straight in the old generation: 75 MB of the 1,293 MB the 10,000-destination row
 * promoted.
 */
class RecencyList {
  oldest: HotBuffer | undefined;
  newest: HotBuffer | undefined;
  size = 0;

  push(b: HotBuffer): void {
    b.older = this.newest;
    b.newer = undefined;
    if (this.newest === undefined) this.oldest = b;
    else this.newest.newer = b;
    this.newest = b;
    this.size++;
  }

  remove(b: HotBuffer): void {
    if (b.older === undefined) this.oldest = b.newer;
    else b.older.newer = b.newer;
    if (b.newer === undefined) this.newest = b.older;
    else b.newer.older = b.older;
    b.older = undefined;
    b.newer = undefined;
    this.size--;
  }

  touch(b: HotBuffer): void {
    if (this.newest === b) return;
    this.remove(b);
    this.push(b);
  }
}

export class HotBufferPool {
  readonly #opts: HotBufferOptions;
  readonly #now: () => number;
  /** Every buffer, by destination. */
  readonly #byDestination = new Map<string, HotBuffer>();
  /** The drain's pass over the buffers while it waits for room (see flushAll). */
  #draining: Generator<HotBuffer> | undefined;
  /**
   * Buffers holding records in memory, in recency order. The others are cold: all their records are spilled, they hold
   * no memory beside their own state, and do not count against the count bound. One is taken back into #buffers by its
   * next record, and flushes at its age, the drain or a revoke as any buffer does.
   */
  readonly #buffers = new RecencyList();
  /** Buffers holding pieces, for settle: visiting all of ten thousand buffers a turn to find them cost more. */
  #unsettled: HotBuffer[] = [];
  /**
   * Destinations in the order their buffers opened, with when, for the age flush: an entry whose buffer has flushed
   * since is skipped. The recency order the map keeps is not age order.
   */
  readonly #aging = new AgeList();
  /** Buffers spilled at flush_age, listed as #aging is: they flush at coldAgeMs. */
  readonly #coldDue = new AgeList();
  #bytes = 0;
  /** The memory the buffers in memory hold (see footprint): what the bound counts. */
  #footprint = 0;
  /** Records buffered, spilled ones too: kept as they change, not summed over ten thousand buffers each second. */
  #records = 0;
  readonly #boundBytes: number;
  readonly #maxBuffers: number;

  constructor(opts: HotBufferOptions) {
    this.#opts = opts;
    this.#now = opts.now ?? Date.now;
    const bounds = hotBufferBounds(opts.capBytes, opts.flushBytes);
    this.#boundBytes = bounds.bytes;
    this.#maxBuffers = bounds.buffers;
  }

  /**
   * Buffers records for `destination`, a routed group at a time; flushes wherever a record takes the buffer to a
   * limit, so a group larger than flush_bytes spans several flushes.
   */
  add(destination: string, slot: number, records: BufferedRecords): void {
    const { ends, endsAt } = records;
    const n = records.count;
    if (this.#addCold(destination, slot, records)) return;
    for (let from = 0; from < n;) {
      const b = this.#touch(destination);
      const base = from === 0 ? 0 : (ends[endsAt + from - 1] ?? 0);
      const room = this.#opts.flushRecords - b.records - b.spilledRecords;
      const held = b.length + b.spilledBytes;
      let to = from;
      while (to < n) {
        to++;
        if (held + (ends[endsAt + to - 1] ?? 0) - base >= this.#opts.flushBytes || to - from >= room) break;
      }
      const before = footprint(b);
      this.#append(b, slot, records, from, to);
      this.#footprint += footprint(b) - before;
      if (b.length + b.spilledBytes >= this.#opts.flushBytes) this.#flush(b, "bytes");
      else if (b.records + b.spilledRecords >= this.#opts.flushRecords) this.#flush(b, "records");
      if (this.#footprint > this.#boundBytes) this.#relieveCap();
      from = to;
    }
  }

  /**
   * While as many buffers are in memory as the count allows, a cold buffer's records go straight to the spill, behind
   * the ones spilled before, as long as it stays short of flush_bytes and flush_records: taken back into memory, each
   * tail destination of a skewed workload evicted another buffer, and went back to the spill a record or two later
   * (about one spill write and a fifth of a read-back a record, the event loop's largest cost while receiving). Below
   * the count it is taken back, so it gathers records in memory and its next spill is one segment of many: straight
   * into the spill, 10,000 destinations under the byte bound spilled a segment a record, and merging them was 37% of
   * the event loop. False when the records are for the buffers in memory.
   */
  #addCold(destination: string, slot: number, records: BufferedRecords): boolean {
    if (this.#buffers.size < this.#maxBuffers) return false;
    const b = this.#byDestination.get(destination);
    const spill = this.#opts.spill;
    if (b === undefined || !b.cold || spill === undefined || b.hold === undefined) return false;
    const n = records.count;
    const { ends, endsAt, offsets, offsetsAt } = records;
    const bytes = ends[endsAt + n - 1] ?? 0;
    if (b.spilledBytes + bytes >= this.#opts.flushBytes || b.spilledRecords + n >= this.#opts.flushRecords) {
      return false;
    }
    if (!spill.room(bytes + n * 12)) return false;
    const data = records.data.subarray(records.dataAt, records.dataAt + bytes);
    const groupOffsets = offsets.subarray(offsetsAt, offsetsAt + n);
    b.segments = spill.write(
      [data],
      bytes,
      ends.subarray(endsAt, endsAt + n),
      groupOffsets,
      [slot, n, bytes],
      b.segments,
    );
    let min = Infinity;
    for (const o of groupOffsets) if (o < min) min = o;
    b.hold.addRun(slot, min, n);
    b.spilledBytes += bytes;
    b.spilledRecords += n;
    this.#records += n;
    if (segmentCount(b.segments) >= MERGE_SEGMENTS) b.segments = mergeTail(b.segments, spill);
    return true;
  }

  /**
   * The destination's buffer, now the most recently used; one taken in past the count relieves the least recent: it
   * spills while far from a frame's worth and the spill has room, else it flushes. Flushed, 100,000 destinations each
   * evicted one buffer per record and put 47,000 flushes in flight within a turn.
   */
  #touch(destination: string): HotBuffer {
    let b = this.#byDestination.get(destination);
    if (b !== undefined && !b.cold) {
      this.#buffers.touch(b);
      return b;
    }
    while (this.#buffers.size >= this.#maxBuffers) {
      const lru = this.#buffers.oldest as HotBuffer;
      if (!this.#trySpill(lru)) this.#flush(lru, "evict");
    }
    if (b === undefined) {
      b = new HotBuffer(destination);
      this.#byDestination.set(destination, b);
    } else {
      b.cold = false;
      const spill = this.#opts.spill;
      if (spill !== undefined && b.segments !== undefined && segmentCount(b.segments) >= MERGE_SEGMENTS) {
        b.segments = mergeTail(b.segments, spill);
      }
    }
    this.#buffers.push(b);
    return b;
  }

  /** Appends records [from, to) of `records`, all of one partition slot. */
  #append(b: HotBuffer, slot: number, records: BufferedRecords, from: number, to: number): void {
    const { ends, endsAt, offsets, offsetsAt } = records;
    const base = from === 0 ? 0 : (ends[endsAt + from - 1] ?? 0);
    const bytes = (ends[endsAt + to - 1] ?? 0) - base;
    const count = to - from;
    const start = b.length;
    const need = start + bytes;
    if (b.hold === undefined) {
      b.hold = this.#opts.openHold();
      b.openedAt = this.#now();
      this.#aging.push(b.destination, b.openedAt);
    }
    const dataAt = records.dataAt + base;
    const memory = records.data.buffer;
    if (memory instanceof SharedArrayBuffer && bytes >= VIEW_BYTES) {
      // A route reply: held as a view. A run continuing the last piece in its reply extends it.
      const last = b.pieces[b.pieces.length - 1];
      const end = last === undefined ? -1 : last.byteOffset + last.length;
      if (last !== undefined && last.buffer === memory && end === records.data.byteOffset + dataAt) {
        b.pieces[b.pieces.length - 1] = Buffer.from(memory, last.byteOffset, last.length + bytes);
      } else {
        if (b.pieces.length === 0) this.#unsettled.push(b);
        b.pieces = appendTo(b.pieces, records.data.subarray(dataAt, dataAt + bytes));
        codecLanes().leaseReply(memory);
      }
    } else {
      // A few records, or memory the caller may reuse: copied now, behind whatever the buffer already holds.
      this.#settleOne(b);
      const block = blockRoom(b, need);
      copyInto(block, start, records.data, dataAt, dataAt + bytes);
      b.blockLength = need;
    }
    b.length = need;
    if (b.records + count > b.room) growIndex(b, b.records + count);
    // Where this append's records go in the buffer's index, read once rather than from `b` at every record.
    const { f64, u32 } = b;
    const intoEnds = b.endsAt + b.records;
    const intoSlots = b.slotsAt + b.records;
    const intoOffsets = b.offsetsAt + b.records;
    let min = Infinity;
    for (let i = from, at = 0; i < to; i++, at++) {
      u32[intoEnds + at] = start + (ends[endsAt + i] ?? 0) - base;
      u32[intoSlots + at] = slot;
      const offset = offsets[offsetsAt + i] ?? 0;
      f64[intoOffsets + at] = offset;
      if (offset < min) min = offset;
    }
    b.records += count;
    this.#records += count;
    this.#bytes += bytes;
    b.hold.addRun(slot, min, count);
  }

  /** Copies what `b` holds as pieces into its block, behind what the block holds, and releases the pieces. */
  #settleOne(b: HotBuffer): void {
    if (b.pieces.length === 0) return;
    const block = blockRoom(b, b.length);
    let at = b.blockLength;
    for (const piece of b.pieces) {
      copyInto(block, at, piece);
      at += piece.length;
      codecLanes().releaseReply(piece.buffer as SharedArrayBuffer);
    }
    b.pieces = EMPTY;
    b.blockLength = b.length;
  }

  /**
   * Copies into their blocks what buffers still hold as pieces (call as a turn ends): a buffer that waits for more
   * records, or for its age, then pins no route reply.
   */
  settle(): void {
    // A buffer flushed since it was listed has no pieces left: settling it does nothing.
    for (const b of this.#unsettled) {
      const before = footprint(b);
      this.#settleOne(b);
      this.#footprint += footprint(b) - before;
    }
    this.#unsettled = [];
  }

  #flush(b: HotBuffer, trigger: FlushTrigger): void {
    this.#forget(b);
    this.#footprint -= footprint(b);
    if (b.records + b.spilledRecords === 0 || b.hold === undefined) {
      freeBlocks(b);
      return;
    }
    this.#bytes -= b.length;
    this.#records -= b.records + b.spilledRecords;
    const head = b.data === undefined || b.blockLength === 0 ? [] : [b.data.subarray(0, b.blockLength)];
    const batch: FlushBatch = {
      destination: b.destination,
      pieces: head.length === 0 ? b.pieces : [...head, ...b.pieces],
      bytes: b.spilledBytes + b.length,
      records: b.spilledRecords + b.records,
      hold: b.hold,
      trigger,
      openedAt: b.openedAt,
      blocks: [b.data, b.index].filter((x) => x !== undefined),
      ends: endsOf(b),
      offsets: offsetsOf(b),
      runs: runsOf(b),
      spilled: b.segments,
      spilledBytes: b.spilledBytes,
    };
    // The batch has the block and the pieces now: a settle must not copy and release what the flush still reads.
    b.pieces = EMPTY;
    b.data = undefined;
    dropIndex(b);
    this.#opts.onFlush(batch);
  }

  /**
   * Flushes the largest buffers down to three quarters of the bound: relieved only to the bound itself, every record
   * past it sorted ten thousand buffers again to flush one.
   */
  #relieveCap(): void {
    this.#flushDownTo((this.#boundBytes * 3) / 4);
  }

  /**
   * Memory runs short: flushes the largest buffers down to half of what they hold together. Not while the spill's
   * writes are backed up: what it spilled would wait in memory with them, so nothing would be freed before they land.
   */
  shed(): void {
    if (this.#opts.spill?.backedUp === true) return;
    this.#flushDownTo(this.#footprint / 2);
  }

  /**
   * Relieves the largest buffers (spilled, or flushed) until they hold `target` together: by size class (powers of
   * two), the larger classes whole and the class that reaches the target least recently used first. Sorting every
   * buffer by size each time cost the event loop 7 of 64 s while a skewed workload's 32,000 buffers were received.
   */
  #flushDownTo(target: number): void {
    const byClass = new Array<number>(32).fill(0);
    // Walked by hand: the list's iterator is a generator, an object a buffer each relief.
    for (let b = this.#buffers.oldest; b !== undefined; b = b.newer) {
      const held = footprint(b);
      const c = sizeClass(held);
      byClass[c] = (byClass[c] ?? 0) + held;
    }
    // The classes from `last` up go: every one above it whole, and `last` until the target is reached.
    let last = 32;
    for (let left = this.#footprint; last > 1 && left > target;) left -= byClass[--last] ?? 0;
    // Walked with the next buffer taken first, as relieving one takes it out of the list: a copy of the list to walk
    // was an array of 10,000 a relief, most of it promoted.
    let next: HotBuffer | undefined;
    for (let b = this.#buffers.oldest; b !== undefined; b = next) {
      next = b.newer;
      if (sizeClass(footprint(b)) > last && !this.#trySpill(b)) this.#flush(b, "cap");
    }
    for (let b = this.#buffers.oldest; b !== undefined && this.#footprint > target; b = next) {
      next = b.newer;
      if (sizeClass(footprint(b)) === last && !this.#trySpill(b)) this.#flush(b, "cap");
    }
  }

  /**
   * Moves what `b` holds in memory to the spill, and `b` to the cold buffers, when the spill has room and `b` is still
   * far from a frame's worth (else it is due a frame now); false if not.
   */
  #trySpill(b: HotBuffer): boolean {
    const spill = this.#opts.spill;
    if (spill === undefined || b.spilledBytes + b.length >= this.#opts.flushBytes || !spill.room(b.length)) {
      return false;
    }
    this.#footprint -= footprint(b);
    if (b.records > 0) {
      const head = b.data === undefined || b.blockLength === 0 ? [] : [b.data.subarray(0, b.blockLength)];
      b.segments = spill.write([...head, ...b.pieces], b.length, endsOf(b), offsetsOf(b), runsOf(b), b.segments);
      this.#opts.onSpill?.();
      b.spilledBytes += b.length;
      b.spilledRecords += b.records;
      this.#bytes -= b.length;
      b.reached = b.length;
    }
    // Copied into the spill: the memory goes back now.
    for (const piece of b.pieces) codecLanes().releaseReply(piece.buffer as SharedArrayBuffer);
    freeBlocks(b);
    b.pieces = EMPTY;
    b.length = 0;
    b.blockLength = 0;
    b.records = 0;
    if (b.hold === undefined) this.#forget(b);
    else if (!b.cold) {
      this.#buffers.remove(b);
      b.cold = true;
    }
    return true;
  }

  /** Reads `b`'s spilled records back into its block, ahead of what it holds, before a discard rewrites it. */
  #unspill(b: HotBuffer, spill: Spill): void {
    if (b.segments === undefined || segmentCount(b.segments) === 0) return;
    this.#settleOne(b);
    const parts = spill.readAll(b.segments);
    const mem = {
      data: b.data === undefined ? Buffer.alloc(0) : b.data.subarray(0, b.blockLength),
      ends: endsOf(b),
      offsets: offsetsOf(b),
      runs: runsOf(b),
    };
    const whole = stitch(parts, mem);
    const records = whole.ends.length;
    const data = blocks.alloc(whole.data.length);
    copyInto(data, 0, whole.data);
    if (b.data !== undefined) blocks.free(b.data);
    b.data = data;
    growIndex(b, records);
    b.u32.set(whole.ends, b.endsAt);
    b.f64.set(whole.offsets, b.offsetsAt);
    for (let i = 0, at = b.slotsAt; i < whole.runs.length; i += 3) {
      const count = whole.runs[i + 1] ?? 0;
      b.u32.fill(whole.runs[i] ?? 0, at, at + count);
      at += count;
    }
    spill.release(b.segments);
    this.#bytes += b.spilledBytes;
    b.length = whole.data.length;
    b.blockLength = b.length;
    b.records = records;
    b.segments = undefined;
    b.spilledBytes = 0;
    b.spilledRecords = 0;
  }

  /**
   * Moves the blocks of buffers in memory out of the slabs the pool retires (BlockPool.retireSparse), so those slabs
   * go: a buffer's block and index are read through the buffer alone, and a copy costs what it holds. Call about once
   * a second.
   */
  compact(): void {
    if (!blocks.retireSparse()) return;
    for (let b = this.#buffers.oldest; b !== undefined; b = b.newer) {
      const before = footprint(b);
      if (b.data !== undefined && blocks.retiring(b.data)) b.data = grow(b.data, b.blockLength, b.data.length);
      if (b.index !== undefined && blocks.retiring(b.index)) growIndex(b, b.records);
      this.#footprint += footprint(b) - before;
    }
  }

  /**
   * Flushes buffers older than flush_age (or spills them, see coldAgeMs) and spilled ones older than coldAgeMs, oldest
   * first, while `room` says more flushes may go in flight (call about once a second, and as flushes land). All at
   * once, a skewed workload's 30,000 tail buffers reaching their age together put 9,000 flushes in flight, queued at
   * the writers, and ran the heap out.
   */
  tick(room: () => boolean = () => true): void {
    const now = this.#now();
    const coldAge = this.#opts.coldAgeMs ?? 0;
    const cooling = this.#opts.spill !== undefined && coldAge > this.#opts.flushAgeMs;
    const crowded = (): boolean => this.#byDestination.size > (this.#opts.coldPast ?? 0);
    this.#due(this.#aging, now - this.#opts.flushAgeMs, (b) => {
      if (cooling && crowded() && this.#trySpill(b)) {
        this.#coldDue.push(b.destination, b.openedAt);
        return true;
      }
      if (!room()) return false;
      this.#flush(b, "age");
      return true;
    });
    this.#due(this.#coldDue, now - coldAge, (b) => {
      if (!room()) return false;
      this.#flush(b, "age");
      return true;
    });
  }

  /**
   * Hands `act` each buffer listed whose time is at or before `cutoff`, oldest first, until it says stop (false); an
   * entry whose buffer has flushed since it was listed is skipped.
   */
  #due(list: AgeList, cutoff: number, act: (b: HotBuffer) => boolean): void {
    for (; list.head < list.names.length; list.head++) {
      const openedAt = list.times[list.head] ?? 0;
      if (openedAt > cutoff) break;
      const name = list.names[list.head] ?? "";
      const b = this.#byDestination.get(name);
      if (b === undefined || b.openedAt !== openedAt || b.hold === undefined) continue;
      if (!act(b)) break;
    }
    list.compact();
  }

  /**
   * Flushes every buffer (the drain) while `room` says more may go in flight; true once none is left. A call that runs
   * out of room leaves its pass where it stopped, and the next call goes on from there: started over at each call,
   * the drain of a skewed workload's 49,000 destinations walked past every buffer already flushed each time room came
   * free, 5.2 s of the event loop's 42 s.
   */
  flushAll(room: () => boolean = () => true): boolean {
    this.#draining ??= this.#drainOrder();
    for (;;) {
      if (!room()) return false;
      const next = this.#draining.next();
      if (next.done === true) break;
      this.#flush(next.value, "drain");
    }
    this.#draining = undefined;
    return true;
  }

  /**
   * The drain's order: the buffers in memory first, then every one left (the cold ones, and any taken in since the
   * pass began). Map iterators see deletions and additions made while they are paused.
   */
  *#drainOrder(): Generator<HotBuffer> {
    for (const b of this.#byDestination.values()) if (!b.cold) yield b;
    for (const b of this.#byDestination.values()) yield b;
  }

  /** Every buffer, in memory first, then cold; one flushed meanwhile is skipped (a Map's iterator skips it). */
  *#all(): Generator<HotBuffer> {
    for (const b of this.#byDestination.values()) if (!b.cold) yield b;
    for (const b of this.#byDestination.values()) if (b.cold) yield b;
  }

  /** Drops `b` from the pool, wherever it is. */
  #forget(b: HotBuffer): void {
    if (this.#byDestination.get(b.destination) !== b) return;
    this.#byDestination.delete(b.destination);
    if (!b.cold) this.#buffers.remove(b);
  }

  /**
   * Flushes every buffer holding a record of these partition slots (a revoked partition's hand-over), as flushAll does
   * while `room` says more may go in flight; true once none is left.
   */
  flushSlots(slots: ReadonlySet<number>, room: () => boolean = () => true): boolean {
    for (const b of this.#all()) {
      if (!holdsSlot(b, slots)) continue;
      if (!room()) return false;
      this.#flush(b, "revoke");
    }
    return true;
  }

  /** Discards, before any write, the buffered records of revoked partition slots; returns how many. */
  discardSlots(slots: ReadonlySet<number>): number {
    let discarded = 0;
    for (const b of [...this.#all()]) {
      if (!holdsSlot(b, slots)) continue;
      const before = footprint(b);
      if (this.#opts.spill !== undefined) this.#unspill(b, this.#opts.spill);
      this.#settleOne(b);
      discarded += this.#discard(b, slots);
      // Read back, a cold buffer holds its records in memory again (or none).
      if (b.cold && b.records > 0) {
        b.cold = false;
        this.#buffers.push(b);
      }
      if (b.records === 0) {
        this.#forget(b);
        freeBlocks(b);
        if (b.hold !== undefined) this.#opts.onEmptied(b.hold);
      }
      this.#footprint += footprint(b) - before;
    }
    return discarded;
  }

  #discard(b: HotBuffer, slots: ReadonlySet<number>): number {
    const { data, hold, f64, u32, endsAt, offsetsAt, slotsAt } = b;
    if (data === undefined || b.index === undefined || hold === undefined) return 0;
    let write = 0;
    let kept = 0;
    for (let i = 0, read = 0; i < b.records; i++) {
      const end = u32[endsAt + i] ?? 0;
      const slot = u32[slotsAt + i] ?? 0;
      if (!slots.has(slot)) {
        write += data.copy(data, write, read, end);
        u32[endsAt + kept] = write;
        f64[offsetsAt + kept] = f64[offsetsAt + i] ?? 0;
        u32[slotsAt + kept++] = slot;
      }
      read = end;
    }
    let dropped = 0;
    for (const s of slots) dropped += hold.dropSlot(s);
    this.#bytes -= b.length - write;
    this.#records -= b.records - kept;
    b.length = write;
    b.blockLength = write;
    b.records = kept;
    return dropped;
  }

  /** Buffers (cold ones too), the bytes they hold in memory, and their records, spilled too. */
  stats(): { buffers: number; bytes: number; records: number } {
    return { buffers: this.#byDestination.size, bytes: this.#bytes, records: this.#records };
  }
}

// A pooled block, the power of two at or above the need, so growth doubles: the cap counts bytes buffered, the
// allocation can run to twice that. The old block goes back to the pool.
function grow(old: Buffer | undefined, used: number, need: number): Buffer {
  const next = blocks.alloc(need);
  if (old !== undefined) {
    copyInto(next, 0, old, 0, used);
    blocks.free(old);
  }
  return next;
}

/** `b`'s block, with room for `need` bytes; a first block starts at half of what `b` reached before (see reached). */
function blockRoom(b: HotBuffer, need: number): Buffer {
  if (b.data === undefined) b.data = grow(undefined, 0, Math.max(need, b.reached >> 1));
  else if (need > b.data.length) b.data = grow(b.data, b.blockLength, need);
  return b.data;
}

/**
 * Room for at least `need` records' offsets, ends and partition slots, in one pooled block (offsets first, 8-aligned).
 * Slots a record rather than runs of them in an array: at 10,000 destinations a new run came about once a record, and
 * the arrays, each living as long as its buffer, were the largest share of what the event loop allocated (113 of
 * 1,683 MB) and of what outlived the young generation (83 of 658 MB).
 */
function growIndex(b: HotBuffer, need: number): void {
  const index = blocks.alloc(Math.max(FIRST_RECORDS, need) * 16);
  const room = Math.floor(index.length / 16);
  const { f64, u32 } = blocks.views(index);
  const offsetsAt = index.byteOffset / 8;
  const endsAt = (index.byteOffset + room * 8) / 4;
  const slotsAt = endsAt + room;
  if (b.index !== undefined) {
    f64.set(offsetsOf(b), offsetsAt);
    u32.set(endsOf(b), endsAt);
    u32.set(b.u32.subarray(b.slotsAt, b.slotsAt + b.records), slotsAt);
    blocks.free(b.index);
  }
  b.index = index;
  b.room = room;
  b.f64 = f64;
  b.u32 = u32;
  b.offsetsAt = offsetsAt;
  b.endsAt = endsAt;
  b.slotsAt = slotsAt;
}

/** Gives up `b`'s index (freed, or handed to a flush): it has room for no record. */
function dropIndex(b: HotBuffer): void {
  b.index = undefined;
  b.room = 0;
  b.f64 = NO_OFFSETS;
  b.u32 = NO_ENDS;
}

/** `b`'s records' ends, as a view of their own. */
function endsOf(b: HotBuffer): Uint32Array {
  return b.u32.subarray(b.endsAt, b.endsAt + b.records);
}

/** `b`'s records' offsets, as a view of their own. */
function offsetsOf(b: HotBuffer): Float64Array {
  return b.f64.subarray(b.offsetsAt, b.offsetsAt + b.records);
}

/** `b`'s records in memory as runs of one partition slot each: [slot, records, endByte] triples (FlushBatch.runs). */
function runsOf(b: HotBuffer): number[] {
  const runs: number[] = [];
  const { u32, endsAt, slotsAt } = b;
  for (let i = 0; i < b.records; i++) {
    const slot = u32[slotsAt + i] ?? 0;
    const n = runs.length;
    if (n > 0 && runs[n - 3] === slot) {
      runs[n - 2] = (runs[n - 2] ?? 0) + 1;
      runs[n - 1] = u32[endsAt + i] ?? 0;
    } else runs.push(slot, 1, u32[endsAt + i] ?? 0);
  }
  return runs;
}

/**
 * Destinations with when their buffers opened, in that order, from `head` on (those before it are done). Names and
 * times, not the buffers: a flushed buffer listed here would stay alive until its entry aged.
 */
class AgeList {
  names: string[] = [];
  times: number[] = [];
  head = 0;

  push(name: string, time: number): void {
    this.names.push(name);
    this.times.push(time);
  }

  /** Past 1,024 entries done, and half, the done ones go. */
  compact(): void {
    if (this.head <= 1024 || this.head * 2 <= this.names.length) return;
    this.names = this.names.slice(this.head);
    this.times = this.times.slice(this.head);
    this.head = 0;
  }
}

/**
 * Merges a cold buffer's newest segments into one, so it keeps a few numbers whatever it receives: at least half of
 * MERGE_SEGMENTS, and each older one no more than twice what is merged after it. Sizes stay geometric, so a record is
 * copied again a handful of times before its flush, where merging them all at every MERGE_SEGMENTS copied a buffer
 * that took a record a turn up to flush_bytes over again each time.
 * While the spill's writes are backed up, a merge waits up to MERGE_SEGMENTS_BACKED_UP (see there).
 */
function mergeTail(segments: Segments, spill: Spill): Segments {
  if (spill.backedUp && segmentCount(segments) < MERGE_SEGMENTS_BACKED_UP) return segments;
  let from = segmentCount(segments);
  let merged = 0;
  while (from > 0) {
    const older = segmentBytes(segments, from - 1);
    if (segmentCount(segments) - from >= MERGE_SEGMENTS / 2 && older > 2 * merged) break;
    merged += older;
    from--;
  }
  return spill.merge(segments, from);
}

/** The power of two a buffer's length is at or above: 0 for an empty one. */
const sizeClass = (length: number): number => (length === 0 ? 0 : 32 - Math.clz32(length));

/**
 * The memory a buffer holds: its blocks whole, and the route replies' bytes it holds views of. Bounded by the records'
 * bytes instead, the 100,000-destination row's buffers of one to three records held about 1.8 times as much in
 * blocks (a power of two each, and a block for their index: ends, offsets and slots).
 */
function footprint(b: HotBuffer): number {
  return (b.data?.length ?? 0) + (b.index?.length ?? 0) + b.length - b.blockLength;
}

/** A buffer that goes without a flush gives its blocks back. */
function freeBlocks(b: HotBuffer): void {
  if (b.data !== undefined) blocks.free(b.data);
  if (b.index !== undefined) blocks.free(b.index);
  b.data = undefined;
  dropIndex(b);
}

/** Whether the buffer holds a record of these slots, spilled or in memory (its hold covers both). */
function holdsSlot(b: HotBuffer, slots: ReadonlySet<number>): boolean {
  return b.hold?.holdsAny(slots) ?? false;
}
