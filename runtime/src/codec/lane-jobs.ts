// One codec lane's jobs (see lanes.ts; its thread starts in lane-worker.ts): works through each batch's jobs in order,
// on this thread, and answers the batch in one message. Codec contexts live as long as the lane: a zstd frame of a few
// kilobytes took 35 µs through a fresh one-shot context (its tables sized and cleared each time) and 9 µs through a
// reused one, as fast as `zstd -b`.

import { closeSync, constants, openSync, writeSync } from "node:fs";
import { parentPort } from "node:worker_threads";
import zlib from "node:zlib";
import type * as Lz4 from "lz4-napi";
import type * as Snappy from "snappy";
import { ArchiverError } from "../errors.ts";
import { lazyNative } from "../native.ts";
import { routeBlock } from "../route/block.ts";
import { collectSoon } from "../regulate/sampler.ts";
import { sharedReplyMemory } from "../route/reply-wasm.ts";
import { KAFKA_BATCHES } from "../transport/record-batch.ts";
import type { SharedWasmMemory } from "../wasm/loader.ts";
import { CODEC_NAMES } from "./index.ts";
import {
  alignOutput,
  copyInto,
  IDLE_TRIM_MS,
  IN_PIECES,
  JOB_FIELDS,
  LANE_OPS,
  PATH_TARGET,
  PIECE_FIELDS,
  type AppendTarget,
  type LaneBatch,
  type LaneFailure,
  type LaneReply,
} from "./lanes.ts";

// Loaded by the first job of their codec (see native.ts): a lane writing zstd never needs them.
const lz4Native = lazyNative<typeof Lz4>("lz4-napi");
const snappyNative = lazyNative<typeof Snappy>("snappy");

const port = parentPort;
if (port === null) throw new Error("lane-jobs.ts runs only in a worker thread of the codec lanes");

// The content checksum (xxHash32 of the flush) is what lets `lz4 -d` and read-back detect a corrupt file.
const LZ4_FRAME = { contentChecksum: true };
// The stream identifier chunk alone is a valid, empty framed stream; the package writes nothing for an empty input.
const SNAPPY_EMPTY = Buffer.from([0xff, 0x06, 0x00, 0x00, 0x73, 0x4e, 0x61, 0x50, 0x70, 0x59]);

/** The parts of a node:zlib stream that its own synchronous calls drive; present on every zlib stream. */
interface ZlibInternals {
  readonly _handle?: {
    writeSync(
      flush: number,
      input: Uint8Array,
      inOff: number,
      inLen: number,
      out: Uint8Array,
      outOff: number,
      outLen: number,
    ): void;
  } | null;
  readonly _writeState?: Uint32Array;
}

/**
 * zstd frames from one long-lived node:zlib context. Ending each input with ZSTD_e_end closes a complete standalone
 * frame (header with the checksum flag, blocks, XXH64 checksum), and the next input starts the next frame on the same
 * context, sized to that input as a one-shot call would be. node:zlib's one-shot calls build a new context each
 * time, and its stream API ends a frame only asynchronously, so the frame is driven through the stream's handle,
 * exactly as node:zlib's own synchronous calls drive it.
 */
class ZstdFrames {
  readonly #stream: zlib.ZstdCompress;
  readonly #handle: NonNullable<ZlibInternals["_handle"]>;
  readonly #state: Uint32Array;
  #error: Error | undefined;

