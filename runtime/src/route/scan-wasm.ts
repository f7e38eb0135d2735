// The WebAssembly scan (wasm/scan.wat): extract.ts's validating pass for records whose routed paths are all
// top-level plain keys, 2.6 times as fast on the bench's records (0.71 against 1.86 µs), mostly from string bodies
// read 16 bytes at a time. A record decoded by an lz4 decoder (Kafka's lz4 batches) is scanned where it lies in the
// decoder's memory, the scan's tables at its head (wasm/memory.ts maps both memories); any other is copied into the
// scanner's own memory, so nothing depends on how long the caller's buffer lives or whether it changes.

import { compiledOnce, Wasm, WASM_PAGE, type WasmMemory } from "../wasm/loader.ts";
import {
  decoderMemory,
  DECODED_AT,
  RECORD_AT,
  SCAN_ESCAPE_AT,
  SCAN_HEX_AT,
  SCAN_KEY_STRIDE,
  SCAN_KEYS_AT,
  SCAN_SLOT_BYTES,
  SCAN_SLOTS_AT,
} from "../wasm/memory.ts";
import { SCAN_MODULE } from "../wasm/scan-module.ts";

/** Bytes kept past a record: the scan reads words near a record's end before checking how far it is. */
const SLACK = 16;

/** Keys the module can hold, and their longest. */
export const WASM_MAX_KEYS = 7;
export const WASM_MAX_KEY_BYTES = SCAN_KEY_STRIDE - 4;

/** scan's verdicts: extract.ts's ScanResult, and Unhandled for a record the JavaScript scan must read instead. */
export const WasmVerdict = { Ok: 0, Invalid: 1, TooDeep: 2, Unhandled: 3 } as const;

interface ScanExports {
  scan(p: number, n: number, maxDepth: number): number;
}

const scanModule = compiledOnce(SCAN_MODULE);

/** The scan instantiated over one memory, and views of that memory (growing it detaches them). */
class Bound {
  readonly memory: WasmMemory;
  readonly exports: ScanExports;
  bytes = Buffer.alloc(0);
  words = new Uint32Array(0);

  constructor(memory: WasmMemory) {
    this.memory = memory;
    this.exports = new Wasm.Instance(scanModule(), { env: { memory } }).exports as ScanExports;
    this.views();
  }

  views(): void {
    this.bytes = Buffer.from(this.memory.buffer);
    this.words = new Uint32Array(this.memory.buffer);
  }
}

/**
 * The decoder memory whose tables were written last, and for which scanner: scanners reading one memory (a reload's
 * two routers) take turns writing their keys there, and a memory not named here is written before it is read.
 */
let tables: { memory: WasmMemory; scanner: WasmScanner } | undefined;

/** One scanner per extractor: its keys, its own memory, and the decoder memory it last read in place. */
export class WasmScanner {
  readonly #keys: readonly Uint8Array[];
  readonly #own: Bound;
  #shared: Bound | undefined;
  /** The last buffer found to be no decoder's, so records copied from it look it up once. */
  #foreign: ArrayBufferLike | undefined;
  /** The instance of the last scan, whose slots are read, and where its record started in that memory. */
  #last: Bound;
  #base = RECORD_AT;

  /** A scanner for `keys`, or undefined where this Node has no WebAssembly SIMD (never on Node 24). */
  static open(keys: readonly Uint8Array[]): WasmScanner | undefined {
    if (keys.length > WASM_MAX_KEYS || keys.some((k) => k.length > WASM_MAX_KEY_BYTES)) {
      throw new RangeError(`at most ${WASM_MAX_KEYS} keys of at most ${WASM_MAX_KEY_BYTES} bytes`);
    }
    try {
      scanModule();
    } catch (err) {
      if (err instanceof Wasm.CompileError) return undefined;
      throw err;
    }
    return new WasmScanner(keys);
  }

  private constructor(keys: readonly Uint8Array[]) {
    this.#keys = keys;
    this.#own = new Bound(new Wasm.Memory({ initial: Math.ceil((RECORD_AT + SLACK) / WASM_PAGE) }));
    this.#last = this.#own;
    this.#writeTables(this.#own);
  }

