// The WebAssembly scan (scan.wat, assembled into scan-module.ts by scripts/generate.ts): extract.ts's validating pass
// for records whose routed paths are all top-level plain keys, 2.6 times as fast on the bench's records (0.71 against
// 1.86 µs), mostly from string bodies read 16 bytes at a time. Each record is copied into the module's memory, so
// nothing here depends on how long the caller's buffer lives or whether it changes.

import { SCAN_MODULE } from "./scan-module.ts";

// The module's memory layout, as scan.wat's header gives it.
const HEX_AT = 0;
const ESCAPE_AT = 256;
const KEYS_AT = 512;
const KEY_STRIDE = 64;
const SLOTS_AT = 1024;
const SLOT_BYTES = 16;
const RECORDS_AT = 67_584;
/** Bytes kept past a record: the scan reads words near a record's end before checking how far it is. */
const SLACK = 16;
const PAGE = 65_536;

/** Keys the module can hold, and their longest. */
export const WASM_MAX_KEYS = 7;
export const WASM_MAX_KEY_BYTES = KEY_STRIDE - 4;

/** scan's verdicts: extract.ts's ScanResult, and Unhandled for a record the JavaScript scan must read instead. */
export const WasmVerdict = { Ok: 0, Invalid: 1, TooDeep: 2, Unhandled: 3 } as const;

interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}

interface ScanExports {
  readonly memory: WasmMemory;
  scan(p: number, n: number, maxDepth: number): number;
}

// The part of the WebAssembly global used here: TypeScript declares it only in its DOM libraries.
declare const WebAssembly: {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object) => { readonly exports: unknown };
  CompileError: new () => Error;
};

let compiled: object | undefined;

/** One instance per scanner: its memory holds the record, the keys and the slots of the last scan. */
export class WasmScanner {
  readonly #exports: ScanExports;
  #bytes: Buffer;
  #words: Uint32Array;

  /** A scanner for `keys`, or undefined where this Node has no WebAssembly SIMD (never on Node 24). */
  static open(keys: readonly Uint8Array[]): WasmScanner | undefined {
    if (keys.length > WASM_MAX_KEYS || keys.some((k) => k.length > WASM_MAX_KEY_BYTES)) {
      throw new RangeError(`at most ${WASM_MAX_KEYS} keys of at most ${WASM_MAX_KEY_BYTES} bytes`);
    }
    try {
      compiled ??= new WebAssembly.Module(Buffer.from(SCAN_MODULE, "base64"));
    } catch (err) {
      if (err instanceof WebAssembly.CompileError) return undefined;
      throw err;
    }
    return new WasmScanner(keys, new WebAssembly.Instance(compiled).exports as ScanExports);
  }

  private constructor(keys: readonly Uint8Array[], exports: ScanExports) {
    this.#exports = exports;
    this.#bytes = Buffer.alloc(0);
    this.#words = new Uint32Array(0);
    this.#views();
    const b = this.#bytes;
    b.fill(255, HEX_AT, HEX_AT + 256);
    for (let d = 0; d < 16; d++) {
      b[HEX_AT + "0123456789abcdef".charCodeAt(d)] = d;
      b[HEX_AT + "0123456789ABCDEF".charCodeAt(d)] = d;
    }
    for (const c of '"\\/bfnrt') b[ESCAPE_AT + c.charCodeAt(0)] = 1;
    b.writeUInt32LE(keys.length, KEYS_AT);
    keys.forEach((k, i) => {
      b.writeUInt32LE(k.length, KEYS_AT + 4 + i * KEY_STRIDE);
      b.set(k, KEYS_AT + 8 + i * KEY_STRIDE);
    });
  }

  /**
   * Scans the record in buf[start, end); returns a WasmVerdict. After Ok, key i's slot holds its kind and its span,
   * in buf's coordinates.
   */
  scan(buf: Uint8Array, start: number, end: number, maxDepth: number): number {
    const length = end - start;
    if (RECORDS_AT + length + SLACK > this.#bytes.length) this.#grow(RECORDS_AT + length + SLACK);
    // Buffer#copy where it can: a subarray and TypedArray#set a record took more than the copy itself.
    if (Buffer.isBuffer(buf)) buf.copy(this.#bytes, RECORDS_AT, start, end);
    else this.#bytes.set(buf.subarray(start, end), RECORDS_AT);
    // The slack after this record may hold the tail of a longer one: the scan only ever compares it, never accepts it.
    return this.#exports.scan(RECORDS_AT, RECORDS_AT + length, Math.min(maxDepth, 0x7fffffff));
  }

  /** Key i's kind after the last Ok scan (extract.ts's FieldKind). */
  kind(i: number): number {
    return this.#words[(SLOTS_AT + i * SLOT_BYTES) >> 2] as number;
  }

  /** Where key i's value starts in the scanned record's buffer, given the record's start there. */
  start(i: number, recordStart: number): number {
    return (this.#words[(SLOTS_AT + i * SLOT_BYTES + 4) >> 2] as number) - RECORDS_AT + recordStart;
  }

  end(i: number, recordStart: number): number {
    return (this.#words[(SLOTS_AT + i * SLOT_BYTES + 8) >> 2] as number) - RECORDS_AT + recordStart;
  }

  /** Whether key i's string value holds an escape. */
  escaped(i: number): boolean {
    return this.#words[(SLOTS_AT + i * SLOT_BYTES + 12) >> 2] === 1;
  }

  #grow(size: number): void {
    const memory = this.#exports.memory;
    memory.grow(Math.ceil((size - memory.buffer.byteLength) / PAGE));
    this.#views();
  }

  // Growing the memory detaches the views over it.
  #views(): void {
    const buffer = this.#exports.memory.buffer;
    this.#bytes = Buffer.from(buffer);
    this.#words = new Uint32Array(buffer);
  }
}
