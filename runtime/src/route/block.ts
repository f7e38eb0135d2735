// Routing a whole batch off the event loop: the pipeline hands a route lane one block (a transport batch, either its
// records end to end or its encoded records as fetched, read by the lane's EncodedFormat), and gets back the batch grouped by destination, chunk by
// chunk, each group its records' bytes end to end with a newline after each. Per record the event loop then does
// nothing: decoding, field extraction and grouping, about 5 µs a record there, run on the lane, and the pipeline
// buffers each group with one copy.
// Both ends live here, as the one definition of the block and reply layouts (little-endian, unaligned):
//   block: u32 spec length, spec JSON, i32 topic length (-1: none), topic, u8 kind, then
//     kind 0 (records): u32 count, count x u32 value length, count x f64 offset, the values end to end
//     kind 1 (encoded records): f64 fromOffset, u32 aborted, aborted x [f64 producer id, f64 first offset],
//       the encoded bytes
//   reply (8-aligned, so the pipeline reads ends and offsets as typed views): u32 chunks, 4 pad, per chunk
//     [u32 records, u32 groups, f64 last offset, per group [i32 key length (-1: too deep), u32 count, key, pad to 8,
//     count x f64 offset, count x u32 end, u32 bytes, bytes, pad to 8]], then u32 errors, u32 too deep, u32 fields,
//     fields x u32 fallbacks.

import type { BufferedRecords } from "../buffer/hot.ts";
import { codecLanes, copyInto, type LaneFailure } from "../codec/lanes.ts";
import { ArchiverError } from "../errors.ts";
import type { AbortedTransaction, EncodedFormat, InboundBatch, InboundRecord } from "../records.ts";
import type { SharedWasmMemory, WasmMemory } from "../wasm/loader.ts";
import { putterFor, type ReplyPutter } from "./reply-wasm.ts";
import { createRouter, TOO_DEEP, type Router, type RouterOptions } from "./router.ts";

/** How the lane routes: the router's options, and records per chunk (a few batches', see pipeline.ts). */
export interface RouteSpec {
  readonly mode: RouterOptions["mode"];
  readonly fields: readonly string[];
  readonly defaultSegment: string;
  readonly chunk: number;
}

/** A route reply's memory, through the three views every group reads it by (see readRouted). */
export interface ReplyViews {
  readonly bytes: Buffer;
  readonly words: Uint32Array;
  readonly doubles: Float64Array;
}

/**
 * One chunk of a reply: its groups lie end to end from `at`, read one at a time by a GroupReader. An object and a key
 * string a group, made when the reply came and read once the turn buffered it, outlived the young generation: on
 * 10,000 destinations (a group a record or so) they were a sixth of what full collections had to mark.
 */
export interface RoutedChunk {
  /** Records in the chunk, too deep ones included. */
  readonly records: number;
  /** The offset of the chunk's last record. */
  readonly lastOffset: number;
  readonly groups: number;
  /** Where the first group's head lies in the reply. */
  readonly at: number;
  readonly reply: ReplyViews;
}

/**
 * Reads a reply's groups, one at a time, into itself: the records' views are the last group read's. One reader
 * serves any number of groups; nothing keeps it past the group it was handed for. A group's key is read apart (keyAt):
 * a turn reads each key once, to order the groups by destination, and the records as it buffers them.
 */
export class GroupReader implements BufferedRecords {
  count = 0;
  data: Buffer = Buffer.alloc(0);
  dataAt = 0;
  ends: Uint32Array = new Uint32Array(0);
  endsAt = 0;
  offsets: Float64Array = new Float64Array(0);
  offsetsAt = 0;

  /** Reads the records of the group whose head is at `at` in `reply`. */
  read(reply: ReplyViews, at: number): void {
    const n = countAt(reply, at);
    const offsetsAt = offsetsAtOf(reply, at);
    const endsAt = offsetsAt + n * 8;
    this.count = n;
    this.data = reply.bytes;
    this.dataAt = endsAt + n * 4 + 4;
    this.ends = reply.words;
    this.endsAt = endsAt >> 2;
    this.offsets = reply.doubles;
    this.offsetsAt = offsetsAt >> 3;
  }
}

