// The spill: where hot buffers put what they hold when the bound is reached, rather than flush it as a small frame.
// With 10,000 destinations under a 512 MiB limit the hot buffers get some 6 KB each, so every flush was a frame of
// about 8 records (257,069 flushes for 2M records), each compressed, appended and counted on its own. A spilled
// buffer's records go to a segment of the spill and the buffer keeps only where they lie; its next real flush reads
// them back ahead of what it holds in memory, so a destination's frame is still one standard frame of all its records
// in order, at flush_bytes, its age or the drain. Spilled records stay held (their offsets are not committed) until
// the frame holding them is durable, so the spill is never recovered: each file is unlinked as soon as it is open,
// and its space goes back when it is closed or its process ends, however it ends.
// Segments are copied into a chunk in memory, and a full chunk goes to file in one write. A write (and its promise,
// its index buffers and its settle handlers) per segment was a third of what the event loop allocated at 10,000
// destinations: 230,000 writes of about 6 KB for 2M records, each holding the buffer's memory until it landed. A
// segment is read from its chunk while the chunk is in memory, from its file after. Chunks are blocks of the hot
// buffers' pool (blocks.ts), so a buffer spilled gives back the memory its chunk takes. Chunks go to file one write at
// a time, every chunk sealed meanwhile in it, into the slots of chunks retired (see #place).
import { randomBytes } from "node:crypto";
import { mkdirSync, readSync, rmSync } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import { Fifo } from "../fifo.ts";
import { blocks } from "./blocks.ts";

/** A spill file grows no further past this size, and is removed once nothing in it is read again. */
const FILE_BYTES = 256 << 20;
/** What a chunk gathers before it is written; a larger segment takes a chunk of its own. */
const CHUNK_BYTES = 1 << 20;

interface SpillFile {
  readonly path: string;
  /** Files are numbered as they open. */
  readonly seq: number;
  readonly handle: Promise<FileHandle>;
  /** The handle once open, for reads made now (readNow). */
  opened?: FileHandle;
  /** Bytes written or reserved: slots end to end. */
  size: number;
  /** Chunks in it with a segment not yet released. */
  live: number;
  /** Where slots of chunks retired lie, the latest last: a chunk written there overwrites pages cached already. */
  free: number[];
}

/** Segments gathered in memory, then written end to end at `at` in `file` (set once the chunk is full). */
interface Chunk {
  readonly id: number;
  /** What the chunk holds while it fills and until its write lands; for good if the write failed (a full spool). */
  block: Buffer | undefined;
  /** What it takes before it is sealed: the pool's block may be larger. */
  readonly room: number;
  length: number;
  file: SpillFile | undefined;
  at: number;
  /** The slots it takes in its file (see #place): one, unless a segment larger than a chunk's room is in it. */
  slots: number;
  /** Segments in it not yet released. */
  live: number;
  /**
   * Filling; full and being written; on file (its segments read from there); or kept in memory for good, its write
   * having failed.
   */
  state: "filling" | "writing" | "onFile" | "kept";
}

/** Numbers a segment takes in Segments: its chunk's id, its place in the chunk, bytes, records and numbers in runs. */
const FIELDS = 5;

/**
 * A buffer's spilled pieces (segments), in order, five numbers each. Each lies at its place in its chunk: its records'
 * bytes, then their ends (u32), offsets (f64) and partition runs (u32 triples, as FlushBatch.runs). Small integers in
 * one array rather than an object a segment: 100,000 destinations held 700,000 segments, 70 MB of a 256 MiB heap,
 * and the memory latch held intake with nothing buffered. A typed array a buffer cost more than its numbers.
 */
export type Segments = number[];

export const segmentCount = (list: Segments): number => list.length / FIELDS;

/** The bytes of records segment i holds. */
export const segmentBytes = (list: Segments, i: number): number => list[i * FIELDS + 2] ?? 0;

/** Segment i of `list`: where it lies and what it holds. */
interface SegmentAt {
  chunk: number;
  at: number;
  bytes: number;
  records: number;
  runs: number;
}

