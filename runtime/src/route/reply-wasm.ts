// The route reply's records, put in place from an lz4 decoder's memory by wasm/reply.wat: rows of copies written
// here into the decoder's memory (its reply table, see wasm/memory.ts), then put a table at a time. A Buffer#copy a
// record, with its argument checks and handle scopes, was about a seventh of the lanes' time on the bench.

import { compiledOnce, Wasm, WASM_PAGE, type SharedWasmMemory, type WasmMemory } from "../wasm/loader.ts";
import { decoderMemory, REPLY_TABLE_AT, REPLY_TABLE_BYTES } from "../wasm/memory.ts";
import { REPLY_MODULE } from "../wasm/reply-module.ts";

const ROW_BYTES = 32;
const ROWS = REPLY_TABLE_BYTES / ROW_BYTES;

const replyModule = compiledOnce(REPLY_MODULE);

/** Shared memory for a route reply of `bytes`, which reply.wat can write and the event loop read where it lies. */
export function sharedReplyMemory(bytes: number): SharedWasmMemory {
  const pages = Math.max(1, Math.ceil(bytes / WASM_PAGE));
  return new Wasm.Memory({ initial: pages, maximum: pages, shared: true });
}

/** Puts records that lie in one decoder's memory into one reply; call done() once the last is asked for. */
export class ReplyPutter {
  readonly #put: (table: number, rows: number) => void;
  readonly #i32: Int32Array;
  readonly #f64: Float64Array;
  #rows = 0;

  constructor(records: WasmMemory, reply: SharedWasmMemory) {
    const exports = new Wasm.Instance(replyModule(), { env: { records, reply } }).exports as {
      put(table: number, rows: number): void;
    };
    this.#put = exports.put;
    // The decoder's memory does not grow while a reply is encoded: its run is sized when it begins.
    this.#i32 = new Int32Array(records.buffer, REPLY_TABLE_AT, REPLY_TABLE_BYTES >> 2);
    this.#f64 = new Float64Array(records.buffer, REPLY_TABLE_AT, REPLY_TABLE_BYTES >> 3);
  }

  /**
   * Copies `length` bytes from `from` in the decoder's memory to `to` in the reply, a newline after them, and writes
   * `end` at `endAt` (u32) and `offset` at `offsetAt` (f64) in the reply; done by the time done() returns.
   */
  put(to: number, from: number, length: number, endAt: number, end: number, offsetAt: number, offset: number): void {
    const i = this.#rows << 3;
    const a = this.#i32;
    a[i] = to;
    a[i + 1] = from;
    a[i + 2] = length;
    a[i + 3] = endAt;
    a[i + 4] = end;
    a[i + 5] = offsetAt;
    this.#f64[(i >> 1) + 3] = offset;
    if (++this.#rows === ROWS) this.done();
  }

  done(): void {
    if (this.#rows === 0) return;
    this.#put(REPLY_TABLE_AT, this.#rows);
    this.#rows = 0;
  }
}

/**
 * A putter for records in `source`, when it is a decoder's memory and `reply` a WebAssembly memory; one per memory
 * and reply, from `putters`.
 */
export function putterFor(
  source: ArrayBufferLike,
  reply: SharedWasmMemory,
  putters: Map<WasmMemory, ReplyPutter>,
): ReplyPutter | undefined {
  const records = decoderMemory(source);
  if (records === undefined || !(reply instanceof Wasm.Memory)) return undefined;
  let putter = putters.get(records);
  if (putter === undefined) putters.set(records, (putter = new ReplyPutter(records, reply)));
  return putter;
}