const keyLengthAt = (reply: ReplyViews, at: number): number => (reply.words[at >> 2] ?? 0) | 0;
const countAt = (reply: ReplyViews, at: number): number => reply.words[(at >> 2) + 1] ?? 0;
/** Where the offsets of the group whose head is at `at` start: past its head and key. */
const offsetsAtOf = (reply: ReplyViews, at: number): number => at + align8(8 + Math.max(0, keyLengthAt(reply, at)));

/** The key of the group whose head is at `at`, or TOO_DEEP. */
export function keyAt(reply: ReplyViews, at: number): string | typeof TOO_DEEP {
  const length = keyLengthAt(reply, at);
  return length === TOO_DEEP_KEY ? TOO_DEEP : reply.bytes.toString("utf8", at + 8, at + 8 + length);
}

/** Where the head of the group after the one at `at` lies. */
export function nextGroup(reply: ReplyViews, at: number): number {
  const n = countAt(reply, at);
  const endsAt = offsetsAtOf(reply, at) + n * 8;
  return endsAt + align8(n * 4 + 4 + (reply.words[(endsAt + n * 4) >> 2] ?? 0));
}

export interface Routed {
  readonly chunks: readonly RoutedChunk[];
  /** Records routed under their topic alone: invalid JSON, or an object or array at a field. */
  readonly errors: number;
  readonly tooDeep: number;
  /** Per expression field, in order: records that took the default segment. */
  readonly fallbacks: readonly number[];
  /**
   * The shared memory the groups are views of: given back to the lanes (codecLanes().recycle, which takes only what a
   * lane wrote) once nothing reads the groups again, for their next replies.
   */
  readonly memory: readonly SharedArrayBuffer[];
}

const NEWLINE = 0x0a;
const NO_TOPIC = -1;
const TOO_DEEP_KEY = -1;
const KIND_RECORDS = 0;
const KIND_ENCODED = 1;

/** The block a route lane takes for `batch`, written at the start of `alloc(size)`. */
export function encodeRouteBlock(
  spec: RouteSpec,
  batch: InboundBatch,
  alloc: (size: number) => Buffer = Buffer.allocUnsafe,
): Uint8Array {
  const specBytes = Buffer.from(JSON.stringify(spec));
  const topicBytes = batch.topic === undefined ? undefined : Buffer.from(batch.topic);
  const head = 4 + specBytes.length + 4 + (topicBytes?.length ?? 0) + 1;
  let size = head;
  if (batch.encoded !== undefined) size += 12 + batch.encoded.aborted.length * 16 + batch.encoded.bytes.length;
  else {
    size += 4 + batch.records.length * 12;
    for (const r of batch.records) size += r.value?.length ?? 0;
  }
  const out = alloc(size);
  const view = new DataView(out.buffer, out.byteOffset, out.length);
  let p = 0;
  view.setUint32(p, specBytes.length, true);
  p += 4 + specBytes.copy(out, p + 4);
  view.setInt32(p, topicBytes?.length ?? NO_TOPIC, true);
  p += 4 + (topicBytes?.copy(out, p + 4) ?? 0);
  if (batch.encoded !== undefined) {
    const { fromOffset, aborted, bytes } = batch.encoded;
    out[p++] = KIND_ENCODED;
    view.setFloat64(p, fromOffset, true);
    view.setUint32(p + 8, aborted.length, true);
    p += 12;
    for (const a of aborted) {
      view.setFloat64(p, a.producerId, true);
      view.setFloat64(p + 8, a.firstOffset, true);
      p += 16;
    }
    out.set(bytes, p);
    return out;
  }
  out[p++] = KIND_RECORDS;
  const records = batch.records;
  view.setUint32(p, records.length, true);
  p += 4;
  const offsetsAt = p + records.length * 4;
  let values = p + records.length * 12;
  for (let i = 0; i < records.length; i++) {
    const r = records[i] as InboundRecord;
    const v = r.value;
    view.setUint32(p + i * 4, v?.length ?? 0, true);
    view.setFloat64(offsetsAt + i * 8, Number(r.offset), true);
    if (v !== null && v.length > 0) {
      out.set(v, values);
      values += v.length;
    }
  }
  return out;
}