function segmentAt(list: Segments, i: number): SegmentAt {
  const f = list;
  const k = i * FIELDS;
  return { chunk: f[k] ?? 0, at: f[k + 1] ?? 0, bytes: f[k + 2] ?? 0, records: f[k + 3] ?? 0, runs: f[k + 4] ?? 0 };
}

/**
 * `list` and one more segment, in a new array of exactly their length. Pushed onto, V8 leaves an array room for half
 * as many again plus 16: 82,000 cold buffers' lists held 29 MiB of a 100,000-destination heap, a third of it room.
 */
function withSegment(
  list: Segments | undefined,
  chunk: number,
  at: number,
  bytes: number,
  records: number,
  runs: number,
): Segments {
  return list === undefined ? [chunk, at, bytes, records, runs] : list.concat(chunk, at, bytes, records, runs);
}

const spannedBy = (s: { bytes: number; records: number; runs: number }): number =>
  s.bytes + s.records * 12 + s.runs * 4;

/** A spilled segment read back whole. */
export interface SpilledRecords {
  readonly data: Buffer;
  readonly ends: Uint32Array;
  readonly offsets: Float64Array;
  readonly runs: readonly number[];
}

export class Spill {
  readonly #dir: string;
  readonly #budget: number;
  #failed = false;
  #file: SpillFile | undefined;
  /** Files open, the oldest first: their free slots are taken in that order. */
  readonly #files = new Set<SpillFile>();
  #chunk: Chunk | undefined;
  /** Chunks by id, while a segment in one may be read. */
  readonly #chunks = new Map<number, Chunk>();
  /** Where a segment on file is read for a merge or readAll (see #whole): a chunk's size, made at the first. */
  #scratch: Buffer | undefined;
  #chunkSeq = 0;
  #seq = 0;
  /** Bytes of live segments, data and index. */
  #bytes = 0;
  /** Bytes of chunks sealed whose write has not landed (a sealed chunk is never empty). */
  #writingBytes = 0;
  /** Bytes of segments in chunks held in memory. */
  #memory = 0;
  readonly #chunkBytes: number;
  /** Bytes read back and not yet given back (see take), and the reads waiting for room. */
  #reading = 0;
  readonly #ioCap: number;
  readonly #waiting = new Fifo<{ bytes: number; go: () => void }>();
  /** Settles once no chunk is on its way to file. */
  #landed: Promise<void> = Promise.resolve();
  /** Settles once the last chunk's write has ended (never rejects): each write waits for the one before. */
  #writes: Promise<void> = Promise.resolve();
  /** Chunks sealed and not yet taken by a write. */
  #queued: Chunk[] = [];
  #land: (() => void) | undefined;
  #onLanded: (() => void) | undefined;

  /**
   * Spills into `dir` at most `budgetBytes`. At most `ioCapBytes` are read back at once (the drain flushes every
   * destination together); past as many on their way to file the spill is backed up, and intake waits for its writes
   * (see backedUp). Refusing to spill there instead, relieved and evicted buffers flushed frames of a few records, and
   * a skewed workload wrote 111,684 files by 1.67M records: its spill writes queued in the file pool behind the syncs
   * of those very files.
   */
  constructor(dir: string, budgetBytes: number, ioCapBytes: number, chunkBytes = CHUNK_BYTES) {
    mkdirSync(dir, { recursive: true });
    this.#chunkBytes = chunkBytes;
    this.#dir = dir;
    this.#budget = budgetBytes;
    this.#ioCap = ioCapBytes;
  }

  /** Bytes spilled and not yet released (records, and their ends, offsets and runs). */
  get bytes(): number {
    return this.#bytes;
  }

  /** Bytes of segments the spill holds in memory: in the chunk filling, and those on their way to file. */
  get memory(): number {
    return this.#memory;
  }

  /** Settles once no chunk is on its way to file. */
  landed(): Promise<void> {
    return this.#landed;
  }

  /**
   * Whether `bytes` more may be spilled now: within the budget (never once a write failed: the buffers flush frames
   * instead).
   */
  room(bytes: number): boolean {
    return !this.#failed && this.#bytes + bytes <= this.#budget;
  }

  /** Whether a chunk is on its way to file: its block goes back to the pool as it lands. */
  get writing(): boolean {
    return this.#writingBytes > 0;
  }