  #writeTables(at: Bound): void {
    const b = at.bytes;
    b.fill(255, SCAN_HEX_AT, SCAN_HEX_AT + 256);
    for (let d = 0; d < 16; d++) {
      b[SCAN_HEX_AT + "0123456789abcdef".charCodeAt(d)] = d;
      b[SCAN_HEX_AT + "0123456789ABCDEF".charCodeAt(d)] = d;
    }
    b.fill(0, SCAN_ESCAPE_AT, SCAN_ESCAPE_AT + 256);
    for (const c of '"\\/bfnrt') b[SCAN_ESCAPE_AT + c.charCodeAt(0)] = 1;
    b.writeUInt32LE(this.#keys.length, SCAN_KEYS_AT);
    this.#keys.forEach((k, i) => {
      b.writeUInt32LE(k.length, SCAN_KEYS_AT + 4 + i * SCAN_KEY_STRIDE);
      b.set(k, SCAN_KEYS_AT + 8 + i * SCAN_KEY_STRIDE);
    });
    if (at !== this.#own) tables = { memory: at.memory, scanner: this };
  }

  /**
   * Scans the record in buf[start, end); returns a WasmVerdict. After Ok, key i's slot holds its kind and its span,
   * in buf's coordinates.
   */
  scan(buf: Uint8Array, start: number, end: number, maxDepth: number): number {
    const depth = Math.min(maxDepth, 0x7fffffff);
    const length = end - start;
    const at = buf.byteOffset + start;
    const shared = this.#inPlace(buf.buffer, at, at + length + SLACK);
    if (shared !== undefined) {
      this.#last = shared;
      this.#base = at;
      return shared.exports.scan(at, at + length, depth);
    }
    const own = this.#own;
    if (RECORD_AT + length + SLACK > own.bytes.length) {
      own.memory.grow(Math.ceil((RECORD_AT + length + SLACK - own.bytes.length) / WASM_PAGE));
      own.views();
    }
    // Buffer#copy where it can: a subarray and TypedArray#set a record took more than the copy itself.
    if (Buffer.isBuffer(buf)) buf.copy(own.bytes, RECORD_AT, start, end);
    else own.bytes.set(buf.subarray(start, end), RECORD_AT);
    this.#last = own;
    this.#base = RECORD_AT;
    // The slack after this record may hold the tail of a longer one: the scan only ever compares it, never accepts it.
    return own.exports.scan(RECORD_AT, RECORD_AT + length, depth);
  }

  /**
   * The scan over the decoder memory `buffer` belongs to, where [at, until) lies in it past the tables; else
   * undefined, and the record is copied.
   */
  #inPlace(buffer: ArrayBufferLike, at: number, until: number): Bound | undefined {
    let shared = this.#shared;
    if (shared === undefined || shared.bytes.buffer !== buffer) {
      if (buffer === this.#foreign) return undefined;
      const memory = decoderMemory(buffer);
      if (memory === undefined) {
        this.#foreign = buffer;
        return undefined;
      }
      if (shared?.memory === memory) shared.views();
      else this.#shared = shared = new Bound(memory);
    }
    if (at < DECODED_AT || until > buffer.byteLength) return undefined;
    if (tables?.memory !== shared.memory || tables.scanner !== this) this.#writeTables(shared);
    return shared;
  }

  /** Whether the last scan read its record where an lz4 decoder left it, rather than a copy. */
  get inPlace(): boolean {
    return this.#last !== this.#own;
  }

  /** Key i's kind after the last Ok scan (extract.ts's FieldKind). */
  kind(i: number): number {
    return this.#last.words[(SCAN_SLOTS_AT + i * SCAN_SLOT_BYTES) >> 2] as number;
  }

  /** Where key i's value starts in the scanned record's buffer, given the record's start there. */
  start(i: number, recordStart: number): number {
    return (this.#last.words[(SCAN_SLOTS_AT + i * SCAN_SLOT_BYTES + 4) >> 2] as number) - this.#base + recordStart;
  }

  end(i: number, recordStart: number): number {
    return (this.#last.words[(SCAN_SLOTS_AT + i * SCAN_SLOT_BYTES + 8) >> 2] as number) - this.#base + recordStart;
  }

  /** Whether key i's string value holds an escape. */
  escaped(i: number): boolean {
    return this.#last.words[(SCAN_SLOTS_AT + i * SCAN_SLOT_BYTES + 12) >> 2] === 1;
  }
}
