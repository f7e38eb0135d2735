// Native addons loaded where they are first used rather than where they are imported: a module on the start's path
// that only one codec or one batch format needs would make every start dlopen it (snappy 6 ms, lz4-napi and
// @node-rs/crc32 2 ms each), on the event loop and on each codec lane before its first job.
import { createRequire } from "node:module";

const load = createRequire(import.meta.url);

/** A getter for the native module `id`, required on its first call. */
export function lazyNative<T>(id: string): () => T {
  let loaded: T | undefined;
  return () => (loaded ??= load(id) as T);
}
