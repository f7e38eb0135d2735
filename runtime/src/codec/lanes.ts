// The lanes: worker threads that route transport batches (route/block.ts), compress flushes into frames, decompress
// blocks, and append frames to open archive files. Work reaches them in batches: everything asked of a lane within
// one turn of the event loop travels in one message, and comes back in one. With a thousand destinations a
// 10k-record batch flushes about a thousand small frames, and one hand-off each to libuv's pool (a thread woken, a
// completion posted back, a stream object built for every zlib call) cost the main thread more than the compression
// cost the pool.
// Each lane keeps one reused codec context per codec and level, and works through its messages in order, so the
// frames appended to one descriptor, always sent to the same lane, land in the order they were asked for.

import { availableParallelism } from "node:os";
import { extname } from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { ArchiverError } from "../errors.ts";
import { collectSoon } from "../regulate/sampler.ts";
import type { SharedWasmMemory } from "../wasm/loader.ts";

export type LaneOp = "compress" | "decompress" | "append" | "compressAppend" | "route";
export const LANE_OPS: readonly LaneOp[] = ["compress", "decompress", "append", "compressAppend", "route"];

/**
 * One message to a lane: `jobs` holds JOB_FIELDS integers per job; inputs lie end to end in `data`, or where they
 * are in `inPlace`: shared memory (a route reply, a hot buffer's pooled block), or memory the caller gave up, moved with the message.
 */
export interface LaneBatch {
  readonly id: number;
  /**
   * Per job: op index, codec id (0 for an append or a route), descriptor (appends; else -1), its input's source (-1
   * for `data`, else an index in `inPlace`), offset there, length. An input in pieces (source -2) is gathered from
   * the table at `offset` in `data`: `length` rows of i32 source, offset and length, each piece's source as above.
   */
  readonly jobs: Int32Array<ArrayBuffer>;
  readonly data: ArrayBuffer;
  readonly inPlace: readonly (SharedArrayBuffer | ArrayBuffer)[];
  /** Files an append names by path (a descriptor field of PATH_TARGET - i names paths[i]), opened for it alone. */
  readonly paths: readonly string[];
  /** Route replies' memory the event loop is done with, for the lane's next replies (see recycle). */
  readonly spares: readonly SharedWasmMemory[];
  /** The most bytes of such memory the lane keeps for later replies (see Lanes.limitSpares). */
  readonly spareBytes: number;
}
export const JOB_FIELDS = 6;
/** A job's descriptor field at or below this names a path (see LaneBatch.paths); -1 names no file. */
export const PATH_TARGET = -2;
/** Where an append lands: an open descriptor, or the path of a file with none (a parked file), opened for the append. */
export type AppendTarget = number | string;
const ROUTE = LANE_OPS.indexOf("route");
const IN_DATA = -1;
/** The source of an input in pieces (see LaneBatch.jobs). */
export const IN_PIECES = -2;
/** The i32 fields of a piece's row in the table of an input in pieces. */
export const PIECE_FIELDS = 3;
/** Route replies' memory waiting to go back to the lane that wrote it, at most this many a lane. */
const SPARES_HELD = 8;
/**
 * A lane idle this long lets its spares go, on both sides: kept for a run's next replies, they were the largest part
 * of an idle process (some 60 of 211 MiB after a single-topic run), and a run that starts again makes its own.
 */
export const IDLE_TRIM_MS = 5000;
/**
 * The lane each route reply's memory came from, and the WebAssembly memory it is the buffer of, so it goes back there
 * as that: a lane reuses what its own replies used, and its replies are written by WebAssembly (wasm/reply.wat).
 */
const replyLane = new WeakMap<SharedArrayBuffer, { lane: Lane; memory: SharedWasmMemory }>();

/**
 * Route replies' memory read past its batch (a hot buffer's pieces, a flush's), by how many readers: memory recycled
 * while read goes back for reuse only when its last reader lets go, since the lane that wrote it writes its next
 * replies there.
 */