  /** Chunks on their way to file reach the cap: what spills more waits in memory, and intake should wait. */
  get backedUp(): boolean {
    return this.#writingBytes >= this.#ioCap;
  }

  /** Calls `fn` whenever a chunk's write lands (intake waiting on backedUp goes on). */
  onLanded(fn: () => void): void {
    this.#onLanded = fn;
  }

  /**
   * Copies `pieces` (`bytes` together) and the records' ends, offsets and runs into the spill, as a segment after
   * those of `list`: the list it returns (see withSegment). The caller may reuse their memory as soon as this returns.
   */
  write(
    pieces: readonly Buffer[],
    bytes: number,
    ends: Uint32Array,
    offsets: Float64Array,
    runs: readonly number[],
    list: Segments | undefined,
  ): Segments {
    const records = ends.length;
    const { chunk, block, at: start, segments } = this.#reserve(bytes, records, runs.length, list);
    let at = start;
    for (let i = 0; i < pieces.length; i++) at += (pieces[i] as Buffer).copy(block, at);
    at += Buffer.from(ends.buffer, ends.byteOffset, records * 4).copy(block, at);
    at += Buffer.from(offsets.buffer, offsets.byteOffset, records * 8).copy(block, at);
    for (let i = 0; i < runs.length; i++) at = block.writeUInt32LE(runs[i] ?? 0, at);
    chunk.length = at;
    return segments;
  }