  private constructor(stream: zlib.ZstdCompress, internals: Required<ZlibInternals>) {
    this.#stream = stream;
    if (internals._handle === null) throw new Error("zstd context without a handle");
    this.#handle = internals._handle;
    this.#state = internals._writeState;
    stream.on("error", (err) => (this.#error = err));
  }

  /** A reused context for `level`, or undefined when this node:zlib does not expose its handle as expected. */
  static open(level: number): ZstdFrames | undefined {
    const stream = zlib.createZstdCompress({ params: zstdParams(level) });
    const internals = stream as unknown as ZlibInternals;
    if (typeof internals._handle?.writeSync !== "function" || !(internals._writeState instanceof Uint32Array)) {
      stream.destroy();
      return undefined;
    }
    return new ZstdFrames(stream, { _handle: internals._handle, _writeState: internals._writeState });
  }

  get broken(): boolean {
    return this.#error !== undefined;
  }

  /** One frame of `input`, appended to `out` (which grows as needed); returns its length. */
  frame(input: Uint8Array, out: Output): number {
    const start = out.end;
    let inOff = 0;
    for (;;) {
      // Room for the whole frame at once (zstd's compress bound), so one call is the rule.
      const room = out.reserve(input.length - inOff + ((input.length - inOff) >> 7) + 512);
      this.#handle.writeSync(zlib.constants.ZSTD_e_end, input, inOff, input.length - inOff, out.bytes, out.end, room);
      if (this.#error !== undefined) throw this.#error;
      const [availOut = 0, availIn = 0] = this.#state;
      out.end += room - availOut;
      inOff = input.length - availIn;
      // Output left over means zstd ended the frame; a full output means it has more to give.
      if (availOut > 0) return out.end - start;
    }
  }

  close(): void {
    this.#stream.destroy();
  }
}

const zstdParams = (level: number) => ({
  [zlib.constants.ZSTD_c_compressionLevel]: level,
  [zlib.constants.ZSTD_c_checksumFlag]: 1,
});

/** A batch's outputs, end to end in one buffer that grows and is kept across batches (see run). */
class Output {
  bytes: Uint8Array<ArrayBuffer> = new Uint8Array(1 << 16);
  end = 0;

  /** Makes room for `n` more bytes; returns `n`. */
  reserve(n: number): number {
    if (this.end + n > this.bytes.length) {
      const grown = new Uint8Array(Math.max(this.bytes.length * 2, this.end + n));
      grown.set(this.bytes.subarray(0, this.end));
      this.bytes = grown;
    }
    return n;
  }

  push(chunk: Uint8Array): number {
    this.reserve(chunk.length);
    this.bytes.set(chunk, this.end);
    this.end += chunk.length;
    return chunk.length;
  }
}

const zstdContexts = new Map<number, ZstdFrames | undefined>();

function zstdFrame(level: number, input: Buffer, out: Output): number {
  let frames = zstdContexts.get(level);
  if (frames === undefined && !zstdContexts.has(level)) zstdContexts.set(level, (frames = ZstdFrames.open(level)));
  if (frames === undefined) {
    return out.push(zlib.zstdCompressSync(input, { pledgedSrcSize: input.length, params: zstdParams(level) }));
  }
  try {
    return frames.frame(input, out);
  } finally {
    // A context that failed mid-frame is left half way through it: the next frame gets a fresh one.
    if (frames.broken) {
      frames.close();
      zstdContexts.delete(level);
    }
  }
}

async function compress(codec: number, input: Buffer, out: Output): Promise<number> {
  const level = codec & 31;
  switch (CODEC_NAMES[codec >> 5]) {
    case "zstd":
      return zstdFrame(level, input, out);
    case "gzip":
      return out.push(zlib.gzipSync(input, { level }));
    case "lz4":
      return out.push(lz4Native().compressFrameSync(input, LZ4_FRAME));
    case "snappy":
      if (input.length === 0) return out.push(SNAPPY_EMPTY);
      return snappy(new (snappyNative().Compressor)(), input, out);
    default:
      throw new Error(`unknown codec id ${codec}`);
  }
}

async function decompress(codec: number, input: Buffer, out: Output): Promise<number> {
  switch (CODEC_NAMES[codec >> 5]) {
    case "zstd":
      return out.push(zlib.zstdDecompressSync(input));
    case "gzip":
      return out.push(zlib.gunzipSync(input));
    case "lz4":
      return out.push(lz4Native().decompressFrameSync(input));
    case "snappy":
      return snappy(new (snappyNative().Decompressor)(), input, out);
    default:
      throw new Error(`unknown codec id ${codec}`);
  }
}

async function snappy(stream: Snappy.Compressor | Snappy.Decompressor, input: Buffer, out: Output): Promise<number> {
  return out.push(stream.update(input)) + out.push(await stream.finish());
}

/**
 * Writes all of `frame` at the end of `target` (a descriptor, or a path opened to append for this write alone, never
 * created), through short writes; a failure says how much reached the file.
 */
function append(target: AppendTarget, frame: Buffer): void {
  let written = 0;
  let fd = typeof target === "number" ? target : -1;
  try {
    if (fd < 0) fd = openSync(target as string, constants.O_WRONLY | constants.O_APPEND);
    while (written < frame.length) written += writeSync(fd, frame, written, frame.length - written);
  } catch (err) {
    const code = typeof err === "object" && err !== null && "code" in err ? String(err.code) : undefined;
    throw {
      kind: "fs",
      code,
      message: err instanceof Error ? err.message : String(err),
      written,
    } satisfies LaneFailure;
  } finally {
    if (typeof target === "string" && fd >= 0) closeSync(fd);
  }
}

/** Compresses into `out`, appends the frame to `fd`, and leaves in `out` only the frame's length (u32). */
async function compressAppend(codec: number, fd: AppendTarget, input: Buffer, out: Output): Promise<number> {
  const start = out.end;
  let length: number;
  try {
    length = await compress(codec, input, out);
  } catch (err) {
    // The codec refusing is the batch's fault, as for a compress job; the write below is the file's.
    throw { kind: "refused", message: err instanceof Error ? err.message : String(err) } satisfies LaneFailure;
  }
  out.end = start;
  append(fd, Buffer.from(out.bytes.buffer, out.bytes.byteOffset + start, length));
  out.reserve(4);
  new DataView(out.bytes.buffer, out.bytes.byteOffset).setUint32(out.end, length, true);
  out.end += 4;
  return 4;
}

const isFailure = (err: unknown): err is LaneFailure => typeof err === "object" && err !== null && "kind" in err;

// Kept across batches: a flush's frame is written here and then to its file, and a batch grown afresh each time
// faulted in and copied its output at every doubling.
const out = new Output();

async function run(batch: LaneBatch): Promise<LaneReply> {
  const data = Buffer.from(batch.data);
  /** Views of the batch's in-place memory, for inputs in pieces. */
  let sources: Buffer[] | undefined;
  const jobs = batch.jobs;
  const count = jobs.length / JOB_FIELDS;
  const lengths = new Int32Array(count);
  const failures: Record<number, LaneFailure> = {};
  const owned: Record<number, SharedWasmMemory> = {};
  out.end = 0;
  for (let i = 0, at = 0; i < count; i++, at += JOB_FIELDS) {
    const op = LANE_OPS[jobs[at] ?? -1];
    const arg = jobs[at + 1] ?? 0;
    const field = jobs[at + 2] ?? -1;
    const fd = field <= PATH_TARGET ? (batch.paths[PATH_TARGET - field] ?? "") : field;
    const source = jobs[at + 3] ?? -1;
    const offset = jobs[at + 4] ?? 0;
    const length = jobs[at + 5] ?? 0;
    const memory = batch.inPlace[source];
    const input =
      source === IN_PIECES
        ? gather(batch, data, (sources ??= batch.inPlace.map((m) => Buffer.from(m))), offset, length)
        : memory === undefined
          ? data.subarray(offset, offset + length)
          : Buffer.from(memory, offset, length);
    // Each output starts 8-aligned, so a route reply's arrays read as typed views (see lanes.ts #settle).
    out.end = alignOutput(out.end);
    const start = out.end;
    try {
      if (op === "append") append(fd, input);
      else if (op === "compressAppend") lengths[i] = await compressAppend(arg, fd, input, out);
      else if (op === "compress") lengths[i] = await compress(arg, input, out);
      else if (op === "decompress") lengths[i] = await decompress(arg, input, out);
      else if (op === "route") {
        // A reply of its own, in shared memory: a batch's routed records, megabytes, copied nowhere. Encoded batches
        // are Kafka's (the only transport that hands them), decoded here where the route reads them.
        let memory: SharedWasmMemory | undefined;
        const reply = routeBlock(input, (size) => (memory = replyMemory(size)), KAFKA_BATCHES);
        if (memory === undefined) throw new Error("a route reply without its memory");
        owned[i] = memory;
        lengths[i] = reply.length;
      } else throw new Error(`unknown lane op ${jobs[at]}`);
    } catch (err) {
      // Whatever a failed job wrote is dropped: the caller places each output by the lengths alone.
      out.end = start;
      lengths[i] = -1;
      const message = err instanceof Error ? err.message : String(err);
      if (err instanceof ArchiverError) {
        failures[i] = { kind: "archiver", code: err.code, message, retryable: err.retryable };
      } else failures[i] = isFailure(err) ? err : { kind: op === "decompress" ? "corrupt" : "refused", message };
    }
  }
  // A buffer of just the outputs, so what the caller keeps of it holds no slack.
  return { id: batch.id, lengths, data: out.bytes.slice(0, out.end).buffer, owned, failures };
}

/** Where an input in pieces is gathered; kept across jobs, each of which is done with it before the next starts. */
let gathered = Buffer.alloc(0);

/** The concatenation of the `count` pieces of the table at `at` in `data` (see LaneBatch.jobs), in `gathered`. */
function gather(batch: LaneBatch, data: Buffer, sources: readonly Buffer[], at: number, count: number): Buffer {
  const rows = new Int32Array(batch.data, at, count * PIECE_FIELDS);
  let total = 0;
  for (let i = 2; i < rows.length; i += PIECE_FIELDS) total += rows[i] ?? 0;
  if (gathered.length < total) gathered = Buffer.allocUnsafeSlow(Math.max(total, gathered.length * 2));
  let end = 0;
  for (let i = 0; i < rows.length; i += PIECE_FIELDS) {
    const from = sources[rows[i] ?? -1] ?? data;
    const start = rows[i + 1] ?? 0;
    const length = rows[i + 2] ?? 0;
    copyInto(gathered, end, from, start, start + length);
    end += length;
  }
  return gathered.subarray(0, end);
}

/**
 * Route replies' memory the event loop gave back (see lanes.ts recycle), the largest kept: a fetch's pieces, six or
 * so a lane, are routed before their predecessors come back, and with four kept half the bench's replies took fresh
 * memory.
 */
const spares: SharedWasmMemory[] = [];
const SPARES_KEPT = 8;

/**
 * The smallest spare that holds `size` bytes, else fresh memory with room for larger replies to come (a fetch's
 * pieces grew from 6 to 9 MB over the bench's run); pages a reply never writes are never faulted in.
 */
function replyMemory(size: number): SharedWasmMemory {
  let best = -1;
  for (let i = 0; i < spares.length; i++) {
    const length = (spares[i] as SharedWasmMemory).buffer.byteLength;
    if (length >= size && (best < 0 || length < (spares[best] as SharedWasmMemory).buffer.byteLength)) best = i;
  }
  if (best >= 0) return spares.splice(best, 1)[0] as SharedWasmMemory;
  const fresh = sharedReplyMemory(size + (size >> 1));
  freshBytes += fresh.buffer.byteLength;
  if (freshBytes >= collectAfter) {
    freshBytes = 0;
    collectSoon();
  }
  return fresh;
}

/**
 * Shared memory is counted towards no collection (see lanes.ts recycle), and a lane allocates little else, so its
 * heap went uncollected for minutes: replies it made, and spares it let go, kept their memory all that time. With
 * 1,000 destinations under a 512 MiB limit, 27 replies of 7 MB (131 MB) stayed with nothing buffered or in flight,
 * and held the memory latch paused for good. So a lane collects once it has made half its spare bytes (8 MiB at a 1
 * GiB limit) of fresh reply memory, at most 64 MiB: at a fixed 64 MiB, a single-topic run's two lanes held some 120
 * MiB of replies no one read.
 */
const COLLECT_AFTER_MAX = 64 << 20;
let collectAfter = COLLECT_AFTER_MAX;
let freshBytes = 0;

// Batches run one after another, snappy's awaits included, so appends to one descriptor keep their order.
let tail = Promise.resolve();
/** Lets the spares go once no message has come for IDLE_TRIM_MS (see lanes.ts). */
let idle: NodeJS.Timeout | undefined;
function trimSpares(): void {
  if (spares.splice(0).length > 0) collectSoon();
}

port.on("message", (batch: LaneBatch) => {
  clearTimeout(idle);
  idle = setTimeout(trimSpares, IDLE_TRIM_MS).unref();
  collectAfter = Math.min(COLLECT_AFTER_MAX, batch.spareBytes / 2);
  spares.push(...batch.spares);
  spares.sort((a, b) => b.buffer.byteLength - a.buffer.byteLength).splice(SPARES_KEPT);
  // Within the lane's bytes too, the largest kept first (what is let go is collected with the next garbage).
  let kept = 0;
  const within = spares.findIndex((m) => (kept += m.buffer.byteLength) > batch.spareBytes);
  if (within >= 0) spares.splice(within);
  tail = tail
    .then(() => run(batch))
    .then((reply) => port.postMessage(reply, [reply.data, reply.lengths.buffer]))
    // Not a job's failure (each is answered in its reply): the lane ends, and its jobs are retried on a fresh one.
    .catch((err: unknown) =>
      process.nextTick(() => {
        throw err;
      }),
    );
});
