// The parts of the WebAssembly global the runtime uses, typed once (TypeScript declares them only in its DOM
// libraries), and the loading of the runtime's modules: each .wat here is assembled by scripts/generate.ts into the
// base64 of a *-module.ts beside it, so the runtime loads them from its sources and from its build alike.

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

/**
 * The module whose bytes `base64` holds (a *-module.ts export), compiled at the first call, on the thread that makes
 * it, and kept: a lane compiles only the modules its jobs use. Throws Wasm.CompileError where this engine cannot.
 */
export function compiledOnce(base64: string): () => object {
  let compiled: object | undefined;
  return () => (compiled ??= new Wasm.Module(Buffer.from(base64, "base64")));
}
