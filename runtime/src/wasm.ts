// The parts of the WebAssembly global the runtime uses, typed once: TypeScript declares them only in its DOM
// libraries.

/** A WebAssembly memory, as the parts of the runtime that share one see it: its buffer is replaced when it grows. */
export interface WasmMemory {
  readonly buffer: ArrayBuffer;
  grow(pages: number): number;
}

/** A shared WebAssembly memory: its buffer is read and written where it lies by every thread it is posted to. */
export interface SharedWasmMemory {
  readonly buffer: SharedArrayBuffer;
}

interface WasmGlobal {
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object, imports?: object) => { readonly exports: unknown };
  Memory: {
    new (descriptor: { initial: number; maximum: number; shared: true }): SharedWasmMemory;
    new (descriptor: { initial: number }): WasmMemory;
  };
  CompileError: new () => Error;
}

export const Wasm = (globalThis as unknown as { WebAssembly: WasmGlobal }).WebAssembly;

export const WASM_PAGE = 65_536;