/**
 * Per record of the block being routed, in arrival order: the source buffer its value lies in, where, its offset and
 * its group. Kept across blocks and grown as needed: two passes over typed arrays, where a group of values and
 * offsets as arrays cost a subarray and two pushes a record, and the collector their garbage.
 */
class Visited {
  count = 0;
  source = new Int32Array(1024);
  start = new Int32Array(1024);
  end = new Int32Array(1024);
  offset = new Float64Array(1024);
  group = new Int32Array(1024);

  push(source: number, start: number, end: number, offset: number, group: number): void {
    const i = this.count++;
    if (i === this.source.length) this.#grow();
    this.source[i] = source;
    this.start[i] = start;
    this.end[i] = end;
    this.offset[i] = offset;
    this.group[i] = group;
  }

  #grow(): void {
    const size = this.source.length * 2;
    const grown = <A extends Int32Array | Float64Array>(a: A, Kind: new (n: number) => A): A => {
      const b = new Kind(size);
      b.set(a);
      return b;
    };
    this.source = grown(this.source, Int32Array);
    this.start = grown(this.start, Int32Array);
    this.end = grown(this.end, Int32Array);
    this.offset = grown(this.offset, Float64Array);
    this.group = grown(this.group, Int32Array);
  }
}

/** One destination's share of one chunk. */
interface Group {
  readonly key: string | typeof TOO_DEEP;
  records: number;
  bytes: number;
}

interface Chunk {
  records: number;
  lastOffset: number;
  /** Indices into the block's groups, in first-seen order. */
  readonly groups: number[];
}

const routers = new Map<string, { router: Router; spec: RouteSpec }>();
const visited = new Visited();
/** Each chunk's own stamp for the routers' key marks (Router.last): never one a mark already holds. */
let chunkStamps = 0;

/**
 * Shared memory for a reply of `size` bytes: at least that many, all of it the reply's. A WebAssembly memory lets
 * reply.wat put the records an lz4 decoder left; any other takes them copied one by one.
 */
export type ReplyMemory = (size: number) => SharedWasmMemory;

/**
 * A reply's memory where nothing recycles it (a batch routed on the event loop): plain shared memory, since each
 * WebAssembly memory reserves gigabytes of address space until it is collected.
 */
const plainMemory: ReplyMemory = (size) => ({ buffer: new SharedArrayBuffer(size) });

/**
 * Routes one block (the lane's side); the reply, laid out as the header comment says, fills the start of shared
 * memory of its own, from `memory`. An encoded batch's records are read by `format` (a lane's is Kafka's, from the
 * transport), each routed where it left them until the reply is encoded.
 */