export class ReplyLeases {
  readonly #readers = new Map<SharedArrayBuffer, number>();
  /** Recycled while read: given back at the last release. */
  readonly #recycled = new WeakSet<SharedArrayBuffer>();
  readonly #giveBack: (memory: SharedArrayBuffer) => void;

  constructor(giveBack: (memory: SharedArrayBuffer) => void) {
    this.#giveBack = giveBack;
  }

  lease(memory: SharedArrayBuffer): void {
    this.#readers.set(memory, (this.#readers.get(memory) ?? 0) + 1);
  }

  /** One reader of `memory` lets go; one that never leased it is ignored. */
  release(memory: SharedArrayBuffer): void {
    const readers = this.#readers.get(memory);
    if (readers === undefined) return;
    if (readers > 1) {
      this.#readers.set(memory, readers - 1);
      return;
    }
    this.#readers.delete(memory);
    if (this.#recycled.has(memory)) {
      this.#recycled.delete(memory);
      this.#giveBack(memory);
    }
  }

  /** The batch is done with `memory`: given back now, or at its last reader's release. */
  recycle(memory: SharedArrayBuffer): void {
    if (this.#readers.has(memory)) this.#recycled.add(memory);
    else this.#giveBack(memory);
  }
}

/**
 * Copies `from[start, end)` into `into` at `at`, always as a memcpy, and throws a RangeError where it does not fit
 * (Buffer#copy would cut it short). Buffer#copy of part of its source is a memcpy; of the whole source it is
 * TypedArray#set, which moves shared memory (relaxed atomics) a byte at a time unless both ends are word-aligned: 0.29
 * ns a byte in cache and 0.44 beyond, against 0.03 and 0.19 (7 KB pieces). Appending route replies to hot buffers
 * that way took a fifth of the event loop. A whole source goes by Buffer#fill, a memcpy too, but about 40 ns a call
 * dearer than Buffer#copy: a route reply copies its records one by one.
 */
export function copyInto(into: Buffer, at: number, from: Buffer, start = 0, end = from.length): Buffer {
  if (at + end - start > into.length) {
    throw new RangeError(`copyInto: ${end - start} bytes at ${at} overrun ${into.length}`);
  }
  if (start > 0 || end < from.length) from.copy(into, at, start, end);
  else if (end > 0) into.fill(from, at, at + end);
  return into;
}

export type LaneFailure =
  | { readonly kind: "refused" | "corrupt"; readonly message: string }
  /** An ArchiverError thrown on the lane, rebuilt with its code and kind by the caller. */
  | { readonly kind: "archiver"; readonly code: string; readonly message: string; readonly retryable: boolean }
  | { readonly kind: "fs"; readonly code: string | undefined; readonly message: string; readonly written: number };

/**
 * The reply: per job its output's length (0 for an append; a compressAppend's output is its frame's length as a u32),
 * or -1 with its failure in `failures`. An output lies in `data`, or, for a route, at the start of its own shared
 * memory in `owned` (see recycle).
 */
export interface LaneReply {
  readonly id: number;
  readonly lengths: Int32Array<ArrayBuffer>;
  readonly data: ArrayBuffer;
  readonly owned: Readonly<Record<number, SharedWasmMemory>>;
  readonly failures: Readonly<Record<number, LaneFailure>>;
}

/** Where a job's output starts in a reply's data: 8-aligned after the previous one's end. */
export const alignOutput = (end: number): number => (end + 7) & ~7;

/** A codec and its level as one integer, so a job names it in the batch's integer array. */
export const codecId = (index: number, level: number | undefined): number => (index << 5) | (level ?? 0);

export interface LaneJob {
  resolve(output: Buffer): void;
  reject(failure: LaneFailure | Error): void;
}

// The worker's own extension, so lanes start from the .ts sources and from the built .js alike.
const WORKER_URL = new URL(`./lane-worker${extname(fileURLToPath(import.meta.url))}`, import.meta.url);

class Lane {
  readonly worker: Worker;
  /**
   * Jobs asked for this turn, posted together once the turn ends. `inPlace`: the input is read where it lies (shared
   * memory, or `moved` with the message), not copied into it.
   */
  #queued: {
    op: number;
    arg: number;
    fd: AppendTarget;
    input: Uint8Array | readonly Uint8Array[];
    inPlace: boolean;
    moved: boolean;
    job: LaneJob;
  }[] = [];
  #queuedBytes = 0;
  readonly #sent = new Map<number, { jobs: LaneJob[]; routes: number }>();
  #nextId = 0;
  /** Jobs queued or sent and not yet answered. */
  load = 0;
  /** Of those, routes: each a whole batch, the costliest job by far, so what picking a lane for a route reads. */
  routes = 0;
  /** Its route replies' memory, recycled (Lanes.recycle), to go back with its next message. */
  readonly spares: SharedWasmMemory[] = [];
  /** The most bytes of spares held on either side of the lane (see Lanes.limitSpares). */
  spareBytes = Infinity;
  /** Lets the spares go once the lane has been idle IDLE_TRIM_MS. */
  #idle: NodeJS.Timeout | undefined;

