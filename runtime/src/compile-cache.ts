// Node's on-disk compile cache (V8 code cache, and the TypeScript stripped from the sources), for the process and for
// each lane's thread: a thread's cache is its own to turn on and to write. Where it lives: NODE_COMPILE_CACHE, else
// Node's default under the temp directory. A directory that cannot be written leaves the cache off, and the process
// runs as it would without it.
import module from "node:module";

export function enableCompileCache(): void {
  module.enableCompileCache?.();
}

/** Writes what this thread compiled so far; a lane's thread is ended at exit without writing it. */
export function flushCompileCache(): void {
  module.flushCompileCache?.();
}