export function routeBlock(
  block: Uint8Array,
  memory: ReplyMemory = plainMemory,
  format?: EncodedFormat,
): Uint8Array<SharedArrayBuffer> {
  const view = new DataView(block.buffer, block.byteOffset, block.byteLength);
  const text = Buffer.from(block.buffer, block.byteOffset, block.byteLength);
  let p = 0;
  const specLength = view.getUint32(p, true);
  const specText = text.toString("utf8", p + 4, p + 4 + specLength);
  p += 4 + specLength;
  let entry = routers.get(specText);
  if (entry === undefined) {
    const spec = JSON.parse(specText) as RouteSpec;
    const router = createRouter({ mode: spec.mode, fields: [...spec.fields], defaultSegment: spec.defaultSegment });
    routers.set(specText, (entry = { router, spec }));
  }
  const { router, spec } = entry;
  const topicLength = view.getInt32(p, true);
  const topic = topicLength === NO_TOPIC ? undefined : text.toString("utf8", p + 4, p + 4 + topicLength);
  p += 4 + Math.max(0, topicLength);
  const kind = block[p++];

  const sources: Buffer[] = [];
  const groups: Group[] = [];
  const chunks: Chunk[] = [];
  let chunk: Chunk | undefined;
  let inChunk = new Map<string | typeof TOO_DEEP, number>();
  let stamp = 0;
  visited.count = 0;
  const visit = (records: Buffer, start: number, end: number, offset: number): void => {
    if (sources[sources.length - 1] !== records) sources.push(records);
    if (chunk === undefined || chunk.records >= spec.chunk) {
      chunk = { records: 0, lastOffset: offset, groups: [] };
      chunks.push(chunk);
      inChunk = new Map();
      stamp = ++chunkStamps;
    }
    const key = router.route(topic, records, start, end);
    // The key's group in this chunk: kept on its mark once found, so the map is read once a key and chunk.
    const mark = router.last;
    let g: number | undefined;
    if (mark !== undefined && mark.stamp === stamp) g = mark.value;
    else {
      g = inChunk.get(key);
      if (g === undefined) {
        g = groups.push({ key, records: 0, bytes: 0 }) - 1;
        inChunk.set(key, g);
        chunk.groups.push(g);
      }
      if (mark !== undefined) {
        mark.stamp = stamp;
        mark.value = g;
      }
    }
    const group = groups[g] as Group;
    group.records++;
    group.bytes += end - start + 1;
    visited.push(sources.length - 1, start, end, offset, g);
    chunk.records++;
    chunk.lastOffset = offset;
  };
  if (kind === KIND_ENCODED) {
    if (format === undefined) throw new Error("an encoded batch routed with no EncodedFormat to read it");
    const fromOffset = view.getFloat64(p, true);
    const aborted: AbortedTransaction[] = [];
    const abortedCount = view.getUint32(p + 8, true);
    p += 12;
    for (let i = 0; i < abortedCount; i++, p += 16) {
      aborted.push({ producerId: view.getFloat64(p, true), firstOffset: view.getFloat64(p + 8, true) });
    }
    format.forEach(block.subarray(p), fromOffset, visit, aborted);
  } else if (kind === KIND_RECORDS) {
    const count = view.getUint32(p, true);
    p += 4;
    let values = p + count * 12;
    for (let i = 0; i < count; i++) {
      const length = view.getUint32(p + i * 4, true);
      visit(text, values, values + length, view.getFloat64(p + count * 4 + i * 8, true));
      values += length;
    }
  } else throw new Error(`unknown route block kind ${kind}`);
  return encodeReply(chunks, groups, sources, router, spec.fields, memory);
}

const align8 = (n: number): number => (n + 7) & ~7;

/** Where a group's next record goes in the reply. */
interface Cursor {
  offsets: number;
  ends: number;
  data: number;
  end: number;
}

