// The spill: where hot buffers put what they hold when the bound is reached, rather than flush it as a small frame.
// With 10,000 destinations under a 512 MiB limit the hot buffers get some 6 KB each, so every flush was a frame of
// about 8 records (257,069 flushes for 2M records), each compressed, appended and counted on its own. A spilled
// buffer writes its records to one of a few append-only files in the spool and keeps only where they lie; its next
// real flush reads them back ahead of what it holds in memory, so a destination's frame is still one standard frame
// of all its records in order, at flush_bytes, its age or the drain. Spilled records stay held (their offsets are not
// committed) until the frame holding them is durable, so the spill is never recovered: each file is unlinked as soon
// as it is open, and its space goes back when it is closed or its process ends, however it ends.
import { randomBytes } from "node:crypto";
import { mkdirSync, readSync, rmSync } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { join } from "node:path";

/** A spill file past this size is closed for writing, and removed once nothing in it is read again. */
const FILE_BYTES = 256 << 20;
/**
 * Spill writes on their way at most; past it a relieved buffer flushes a frame instead. Unbounded, 100,000
 * destinations put 28,000 writes in the file pool's queue at once, each holding its records, and ran the heap out.
 */
const MAX_WRITING = 256;

interface SpillFile {
  readonly path: string;
  readonly handle: Promise<FileHandle>;
  /** The handle once open, for reads made now (readNow). */
  opened?: FileHandle;
  /** Bytes written or reserved. */
  size: number;
  /** Segments in it not yet released. */
  live: number;
}

/**
 * One spilled piece of a buffer, at `at` in `file`: its records' bytes, then their ends (u32), offsets (f64) and
 * partition runs (u32 triples, as FlushBatch.runs).
 */
