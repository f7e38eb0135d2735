// Hot buffers: at most 64 destinations buffer at once; a record for another flushes the least recently used first.
// A buffer flushes at flush_bytes plus one record, flush_records, or flush_age_secs; all of them together stay under
// a shared cap (a quarter of the memory limit), past which the largest flush first. A buffer allocates nothing until
// a record arrives.
// Records are not copied where they are buffered: a buffer holds views of the route replies they arrived in (pieces),
// and a flush hands those to its lane, which reads them where they lie. The event loop's two copies of every record
// (into a buffer, then into shared memory for the lane) were a third of its time on the bench. What is still
// buffered when a turn ends is copied into the buffer's own block (settle), so no reply stays pinned by a buffer that
// flushes only at its age. A flush hands its block's part over as an exact copy in shared memory and keeps the block
// for the next destination (destinations churning through 64 buffers would otherwise allocate and fault in a fresh
// block at every eviction); a full buffer hands the block itself over.
import type { Hold } from "../delivery/hold.ts";
import { codecLanes, copyInto, releaseShared, sharedCopy } from "../codec/lanes.ts";

export const HOT_BUFFER_COUNT = 64;
const FIRST_ALLOC = 16 * 1024;

export type FlushTrigger = "bytes" | "records" | "age" | "evict" | "cap" | "drain";

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
  /** Byte offset one past each record's newline, so a refused batch can be split back into records. */
  readonly ends: Uint32Array;
  /** Each record's offset in its partition. */
  readonly offsets: Float64Array;
  /** Runs of consecutive records from one partition slot: [slot, records, endByte] triples. */
  readonly runs: readonly number[];
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