function encodeReply(
  chunks: readonly Chunk[],
  groups: readonly Group[],
  sources: readonly Buffer[],
  router: Router,
  fields: readonly string[],
  memory: ReplyMemory,
): Uint8Array<SharedArrayBuffer> {
  const stats = router.drainStats();
  const keys = new Map<string, Buffer>();
  let size = 8;
  for (const c of chunks) {
    size += 16;
    for (const gi of c.groups) {
      const g = groups[gi] as Group;
      let keyLength = 0;
      if (g.key !== TOO_DEEP) {
        let k = keys.get(g.key);
        if (k === undefined) keys.set(g.key, (k = Buffer.from(g.key)));
        keyLength = k.length;
      }
      size += align8(8 + keyLength) + g.records * 8 + align8(g.records * 4 + 4 + g.bytes);
    }
  }
  size += 12 + fields.length * 4;
  // Recycled memory holds an earlier reply: every byte read back is written here first (the pads are never read).
  // Keys and records go in with copyInto: a batch of one record is the whole of its source, which Buffer#copy would
  // move into shared memory a byte at a time.
  const reply = memory(size);
  const out = Buffer.from(reply.buffer, 0, size);
  const view = new DataView(out.buffer, out.byteOffset, out.length);
  // Records an lz4 decoder left are put by reply.wat, a table of them at a time; others are copied here.
  const putters = new Map<WasmMemory, ReplyPutter>();
  // Pushed, not mapped: an Array#map inlined by TurboFan makes a holey array where the interpreter's is packed, and
  // the load of puts[s] below, seeing both, deoptimized and recompiled this function four times a lane (about 90 ms
  // of recompiling a lane).
  const puts: (ReplyPutter | undefined)[] = [];
  for (const source of sources) puts.push(putterFor(source.buffer, reply, putters));
  const cursors: Cursor[] = new Array<Cursor>(groups.length);
  view.setUint32(0, chunks.length, true);
  let p = 8;
  // First each group's head and place; then the records, each copied once to its group's place.
  for (const c of chunks) {
    view.setUint32(p, c.records, true);
    view.setUint32(p + 4, c.groups.length, true);
    view.setFloat64(p + 8, c.lastOffset, true);
    p += 16;
    for (const gi of c.groups) {
      const g = groups[gi] as Group;
      const key = g.key === TOO_DEEP ? undefined : keys.get(g.key);
      const n = g.records;
      view.setInt32(p, key?.length ?? TOO_DEEP_KEY, true);
      view.setUint32(p + 4, n, true);
      if (key !== undefined) copyInto(out, p + 8, key);
      p += align8(8 + (key?.length ?? 0));
      const endsAt = p + n * 8;
      const dataAt = endsAt + n * 4 + 4;
      view.setUint32(dataAt - 4, g.bytes, true);
      cursors[gi] = { offsets: p, ends: endsAt, data: dataAt, end: 0 };
      p = endsAt + align8(n * 4 + 4 + g.bytes);
    }
  }
  for (let r = 0; r < visited.count; r++) {
    const c = cursors[visited.group[r] ?? 0] as Cursor;
    const start = visited.start[r] ?? 0;
    const end = visited.end[r] ?? 0;
    const s = visited.source[r] ?? 0;
    const source = sources[s] as Buffer;
    const at = c.data + c.end;
    c.end += end - start + 1;
    const put = puts[s];
    if (put !== undefined) {
      put.put(at, source.byteOffset + start, end - start, c.ends, c.end, c.offsets, visited.offset[r] ?? 0);
    } else {
      copyInto(out, at, source, start, end);
      out[at + end - start] = NEWLINE;
      view.setUint32(c.ends, c.end, true);
      view.setFloat64(c.offsets, visited.offset[r] ?? 0, true);
    }
    c.ends += 4;
    c.offsets += 8;
  }
  for (const putter of putters.values()) putter.done();
  view.setUint32(p, stats.errors, true);
  view.setUint32(p + 4, stats.tooDeep, true);
  view.setUint32(p + 8, fields.length, true);
  p += 12;
  // A field named twice counts once, at its first place, as the router's stats merge them by name.
  fields.forEach((field, i) => {
    view.setUint32(p + i * 4, fields.indexOf(field) === i ? (stats.fallbacks.get(field) ?? 0) : 0, true);
  });
  return new Uint8Array(out.buffer, 0, size);
}

/**
 * Reads a route lane's reply (the pipeline's side). Every group reads the reply through the same three views, its
 * bytes and its u32 and f64 words, which is why the reply starts 8-aligned in its buffer (a lane aligns each output;
 * else it is copied once here).
 */