export interface Segment {
  readonly file: SpillFile;
  readonly at: number;
  readonly bytes: number;
  readonly records: number;
  /** Numbers in its runs (three a run). */
  readonly runs: number;
  /** While the write is on its way: settles once the segment is on file; then dropped, as each costs heap. */
  writing: Promise<void> | undefined;
  /**
   * What the segment holds (records, then index), copied when its write failed (a full spool): read from memory
   * from then on, so a failed spill loses nothing and needs no restart.
   */
  kept?: Buffer;
}

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
  #current: SpillFile | undefined;
  #seq = 0;
  /** Bytes of live segments, data and index. */
  #bytes = 0;
  /** Writes started and not yet settled. */
  #writing = 0;
  /** Bytes read back and not yet given back (see take), and the reads waiting for room. */
  #reading = 0;
  readonly #readCap: number;
  readonly #waiting: { bytes: number; go: () => void }[] = [];

  /**
   * Spills into `dir` at most `budgetBytes`; at most `readCapBytes` are read back at once (the drain flushes every
   * destination together).
   */
  constructor(dir: string, budgetBytes: number, readCapBytes: number) {
    mkdirSync(dir, { recursive: true });
    this.#dir = dir;
    this.#budget = budgetBytes;
    this.#readCap = readCapBytes;
  }

  /** Bytes spilled and not yet released (records, and their ends, offsets and runs). */
  get bytes(): number {
    return this.#bytes;
  }

  /**
   * Whether `writes` more writes of `bytes` together may start now: within the budget and MAX_WRITING (none once a
   * write failed: the buffers flush frames instead).
   */
  room(bytes: number, writes = 1): boolean {
    return !this.#failed && this.#writing + writes <= MAX_WRITING && this.#bytes + bytes <= this.#budget;
  }

  /** Starts writing `pieces` (`bytes` together) and the records' ends, offsets and runs; returns where they will lie. */
  write(
    pieces: readonly Buffer[],
    bytes: number,
    ends: Uint32Array,
    offsets: Float64Array,
    runs: readonly number[],
  ): Segment {
    const records = ends.length;
    const length = bytes + records * 12 + runs.length * 4;
    let file = this.#current;
    if (file === undefined || file.size + length > FILE_BYTES) {
      if (file !== undefined && file.live === 0) void this.#remove(file);
      // Named apart from any other process's spill in the same directory, for the moment until it is unlinked.
      const path = join(this.#dir, `${process.pid}-${randomBytes(4).toString("hex")}-${this.#seq++}.spill`);
      const handle = open(path, "wx+").then((h) => {
        rmSync(path, { force: true });
        return h;
      });
      const made: SpillFile = { path, handle, size: 0, live: 0 };
      handle.then(
        (h) => (made.opened = h),
        () => undefined,
      );
      file = made;
      this.#current = file;
    }
    const at = file.size;
    file.size += length;
    file.live++;
    this.#bytes += length;
    const index = [
      Buffer.from(ends.buffer, ends.byteOffset, records * 4),
      Buffer.from(offsets.buffer, offsets.byteOffset, records * 8),
      Buffer.from(Uint32Array.from(runs).buffer),
    ];
    const writing = file.handle.then(async (h) => {
      let done = 0;
      const all = [...pieces, ...index];
      // writev may write less than asked; the rest goes again from where it stopped.
      while (done < length) {
        const { bytesWritten } = await h.writev(rest(all, done), at + done);
        done += bytesWritten;
      }
    });
    const segment: Segment = { file, at, bytes, records, runs: runs.length, writing };
    this.#writing++;
    // Settled before the caller's own handlers run (registered first), so the copy is made before it frees pieces.
    writing.then(
      () => {
        segment.writing = undefined;
        this.#writing--;
      },
      () => {
        segment.kept = Buffer.concat([...pieces, ...index], length);
        segment.writing = undefined;
        this.#writing--;
        this.#failed = true;
      },
    );
    return segment;
  }

  /** Reads the segments' records into `into`, end to end, once each is on file. */
  async read(segments: readonly Segment[], into: Buffer): Promise<void> {
    let at = 0;
    await Promise.all(
      segments.map(async (s) => {
        const to = at;
        at += s.bytes;
        await s.writing;
        if (s.kept !== undefined) {
          s.kept.copy(into, to, 0, s.bytes);
          return;
        }
        const h = await s.file.handle;
        for (let done = 0; done < s.bytes;) {
          const { bytesRead } = await h.read(into, to + done, s.bytes - done, s.at + done);
          if (bytesRead === 0) throw new Error(`spill ${s.file.path} ended at ${s.at + done}`);
          done += bytesRead;
        }
      }),
    );
  }

  /**
   * Reads a segment on file whole, now (a revoke or a refused batch, both rare; see written): its records, ends,
   * offsets and runs.
   */
  readNow(s: Segment): SpilledRecords {
    const opened = s.file.opened;
    if (!written(s)) throw new Error(`spill ${s.file.path} read before it was written`);
    const whole = s.kept ?? Buffer.alloc(s.bytes + s.records * 12 + s.runs * 4);
    for (let done = s.kept === undefined ? 0 : whole.length; done < whole.length;) {
      if (opened === undefined) throw new Error(`spill ${s.file.path} read before it was opened`);
      const n = readSync(opened.fd, whole, done, whole.length - done, s.at + done);
      if (n === 0) throw new Error(`spill ${s.file.path} ended at ${s.at + done}`);
      done += n;
    }
    // Copied out so the index is aligned for its typed arrays.
    const ends = new Uint32Array(s.records);
    const offsets = new Float64Array(s.records);
    const runs = new Uint32Array(s.runs);
    let at = s.bytes;
    for (const into of [ends, offsets, runs]) {
      Buffer.from(into.buffer).set(whole.subarray(at, at + into.byteLength));
      at += into.byteLength;
    }
    return { data: whole.subarray(0, s.bytes), ends, offsets, runs: [...runs] };
  }

  /** The segment is read no more: its file goes once none of its segments is live and it is written no more. */
  release(s: Segment): void {
    this.#bytes -= s.bytes + s.records * 12 + s.runs * 4;
    if (--s.file.live === 0 && s.file !== this.#current) void this.#remove(s.file);
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
    for (let next = this.#waiting[0]; next !== undefined && !this.#full(next.bytes); next = this.#waiting[0]) {
      this.#waiting.shift();
      // Counted by the one that lets it go, so the next in line sees it.
      this.#reading += next.bytes;
      next.go();
    }
  }

  #full(bytes: number): boolean {
    return this.#reading > 0 && this.#reading + bytes > this.#readCap;
  }

  /** Closes the file being written (the drain, once every flush landed). */
  async close(): Promise<void> {
    const current = this.#current;
    this.#current = undefined;
    if (current !== undefined) await this.#remove(current);
  }

  /** Closes a file no segment is read from any more: unlinked since it opened, its space goes back now. */
  async #remove(file: SpillFile): Promise<void> {
    try {
      await (await file.handle).close();
    } catch {
      // Never opened, or closed already.
    }
  }
}

/** Whether the segment's write has settled (on file, or kept in memory), so readNow can read it. */
export function written(s: Segment): boolean {
  return s.writing === undefined;
}

/** `pieces` from byte `skip` of their concatenation on. */
function rest(pieces: readonly Buffer[], skip: number): Buffer[] {
  const out: Buffer[] = [];
  for (const p of pieces) {
    if (skip >= p.length) {
      skip -= p.length;
      continue;
    }
    out.push(skip > 0 ? p.subarray(skip) : p);
    skip = 0;
  }
  return out;
}