/** A flush's pieces are read no more: their shared copies and route replies go back for reuse. Call once. */
export function releaseFlush(b: FlushBatch): void {
  for (const piece of b.pieces) {
    releaseShared(piece);
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
  /** Bytes all buffers together may hold. */
  capBytes: number;
  /** A new hold for a buffer that receives its first record. */
  openHold: () => Hold;
  onFlush: (batch: FlushBatch) => void;
  /** A hold left with no records once a discard emptied its buffer: the owner releases it. */
  onEmptied: (hold: Hold) => void;
  now?: () => number;
}

/** The memory of one buffer, reused across destinations. */
interface Block {
  /** None while the buffers' records all went out as pieces. */
  data: Buffer | undefined;
  ends: Uint32Array;
  offsets: Float64Array;
}

class HotBuffer {
  readonly destination: string;
  /** The block: the first blockLength bytes of what the buffer holds. */
  data: Buffer | undefined;
  blockLength = 0;
  /** The rest, in order: views of route replies, each leased (Lanes.leaseReply) until copied or flushed. */
  pieces: Buffer[] = [];
  length = 0;
  records = 0;
  ends: Uint32Array | undefined;
  offsets: Float64Array | undefined;
  /** Runs of consecutive records from one partition slot: [slot, records, endByte] triples. */
  runs: number[] = [];
  hold: Hold | undefined;
  openedAt = 0;

  constructor(destination: string) {
    this.destination = destination;
  }
}

export class HotBufferPool {
  readonly #opts: HotBufferOptions;
  readonly #now: () => number;
  /** Insertion order is recency order: a touched buffer is re-inserted at the end. */
  readonly #buffers = new Map<string, HotBuffer>();
  /** Blocks of flushed buffers, for the next buffers to open; never more than HOT_BUFFER_COUNT. */
  readonly #spare: Block[] = [];
  readonly #slabs = new Slabs();
  #bytes = 0;

  constructor(opts: HotBufferOptions) {
    this.#opts = opts;
    this.#now = opts.now ?? Date.now;
  }

  /**
   * Buffers records for `destination`, a routed group at a time; flushes wherever a record takes the buffer to a
   * limit, so a group larger than flush_bytes spans several flushes.
   */
  add(destination: string, slot: number, records: BufferedRecords): void {
    const { ends, endsAt } = records;
    const n = records.count;
    for (let from = 0; from < n;) {
      const b = this.#touch(destination);
      const base = from === 0 ? 0 : (ends[endsAt + from - 1] ?? 0);
      const room = this.#opts.flushRecords - b.records;
      let to = from;
      while (to < n) {
        to++;
        if (b.length + (ends[endsAt + to - 1] ?? 0) - base >= this.#opts.flushBytes || to - from >= room) break;
      }
      this.#append(b, slot, records, from, to);
      if (b.length >= this.#opts.flushBytes) this.#flush(b, "bytes");
      else if (b.records >= this.#opts.flushRecords) this.#flush(b, "records");
      if (this.#bytes > this.#opts.capBytes) this.#relieveCap();
      from = to;
    }
  }

  /** The destination's buffer, now the most recently used; opening one past the count flushes the least recent. */
  #touch(destination: string): HotBuffer {
    let b = this.#buffers.get(destination);
    if (b === undefined) {
      if (this.#buffers.size >= HOT_BUFFER_COUNT) {
        const lru = this.#buffers.values().next().value;
        if (lru !== undefined) this.#flush(lru, "evict");
      }
      b = new HotBuffer(destination);
      const block = this.#spare.pop();
      if (block !== undefined) {
        b.data = block.data;
        b.ends = block.ends;
        b.offsets = block.offsets;
      }
      this.#buffers.set(destination, b);
    } else if (this.#buffers.size > 1) {
      this.#buffers.delete(destination);
      this.#buffers.set(destination, b);
    }
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
    }
    const dataAt = records.dataAt + base;
    const memory = records.data.buffer;
    if (memory instanceof SharedArrayBuffer) {
      // A route reply: held as a view. A run continuing the last piece in its reply extends it.
      const last = b.pieces[b.pieces.length - 1];
      const end = last === undefined ? -1 : last.byteOffset + last.length;
      if (last !== undefined && last.buffer === memory && end === records.data.byteOffset + dataAt) {
        b.pieces[b.pieces.length - 1] = Buffer.from(memory, last.byteOffset, last.length + bytes);
      } else {
        b.pieces.push(records.data.subarray(dataAt, dataAt + bytes));
        codecLanes().leaseReply(memory);
      }
    } else {
      // Memory the caller may reuse: copied now, behind whatever the buffer already holds.
      this.#settleOne(b);
      if (b.data === undefined || need > b.data.length) b.data = grow(b.data, start, need, this.#opts.flushBytes);
      copyInto(b.data, start, records.data, dataAt, dataAt + bytes);
      b.blockLength = need;
    }
    b.length = need;
    if (b.ends === undefined || b.offsets === undefined || b.records + count > b.ends.length) {
      b.ends = grown(Uint32Array, b.ends, b.records, b.records + count);
      b.offsets = grown(Float64Array, b.offsets, b.records, b.records + count);
    }
    let min = Infinity;
    for (let i = from, at = b.records; i < to; i++, at++) {
      b.ends[at] = start + (ends[endsAt + i] ?? 0) - base;
      const offset = offsets[offsetsAt + i] ?? 0;
      b.offsets[at] = offset;
      if (offset < min) min = offset;
    }
    b.records += count;
    this.#bytes += bytes;
    const r = b.runs;
    const n = r.length;
    if (n > 0 && r[n - 3] === slot) {
      r[n - 2] = (r[n - 2] ?? 0) + count;
      r[n - 1] = need;
    } else r.push(slot, count, need);
    b.hold.addRun(slot, min, count);
  }

  /** Copies what `b` holds as pieces into its block, behind what the block holds, and releases the pieces. */
  #settleOne(b: HotBuffer): void {
    if (b.pieces.length === 0) return;
    if (b.data === undefined || b.length > b.data.length) {
      b.data = grow(b.data, b.blockLength, b.length, this.#opts.flushBytes);
    }
    let at = b.blockLength;
    for (const piece of b.pieces) {
      copyInto(b.data, at, piece);
      at += piece.length;
      codecLanes().releaseReply(piece.buffer as SharedArrayBuffer);
    }
    b.pieces = [];
    b.blockLength = b.length;
  }

  /**
   * Copies into their blocks what buffers still hold as pieces (call as a turn ends): a buffer that waits for more
   * records, or for its age, then pins no route reply.
   */
  settle(): void {
    for (const b of this.#buffers.values()) this.#settleOne(b);
  }

  #flush(b: HotBuffer, trigger: FlushTrigger): void {
    this.#buffers.delete(b.destination);
    if (b.records === 0 || b.hold === undefined || b.ends === undefined || b.offsets === undefined) return;
    this.#bytes -= b.length;
    // A buffer that reached flush_bytes hands over its block; any other hands over a copy and keeps the block.
    const full = b.length >= this.#opts.flushBytes;
    const block = b.data?.subarray(0, b.blockLength);
    const head = block === undefined || block.length === 0 ? [] : [full ? block : sharedCopy(block)];
    const batch: FlushBatch = {
      destination: b.destination,
      pieces: head.length === 0 ? b.pieces : [...head, ...b.pieces],
      bytes: b.length,
      records: b.records,
      hold: b.hold,
      trigger,
      ends: full ? b.ends.subarray(0, b.records) : this.#slabs.copy(b.ends, b.records, Uint32Array),
      offsets: full ? b.offsets.subarray(0, b.records) : this.#slabs.copy(b.offsets, b.records, Float64Array),
      runs: b.runs,
    };
    if (!full && this.#spare.length < HOT_BUFFER_COUNT) {
      this.#spare.push({ data: b.data, ends: b.ends, offsets: b.offsets });
    }
    this.#opts.onFlush(batch);
  }

  #relieveCap(): void {
    const bySize = [...this.#buffers.values()].sort((a, b) => b.length - a.length);
    for (const b of bySize) {
      if (this.#bytes <= this.#opts.capBytes) break;
      this.#flush(b, "cap");
    }
  }

  /** Flushes every buffer older than flush_age (call about once a second). */
  tick(): void {
    const cutoff = this.#now() - this.#opts.flushAgeMs;
    for (const b of [...this.#buffers.values()]) if (b.openedAt <= cutoff) this.#flush(b, "age");
  }

  /** Flushes everything (shutdown, reload). */
  flushAll(): void {
    for (const b of [...this.#buffers.values()]) this.#flush(b, "drain");
  }

  /** Discards, before any write, the buffered records of revoked partition slots; returns how many. */
  discardSlots(slots: ReadonlySet<number>): number {
    let discarded = 0;
    for (const b of [...this.#buffers.values()]) {
      if (!b.runs.some((_, i) => i % 3 === 0 && slots.has(b.runs[i] ?? -1))) continue;
      this.#settleOne(b);
      discarded += this.#discard(b, slots);
      if (b.records === 0) {
        this.#buffers.delete(b.destination);
        if (b.hold !== undefined) this.#opts.onEmptied(b.hold);
      }
    }
    return discarded;
  }

  #discard(b: HotBuffer, slots: ReadonlySet<number>): number {
    const data = b.data;
    const ends = b.ends;
    const offsets = b.offsets;
    const hold = b.hold;
    if (data === undefined || ends === undefined || offsets === undefined || hold === undefined) return 0;
    let write = 0;
    let read = 0;
    let rec = 0;
    let kept = 0;
    const runs: number[] = [];
    for (let i = 0; i < b.runs.length; i += 3) {
      const slot = b.runs[i] ?? 0;
      const count = b.runs[i + 1] ?? 0;
      const end = b.runs[i + 2] ?? 0;
      if (!slots.has(slot)) {
        data.copy(data, write, read, end);
        for (let k = 0; k < count; k++) {
          ends[kept + k] = (ends[rec + k] ?? 0) - read + write;
          offsets[kept + k] = offsets[rec + k] ?? 0;
        }
        write += end - read;
        kept += count;
        runs.push(slot, count, write);
      }
      rec += count;
      read = end;
    }
    let dropped = 0;
    for (const s of slots) dropped += hold.dropSlot(s);
    this.#bytes -= b.length - write;
    b.length = write;
    b.blockLength = write;
    b.records = kept;
    b.runs = runs;
    return dropped;
  }

  stats(): { buffers: number; bytes: number; records: number } {
    let records = 0;
    for (const b of this.#buffers.values()) records += b.records;
    return { buffers: this.#buffers.size, bytes: this.#bytes, records };
  }
}

const SLAB_BYTES = 1 << 20;

/**
 * Copies of a flush's ends and offsets, carved from 1 MiB slabs as sharedCopy carves its data, each slab freed once
 * no copy in it is referenced: two typed arrays of their own a flush (38k flushes on the 2M-record bench) took 0.24 s
 * of the event loop, and their backing stores fed the collector.
 */
class Slabs {
  #slab = new ArrayBuffer(0);
  #used = 0;

  copy<A extends Uint32Array | Float64Array>(
    from: A,
    n: number,
    Kind: { new (buffer: ArrayBuffer, at: number, length: number): A; readonly BYTES_PER_ELEMENT: number },
  ): A {
    const bytes = n * Kind.BYTES_PER_ELEMENT;
    if (bytes > SLAB_BYTES / 4) return from.slice(0, n) as A;
    if (this.#used + bytes > this.#slab.byteLength) {
      this.#slab = new ArrayBuffer(SLAB_BYTES);
      this.#used = 0;
    }
    const copy = new Kind(this.#slab, this.#used, n);
    copy.set(from.subarray(0, n));
    // 8-aligned, so a Float64Array can follow.
    this.#used = (this.#used + bytes + 7) & ~7;
    return copy;
  }
}

// Doubling growth, capped near flush_bytes: the cap counts bytes buffered, the allocation can run to twice that.
function grow(old: Buffer | undefined, used: number, need: number, flushBytes: number): Buffer {
  let size = Math.max(old?.length ?? 0, Math.min(FIRST_ALLOC, flushBytes + 1));
  while (size < need) size = Math.min(size * 2, Math.max(need, flushBytes + 1));
  if (size < need) size = need;
  const next = Buffer.allocUnsafe(size);
  if (old !== undefined) old.copy(next, 0, 0, used);
  return next;
}

function grown<A extends Uint32Array | Float64Array>(
  Kind: { new (length: number): A },
  old: A | undefined,
  used: number,
  need: number,
): A {
  const next = new Kind(Math.max(256, used * 2, need));
  if (old !== undefined) next.set(old.subarray(0, used));
  return next;
}