  constructor(onGone: (lane: Lane, why: string) => void) {
    this.worker = new Worker(WORKER_URL);
    this.worker.unref();
    // An unref made before the thread is online does not hold: a lane started ahead of its first job (Lanes.start)
    // and idle since kept the process from exiting.
    this.worker.once("online", () => this.load === 0 && this.worker.unref());
    let why = "exited";
    this.worker.on("message", (reply: LaneReply) => this.#settle(reply));
    this.worker.on("error", (err) => (why = err.message));
    this.worker.on("exit", (code) => onGone(this, `${why} (exit code ${code})`));
  }

  /** A job; an input in pieces is read as their concatenation, each piece in shared memory where it lies. */
  add(
    op: number,
    arg: number,
    fd: AppendTarget,
    input: Uint8Array | readonly Uint8Array[],
    moved: boolean,
    job: LaneJob,
  ): void {
    // A pending job keeps the process alive; an idle lane must not.
    if (this.load++ === 0) {
      this.worker.ref();
      clearTimeout(this.#idle);
    }
    if (this.#queued.length === 0) setImmediate(() => this.#post());
    if (op === ROUTE) this.routes++;
    if (!(input instanceof Uint8Array)) {
      this.#queued.push({ op, arg, fd, input, inPlace: false, moved: false, job });
      // The table, 4-aligned, and the pieces not in shared memory, which travel in the message.
      this.#queuedBytes += 3 + input.length * PIECE_FIELDS * 4;
      for (const piece of input) if (!(piece.buffer instanceof SharedArrayBuffer)) this.#queuedBytes += piece.length;
      return;
    }
    const shared = input.buffer instanceof SharedArrayBuffer;
    const inPlace = moved || shared;
    this.#queued.push({ op, arg, fd, input, inPlace, moved: moved && !shared, job });
    if (!inPlace) this.#queuedBytes += input.length;
  }

  #post(): void {
    const queued = this.#queued;
    if (queued.length === 0) return;
    this.#queued = [];
    // One buffer of just these inputs, moved rather than cloned: the inputs' own buffers stay the callers'. Inputs
    // in shared memory are read where they are, and memory a caller gave up is moved as it is.
    const data = new Uint8Array(this.#queuedBytes);
    this.#queuedBytes = 0;
    const jobs = new Int32Array(queued.length * JOB_FIELDS);
    const inPlace: (SharedArrayBuffer | ArrayBuffer)[] = [];
    const paths: string[] = [];
    const transfer: ArrayBuffer[] = [data.buffer, jobs.buffer];
    let offset = 0;
    let at = 0;
    /** Where `memory` is in inPlace, added if it is not yet. */
    const sourceOf = (memory: ArrayBufferLike, moved: boolean): number => {
      let source = inPlace.lastIndexOf(memory as SharedArrayBuffer | ArrayBuffer);
      if (source < 0) {
        source = inPlace.push(memory as SharedArrayBuffer | ArrayBuffer) - 1;
        if (moved) transfer.push(memory as ArrayBuffer);
      }
      return source;
    };
    for (const q of queued) {
      const input = q.input;
      jobs[at++] = q.op;
      jobs[at++] = q.arg;
      jobs[at++] = typeof q.fd === "number" ? q.fd : PATH_TARGET - (paths.push(q.fd) - 1);
      if (!(input instanceof Uint8Array)) {
        const rows: number[] = [];
        for (const piece of input) {
          if (piece.buffer instanceof SharedArrayBuffer) rows.push(sourceOf(piece.buffer, false), piece.byteOffset);
          else {
            data.set(piece, offset);
            rows.push(IN_DATA, offset);
            offset += piece.length;
          }
          rows.push(piece.length);
        }
        offset = (offset + 3) & ~3;
        new Int32Array(data.buffer, offset, rows.length).set(rows);
        jobs[at++] = IN_PIECES;
        jobs[at++] = offset;
        jobs[at++] = input.length;
        offset += rows.length * 4;
        continue;
      }
      if (q.inPlace) {
        jobs[at++] = sourceOf(input.buffer, q.moved);
        jobs[at++] = input.byteOffset;
      } else {
        data.set(input, offset);
        jobs[at++] = IN_DATA;
        jobs[at++] = offset;
        offset += input.length;
      }
      jobs[at++] = input.length;
    }
    const id = this.#nextId++;
    this.#sent.set(id, { jobs: queued.map((q) => q.job), routes: queued.filter((q) => q.op === ROUTE).length });
    const back = this.spares.splice(0);
    this.worker.postMessage(
      { id, jobs, data: data.buffer, inPlace, paths, spares: back, spareBytes: this.spareBytes } satisfies LaneBatch,
      transfer,
    );
  }

  #settle(reply: LaneReply): void {
    const sent = this.#sent.get(reply.id);
    if (sent === undefined) return;
    this.#sent.delete(reply.id);
    const jobs = sent.jobs;
    this.routes -= sent.routes;
    let offset = 0;
    for (const [i, job] of jobs.entries()) {
      const length = reply.lengths[i] ?? -1;
      offset = alignOutput(offset);
      if (length < 0) {
        job.reject(reply.failures[i] ?? new Error("lane reply without a failure"));
        continue;
      }
      const own = reply.owned[i];
      if (own !== undefined) {
        const buffer = own.buffer;
        replyLane.set(buffer, { lane: this, memory: own });
        job.resolve(Buffer.from(buffer, 0, length));
        continue;
      }
      job.resolve(Buffer.from(reply.data, offset, length));
      offset += length;
    }
    this.load -= jobs.length;
    if (this.load === 0) {
      this.worker.unref();
      this.#idle = setTimeout(() => this.#trim(), IDLE_TRIM_MS).unref();
    }
  }

  /** Idle: the spares this side holds go (see IDLE_TRIM_MS); the lane lets its own go on its side. */
  #trim(): void {
    if (this.spares.splice(0).length > 0) collectSoon();
  }

  /** Every job not yet answered: rejected when the lane's thread is gone. */
  orphans(): LaneJob[] {
    const jobs = [...this.#queued.map((q) => q.job), ...[...this.#sent.values()].flatMap((s) => s.jobs)];
    this.#queued = [];
    this.#sent.clear();
    this.load = 0;
    this.routes = 0;
    return jobs;
  }
}

class Lanes {
  // One thread per core, at most four. The event loop waits on the lanes for much of its time (a route, a flush's
  // frame): one lane fewer than the cores left a core idle, and on two cores ran 20% slower.
  readonly #size = Math.max(1, Math.min(4, availableParallelism()));
  readonly #lanes: (Lane | undefined)[] = [];
  #spareBytes = Infinity;
  /** Reply memory let go (not kept as a spare) since the last collection started. */
  #letGo = 0;
  readonly #leases = new ReplyLeases((m) => {
    const from = replyLane.get(m);
    if (from === undefined) return;
    const spares = from.lane.spares;
    let held = m.byteLength;
    for (const s of spares) held += s.buffer.byteLength;
    if (spares.length < SPARES_HELD && held <= from.lane.spareBytes) {
      spares.push(from.memory);
      return;
    }
    // Shared memory counts towards no collection (see recycle), so memory let go stays mapped until one runs: a
    // single-topic run at a 1 GiB limit held some 120 MiB of such replies. Collect once half a lane's spare bytes is let go.
    this.#letGo += m.byteLength;
    if (this.#letGo >= from.lane.spareBytes / 2) {
      this.#letGo = 0;
      collectSoon();
    }
  });