  /**
   * Room at the end of the filling chunk for a segment of `bytes`, `records` and `runs` numbers in runs: the chunk, its
   * block, where the segment starts, and `list` with it. The caller fills it and sets the chunk's length past it.
   */
  #reserve(
    bytes: number,
    records: number,
    runs: number,
    list: Segments | undefined,
  ): { chunk: Chunk; block: Buffer; at: number; segments: Segments } {
    const length = bytes + records * 12 + runs * 4;
    let chunk = this.#chunk;
    if (chunk !== undefined && chunk.length + length > chunk.room) {
      this.#seal(chunk);
      chunk = undefined;
    }
    chunk ??= this.#open(length);
    const at = chunk.length;
    const segments = withSegment(list, chunk.id, at, bytes, records, runs);
    chunk.live++;
    this.#bytes += length;
    this.#memory += length;
    return { chunk, block: chunk.block as Buffer, at, segments };
  }

  /** A chunk to fill, with room for `length` at least. */
  #open(length: number): Chunk {
    const room = Math.max(this.#chunkBytes, length);
    const chunk: Chunk = {
      id: this.#chunkSeq++,
      block: blocks.alloc(room),
      room,
      length: 0,
      file: undefined,
      at: 0,
      slots: 0,
      live: 0,
      state: "filling",
    };
    this.#chunk = chunk;
    this.#chunks.set(chunk.id, chunk);
    return chunk;
  }

  /** Takes no more segments into `chunk`, and writes it in a slot of a spill file unless none is live. */
  #seal(chunk: Chunk): void {
    if (this.#chunk === chunk) this.#chunk = undefined;
    if (chunk.live === 0) {
      this.#freeBlock(chunk);
      this.#chunks.delete(chunk.id);
      return;
    }
    chunk.state = "writing";
    this.#place(chunk);
    if (this.#writingBytes === 0) this.#landed = new Promise((resolve) => (this.#land = resolve));
    this.#writingBytes += chunk.length;
    // Written with every chunk sealed before its turn comes (see #writeQueued).
    this.#queued.push(chunk);
    if (this.#queued.length === 1) this.#writes = this.#writes.then(() => this.#writeQueued());
  }

  /**
   * Where `chunk` goes on file: a slot a retired chunk left (the oldest file's, the latest freed in it first), else
   * past the current file's end (a new file past FILE_BYTES). A slot is a chunk's room. On this machine's VM a write
   * into pages new to the page cache ran at 440-650 MB/s, one over pages it held at 16 GB/s. Written end to end into
   * new files, the 10,000-destination row's spill (2.6 GB: merges write records again) kept intake waiting on its
   * backed-up writes for 4.7-6.3 s summed over a run; in retired slots, 1.8 s.
   */
  #place(chunk: Chunk): void {
    chunk.slots = Math.ceil(chunk.length / this.#chunkBytes);
    if (chunk.slots === 1) {
      for (const file of this.#files) {
        const at = file.free.pop();
        if (at === undefined) continue;
        this.#into(chunk, file, at);
        return;
      }
    }
    let file = this.#file;
    const span = chunk.slots * this.#chunkBytes;
    if (file === undefined || file.size + span > FILE_BYTES) {
      if (file !== undefined && file.live === 0) void this.#remove(file);
      file = this.#newFile();
      this.#file = file;
    }
    this.#into(chunk, file, file.size);
    file.size += span;
  }

  #into(chunk: Chunk, file: SpillFile, at: number): void {
    chunk.file = file;
    chunk.at = at;
    file.live++;
  }

  /**
   * Writes every chunk sealed so far, one write at a time, chunks next to each other in one file in one writev:
   * writes to a file wait in the kernel for its inode's lock (ext4, XFS), and a burst of them held 12-16 of libuv's 16
   * threads in ext4_buffered_write_iter, while files' opens and syncs queued behind. Started a chunk at a time as the
   * one before landed, each write also waited for a turn of the event loop.
   */
  async #writeQueued(): Promise<void> {
    const chunks = this.#queued.sort((a, b) => (a.file as SpillFile).seq - (b.file as SpillFile).seq || a.at - b.at);
    this.#queued = [];
    const slot = this.#chunkBytes;
    for (let i = 0; i < chunks.length;) {
      const file = (chunks[i] as Chunk).file as SpillFile;
      // A chunk of one slot is followed in the same write by the chunk in the next slot, its slot written whole (its
      // block is at least a slot): the bytes past its length are never read.
      const parts: Buffer[] = [];
      let j = i;
      for (let c = chunks[j] as Chunk; ; c = chunks[j] as Chunk) {
        j++;
        const next = chunks[j];
        const joins = next !== undefined && c.slots === 1 && next.file === file && next.at === c.at + slot;
        parts.push((c.block as Buffer).subarray(0, joins ? slot : c.length));
        if (!joins) break;
      }
      const first = i;
      i = j;
      try {
        await writeAt(await file.handle, parts, (chunks[first] as Chunk).at);
        for (let k = first; k < j; k++) {
          const c = chunks[k] as Chunk;
          c.state = "onFile";
          this.#freeBlock(c);
          this.#wrote(c);
        }
      } catch {
        // Kept: their segments are read from memory from then on, so a failed spill loses nothing.
        for (let k = first; k < j; k++) {
          const c = chunks[k] as Chunk;
          c.state = "kept";
          this.#wrote(c);
        }
        this.#failed = true;
      }
    }
  }

  #wrote(chunk: Chunk): void {
    this.#writingBytes -= chunk.length;
    if (this.#writingBytes === 0) this.#land?.();
    this.#onLanded?.();
    if (chunk.live === 0) this.#retire(chunk);
  }

  /**
   * A chunk written (or kept) with no live segment left: its block goes, and its file once none of the file's chunks
   * is live and it is written no more. Not before its write lands: closing the file under it would fail the write.
   */
  #retire(chunk: Chunk): void {
    this.#freeBlock(chunk);
    this.#chunks.delete(chunk.id);
    const file = chunk.file as SpillFile;
    for (let k = 0; k < chunk.slots; k++) file.free.push(chunk.at + k * this.#chunkBytes);
    if (--file.live === 0 && file !== this.#file) void this.#remove(file);
  }

  #newFile(): SpillFile {
    // Named apart from any other process's spill in the same directory, for the moment until it is unlinked.
    const seq = this.#seq++;
    const path = join(this.#dir, `${process.pid}-${randomBytes(4).toString("hex")}-${seq}.spill`);
    const handle = open(path, "wx+").then((h) => {
      rmSync(path, { force: true });
      return h;
    });
    const made: SpillFile = { path, handle, seq, size: 0, live: 0, free: [] };
    this.#files.add(made);
    handle.then(
      (h) => (made.opened = h),
      () => undefined,
    );
    return made;
  }

  /** The chunk's block goes back to the pool. */
  #freeBlock(chunk: Chunk): void {
    const block = chunk.block;
    chunk.block = undefined;
    if (block === undefined) return;
    this.#memory -= chunk.length;
    blocks.free(block);
  }

  /** Reads the segments' records into `into`, end to end: from their chunks where in memory, else from file. */
  async read(list: Segments, into: Buffer): Promise<void> {
    let to = 0;
    const reads: Promise<void>[] = [];
    for (let i = 0; i < segmentCount(list); i++) {
      const s = segmentAt(list, i);
      const chunk = this.#chunkOf(s.chunk);
      if (chunk.block !== undefined) chunk.block.copy(into, to, s.at, s.at + s.bytes);
      else reads.push(this.#readFile(chunk, chunk.at + s.at, s.bytes, into, to));
      to += s.bytes;
    }
    await Promise.all(reads);
  }

  #chunkOf(id: number): Chunk {
    const chunk = this.#chunks.get(id);
    if (chunk === undefined) throw new Error(`spill chunk ${id} read after its segments were released`);
    return chunk;
  }

  async #readFile(chunk: Chunk, from: number, bytes: number, into: Buffer, to: number): Promise<void> {
    const file = chunk.file as SpillFile;
    const h = await file.handle;
    for (let done = 0; done < bytes;) {
      const { bytesRead } = await h.read(into, to + done, bytes - done, from + done);
      if (bytesRead === 0) throw new Error(`spill ${file.path} ended at ${from + done}`);
      done += bytesRead;
    }
  }

  /** Reads every segment whole, now (a revoke or a refused batch, both rare): records, ends, offsets and runs each. */
  readAll(list: Segments): SpilledRecords[] {
    const out: SpilledRecords[] = [];
    for (let i = 0; i < segmentCount(list); i++) out.push(this.#readNow(segmentAt(list, i)));
    return out;
  }

  #readNow(s: SegmentAt): SpilledRecords {
    const whole = this.#whole(s);
    // Copied out, so the index is aligned for its typed arrays and outlives the chunk.
    const ends = new Uint32Array(s.records);
    const offsets = new Float64Array(s.records);
    const runs = new Uint32Array(s.runs);
    let at = s.bytes;
    for (const into of [ends, offsets, runs]) {
      Buffer.from(into.buffer).set(whole.subarray(at, at + into.byteLength));
      at += into.byteLength;
    }
    return { data: Buffer.from(whole.subarray(0, s.bytes)), ends, offsets, runs: [...runs] };
  }

  /**
   * Rewrites segments `from` on of `list` as one segment, in their place at its end: copied from where they lie
   * straight into the chunk, their ends and runs moved past the bytes before them on the way. Read back into buffers
   * of their own and joined first, the merges of 10,000 destinations left the allocator's heap at 142 MiB of a 492 MiB
   * RSS, and the memory latch held intake for a third of the run. Returns the list that takes `list`'s place.
   */
  merge(list: Segments, from: number): Segments {
    const tail = list.splice(from * FIELDS);
    const n = segmentCount(tail);
    let bytes = 0;
    let records = 0;
    let runs = 0;
    for (let i = 0; i < n; i++) {
      const s = segmentAt(tail, i);
      bytes += s.bytes;
      records += s.records;
      runs += s.runs;
    }
    // Written before the old ones are released: a chunk they lie in may then be refilled from its head.
    const { chunk, block, at, segments } = this.#reserve(bytes, records, runs, list);
    let data = at;
    let ends = at + bytes;
    let offsets = ends + records * 4;
    let run = offsets + records * 8;
    let base = 0;
    for (let i = 0; i < n; i++) {
      const s = segmentAt(tail, i);
      const whole = this.#whole(s);
      data += whole.copy(block, data, 0, s.bytes);
      // Ends and runs are moved past `base` on the way.
      for (let k = 0; k < s.records; k++, ends += 4)
        block.writeUInt32LE(base + whole.readUInt32LE(s.bytes + k * 4), ends);
      const offsetsAt = s.bytes + s.records * 4;
      const runsAt = offsetsAt + s.records * 8;
      offsets += whole.copy(block, offsets, offsetsAt, runsAt);
      whole.copy(block, run, runsAt, runsAt + s.runs * 4);
      for (let k = 2; k < s.runs; k += 3) block.writeUInt32LE(base + block.readUInt32LE(run + k * 4), run + k * 4);
      run += s.runs * 4;
      base += s.bytes;
    }
    chunk.length = run;
    this.release(tail);
    return segments;
  }

  /**
   * The segment whole (records, ends, offsets and runs, end to end): where it lies while its chunk is in memory, else
   * read from file in one read, into the spill's scratch (valid until the next call) unless larger than a chunk. Read
   * a part at a time, a merge made four reads a segment, on the event loop.
   */
  #whole(s: SegmentAt): Buffer {
    const length = spannedBy(s);
    const chunk = this.#chunkOf(s.chunk);
    if (chunk.block !== undefined) return chunk.block.subarray(s.at, s.at + length);
    const file = chunk.file as SpillFile;
    const opened = file.opened;
    if (opened === undefined) throw new Error(`spill ${file.path} read before it was opened`);
    let into: Buffer;
    if (length > this.#chunkBytes) into = Buffer.allocUnsafeSlow(length);
    else into = this.#scratch ??= Buffer.allocUnsafeSlow(this.#chunkBytes);
    for (let done = 0; done < length;) {
      const n = readSync(opened.fd, into, done, length - done, chunk.at + s.at + done);
      if (n === 0) throw new Error(`spill ${file.path} ended at ${chunk.at + s.at + done}`);
      done += n;
    }
    return into.subarray(0, length);
  }

  /** The segments are read no more: a chunk filling with no live segment left starts again from its head. */
  release(list: Segments): void {
    for (let i = 0; i < segmentCount(list); i++) {
      const s = segmentAt(list, i);
      this.#bytes -= spannedBy(s);
      const chunk = this.#chunkOf(s.chunk);
      if (--chunk.live > 0) continue;
      if (chunk.state === "filling") {
        this.#memory -= chunk.length;
        chunk.length = 0;
      } else if (chunk.state !== "writing") this.#retire(chunk);
    }
    list.length = 0;
  }

  /** Waits for room to read back `bytes` (given back with give); one read always goes, however large. */
  take(bytes: number): Promise<void> {
    if (this.#waiting.length === 0 && !this.#full(bytes)) {
      this.#reading += bytes;
      return Promise.resolve();
    }
    return new Promise<void>((go) => this.#waiting.push({ bytes, go }));
  }

  give(bytes: number): void {
    this.#reading -= bytes;
    for (let next = this.#waiting.peek(); next !== undefined && !this.#full(next.bytes); next = this.#waiting.peek()) {
      this.#waiting.shift();
      // Counted by the one that lets it go, so the next in line sees it.
      this.#reading += next.bytes;
      next.go();
    }
  }

  #full(bytes: number): boolean {
    return this.#reading > 0 && this.#reading + bytes > this.#ioCap;
  }

  /** Closes the file being written (the drain, once every flush landed), once no chunk is on its way to it. */
  async close(): Promise<void> {
    await this.#landed;
    const current = this.#file;
    this.#file = undefined;
    if (current !== undefined) await this.#remove(current);
  }

  /** Closes a file no segment is read from any more: unlinked since it opened, its space goes back now. */
  async #remove(file: SpillFile): Promise<void> {
    this.#files.delete(file);
    try {
      await (await file.handle).close();
    } catch {
      // Never opened, or closed already.
    }
  }
}

/**
 * Writes `rest` end to end at `position`, taking each part off it as it lands: a write may take less than asked, and
 * the rest goes again.
 */
async function writeAt(h: FileHandle, rest: Buffer[], position: number): Promise<void> {
  let at = position;
  while (rest.length > 0) {
    const { bytesWritten } = await h.writev(rest, at);
    at += bytesWritten;
    let done = bytesWritten;
    while (rest.length > 0 && done >= (rest[0] as Buffer).length) done -= (rest.shift() as Buffer).length;
    if (done > 0) rest[0] = (rest[0] as Buffer).subarray(done);
  }
}