export function readRouted(bytes: Uint8Array): Routed {
  const aligned = bytes.byteOffset % 8 === 0 ? bytes : new Uint8Array(bytes);
  const reply = Buffer.from(aligned.buffer, aligned.byteOffset, aligned.byteLength);
  const view = new DataView(reply.buffer, reply.byteOffset, reply.length);
  // Little-endian words, as the lane wrote them: every platform Node runs on here is little-endian.
  const words = new Uint32Array(reply.buffer, reply.byteOffset, reply.length >> 2);
  const doubles = new Float64Array(reply.buffer, reply.byteOffset, reply.length >> 3);
  const views: ReplyViews = { bytes: reply, words, doubles };
  const chunkCount = view.getUint32(0, true);
  let p = 8;
  const chunks: RoutedChunk[] = [];
  for (let c = 0; c < chunkCount; c++) {
    const records = view.getUint32(p, true);
    const groups = view.getUint32(p + 4, true);
    const lastOffset = view.getFloat64(p + 8, true);
    p += 16;
    chunks.push({ records, lastOffset, groups, at: p, reply: views });
    for (let g = 0; g < groups; g++) p = nextGroup(views, p);
  }
  const errors = view.getUint32(p, true);
  const tooDeep = view.getUint32(p + 4, true);
  const fieldCount = view.getUint32(p + 8, true);
  p += 12;
  const fallbacks: number[] = [];
  for (let i = 0; i < fieldCount; i++) fallbacks.push(view.getUint32(p + i * 4, true));
  const memory = aligned.buffer instanceof SharedArrayBuffer ? [aligned.buffer] : [];
  return { chunks, errors, tooDeep, fallbacks, memory };
}

/**
 * A batch of fewer records is routed on the event loop: a lane's round trip (about 100 µs) costs more than routing
 * them here (about 2 µs a record). A push listener whose senders mix routing keys hands batches of one or two.
 */
const LOCAL_BELOW = 64;

/**
 * Routes `batch` on the least loaded lane, or here when it is small. A fetch of more records than a chunk, from one
 * partition, is cut by `format` at its record batches and routed on every lane at once: left alone, a partition's
 * fetches were routed on one lane while the others idled. Not where the broker lists aborted transactions: whether a
 * batch is aborted rests on the markers before it, which a later piece would not see. The lanes read the pieces with
 * the same format (codec/lane-jobs.ts).
 */
export async function routeBatch(spec: RouteSpec, batch: InboundBatch, format: EncodedFormat): Promise<Routed> {
  const encoded = batch.encoded;
  if (encoded !== undefined && encoded.aborted.length === 0) {
    const pieces = format.cut(encoded.bytes, codecLanes().size, spec.chunk);
    if (pieces.length > 1) {
      const parts = await Promise.all(
        pieces.map((bytes) => routeOne(spec, { ...batch, encoded: { ...encoded, bytes } })),
      );
      return {
        chunks: parts.flatMap((r) => r.chunks),
        errors: parts.reduce((n, r) => n + r.errors, 0),
        tooDeep: parts.reduce((n, r) => n + r.tooDeep, 0),
        fallbacks: spec.fields.map((_, i) => parts.reduce((n, r) => n + (r.fallbacks[i] ?? 0), 0)),
        memory: parts.flatMap((r) => r.memory),
      };
    }
  }
  return routeOne(spec, batch);
}

async function routeOne(spec: RouteSpec, batch: InboundBatch): Promise<Routed> {
  if (batch.records !== undefined && batch.records.length < LOCAL_BELOW) {
    return readRouted(routeBlock(encodeRouteBlock(spec, batch)));
  }
  // Memory of its own, never a slice of Buffer's pool, as the block is the lane's alone: moved with the message, not
  // copied into it, so a fetch's bytes take one ArrayBuffer here rather than two (this thread's collector runs on what
  // ArrayBuffers it allocates). A batch routed here takes the pool's memory, as a push of a record or two does.
  const block = encodeRouteBlock(spec, batch, Buffer.allocUnsafeSlow);
  try {
    return readRouted(await codecLanes().run("route", 0, block, true));
  } catch (err) {
    if (err instanceof Error) throw err;
    const f = err as LaneFailure;
    if (f.kind === "archiver") throw new ArchiverError(f.code, f.message, f.retryable ? "retryable" : "permanent");
    throw new ArchiverError("route_failed", `routing a batch failed: ${f.message}`, "permanent");
  }
}