  /**
   * Under a memory limit, the route replies' memory kept for reuse is bounded by bytes as well as by count: sixteen
   * replies of 7 MB a lane, kept on both sides of it, were 98 MB of a 1,000-destination run's 452 MB RSS at a 512 MiB
   * limit, held with nothing buffered or in flight, and kept the memory latch paused for good. A 16th of the limit
   * over the lanes, each side: at a 128th a single-topic run at 1 GiB (1 MiB fetches, replies of 2-3 MiB) found no
   * spare for two replies in five, and made 280 MiB of fresh memory, 5.4-6.7 CPU s; at a 16th, 2.3-2.6 CPU s.
   */
  limitSpares(limitBytes: number): void {
    this.#spareBytes = Math.floor(limitBytes / 16 / this.#size);
    for (const lane of this.#lanes) if (lane !== undefined) lane.spareBytes = this.#spareBytes;
  }

  /** Route replies' memory waiting here to go back to its lane, over every lane. */
  get sparesHeld(): number {
    let n = 0;
    for (const lane of this.#lanes) n += lane?.spares.length ?? 0;
    return n;
  }

  /** How many lanes there are (started or not). */
  get size(): number {
    return this.#size;
  }

  /**
   * Starts every lane's thread now, while the transport loads and joins its group: a lane started by the first batch
   * loaded its modules (0.3 s) with that batch waiting, and one started after the transport's import routed the first
   * batch 0.35 s after it arrived, against 0.15 s started before. An idle lane keeps no process alive.
   */
  start(): void {
    for (let i = 0; i < this.#size; i++) this.#lane(i);
  }

  /**
   * A codec or route job on the least loaded lane (`arg` names the codec; 0 for a route). A route goes where the
   * fewest routes wait: counted by jobs alone, a fetch's batches all went to the lane that was not compressing a
   * thousand small flushes, and it routed them one by one while the other lane sat idle.
   * `moved`: the caller gives up `input`'s memory, an ArrayBuffer of its own (never a pooled Buffer's), which the lane
   * then reads where it is, moved with the message rather than copied into it.
   */
  run(op: "compress" | "decompress" | "route", arg: number, input: Uint8Array, moved = false): Promise<Buffer> {
    return this.#add(this.#leastLoaded(op), LANE_OPS.indexOf(op), arg, -1, input, moved);
  }

  #leastLoaded(op: LaneOp): number {
    const weigh = (lane: Lane | undefined): number =>
      op === "route" ? (lane?.routes ?? 0) * 1e9 + (lane?.load ?? 0) : (lane?.load ?? 0);
    let best = 0;
    for (let i = 1; i < this.#size; i++) if (weigh(this.#lanes[i]) < weigh(this.#lanes[best])) best = i;
    return best;
  }

  /**
   * The lane of an append: a descriptor's own, so its appends keep their order; a path's, the least loaded (its
   * writer waits for each append before the next, so order holds on any lane).
   */
  #laneOf(target: AppendTarget, op: LaneOp): number {
    return typeof target === "number" ? target % this.#size : this.#leastLoaded(op);
  }

  /**
   * Takes back route replies' memory (Routed.memory) once the batch reads it no more: it goes to a lane with its next
   * message, once its leases are released too (leaseReply), and that lane writes later replies into it, so the caller
   * must hold no view of it past that but through a lease. Route replies are
   * shared memory because V8 counts shared memory towards no collection: a reply moved here as an ArrayBuffer, 8.7
   * MB on the bench's fetches, counted towards the event loop's, and V8 starts a full collection once counted memory
   * rises 64 MB above its lowest since the last: replies arriving and leaving started one every 0.3 s (20 a run).
   * Since nothing collects shared memory on its account, it is recycled here rather than left to the collector.
   */
  recycle(memory: readonly SharedArrayBuffer[]): void {
    for (const m of memory) this.#leases.recycle(m);
  }

  /**
   * A hot buffer or a flush reads route reply memory `m` until its releaseReply, and recycle holds it back until the
   * last. Memory no lane wrote (a batch routed on the event loop) is never recycled, and its leases are not kept.
   */
  leaseReply(m: SharedArrayBuffer): void {
    if (replyLane.has(m)) this.#leases.lease(m);
  }

  releaseReply(m: SharedArrayBuffer): void {
    this.#leases.release(m);
  }

  /** Appends `frame` at the end of `target` (a descriptor opened for append, always on its own lane, or a path). */
  append(target: AppendTarget, frame: Uint8Array): Promise<Buffer> {
    return this.#add(this.#laneOf(target, "append"), LANE_OPS.indexOf("append"), 0, target, frame, false);
  }

  /**
   * Compresses `input`, the concatenation of its pieces (codec `arg`), into one frame and appends it at the end of
   * `fd`, on fd's lane as append does; resolves to the frame's length. Pieces in shared memory (route replies, hot
   * buffers' copies) are gathered on the lane, where they lie, so the event loop copies none of them. The frame never
   * travels back: per flush one hand-off rather than two, and on a thousand destinations the flushes' hand-offs were
   * most of the event loop's work.
   */
  async compressAppend(target: AppendTarget, arg: number, input: readonly Uint8Array[]): Promise<number> {
    const op = LANE_OPS.indexOf("compressAppend");
    const length = await this.#add(this.#laneOf(target, "compressAppend"), op, arg, target, input, false);
    return length.readUInt32LE(0);
  }

  #add(
    at: number,
    op: number,
    arg: number,
    fd: AppendTarget,
    input: Uint8Array | readonly Uint8Array[],
    moved: boolean,
  ): Promise<Buffer> {
    const lane = this.#lane(at);
    return new Promise((resolve, reject) => lane.add(op, arg, fd, input, moved, { resolve, reject }));
  }

  #lane(at: number): Lane {
    let lane = this.#lanes[at];
    if (lane === undefined) {
      lane = new Lane((gone, why) => this.#drop(at, gone, why));
      lane.spareBytes = this.#spareBytes;
      this.#lanes[at] = lane;
    }
    return lane;
  }

  // A bad input comes back as a failure, so a thread that dies died of something else: its jobs are retryable, and
  // the next job starts a fresh thread in its place.
  #drop(at: number, lane: Lane, why: string): void {
    if (this.#lanes[at] === lane) this.#lanes[at] = undefined;
    for (const job of lane.orphans()) {
      job.reject(new ArchiverError("codec_failed", `codec lane ${why}`, "retryable"));
    }
  }
}

let lanes: Lanes | undefined;

/** The process's codec lanes, started on first use. */
export function codecLanes(): Lanes {
  return (lanes ??= new Lanes());
}
