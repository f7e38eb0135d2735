// V8's heap sized from the memory guard's limit. V8 sizes its heap from the machine, not from a limit it cannot
// see: on a 24 GB host its young generation alone commits 128 MiB (two 64 MiB semi-spaces, whatever
// --max-old-space-size says), a quarter of a 512 MiB limit, and its old space may grow past the limit before it
// collects. So the process restarts itself once, in place (execve: same pid, same stdio, signals still reach it),
// with heap flags from its limit (given, its cgroup's, or the default one: regulate/memory.ts) and the allocator
// settings that let freed memory go back (allocatorEnv). A flag or variable the operator already set wins.
import type { MemoryLimit } from "./memory.ts";

const MIB = 1 << 20;
const MIN_OLD_SPACE_MIB = 256;
/** Marks the process as restarted with its heap flags, so it never restarts again (outside DFE_ARCHIVER_*, which the config reads). */
export const HEAP_SIZED_ENV = "DFE_HEAP_SIZED";

/**
 * The heap flags for a limit: half of it for the old space, but never under the 256 MiB the process can need (its
 * module graph alone is some 70 MiB of heap, and a heap limit under the live set kills the process), and a
 * 64th of it per semi-space (8 MiB at 512 MiB; 1 to 64 MiB, V8's own ceiling): scavenges stay cheap and frequent
 * while the young generation commits a 32nd of the limit.
 */
export function heapFlags(limitBytes: number): { oldSpaceMiB: number; semiSpaceMiB: number } {
  const mib = Math.floor(limitBytes / MIB);
  return {
    oldSpaceMiB: Math.max(MIN_OLD_SPACE_MIB, Math.floor(mib / 2)),
    semiSpaceMiB: Math.max(1, Math.min(64, Math.floor(mib / 64))),
  };
}

/**
 * The semi-space with the default limit: a 512th of it. A single-topic run (1M records, 1 MiB fetches) peaked at
 * 236-239 MiB with a 64th (16 MiB), 219-228 MiB with 4 MiB and 209-218 MiB with 2 MiB, in the same time and CPU.
 */
const DEFAULT_SEMI_SPACE_MIB = 2;

/**
 * The flags to add: those `given` (execArgv and NODE_OPTIONS) does not already set. With the default limit (none
 * given or found) no old-space ceiling: nothing outside binds the process, and a ceiling would turn growth into a crash.
 */
export function missingHeapFlags(memory: MemoryLimit, given: readonly string[]): string[] {
  const { oldSpaceMiB, semiSpaceMiB } = heapFlags(memory.bytes);
  const has = (name: string) =>
    given.some((a) => a.startsWith(`--${name}`) || a.startsWith(`--${name.replaceAll("-", "_")}`));
  const out: string[] = [];
  if (memory.source !== "default" && !has("max-old-space-size")) out.push(`--max-old-space-size=${oldSpaceMiB}`);
  const semi = memory.source === "default" ? DEFAULT_SEMI_SPACE_MIB : semiSpaceMiB;
  if (!has("max-semi-space-size")) out.push(`--max-semi-space-size=${semi}`);
  return out;
}

/**
 * glibc's allocator settings for the restart, those `env` does not already set. Its default threshold for giving a
 * large block its own mapping rises to the largest block ever freed (up to 32 MiB), after which freed hot-buffer
 * blocks stay in its heap: at a 512 MiB limit RSS stayed at 529 MB with every buffer flushed, and the memory latch
 * never resumed. A fixed 128 KiB threshold returns such blocks at once; two arenas rather than eight a core keep the
 * lanes' and the pool's threads from each holding freed memory of their own.
 */
export function allocatorEnv(env: NodeJS.ProcessEnv): Record<string, string> {
  const out: Record<string, string> = {};
  if (env.MALLOC_ARENA_MAX === undefined) out.MALLOC_ARENA_MAX = "2";
  if (env.MALLOC_MMAP_THRESHOLD_ === undefined) out.MALLOC_MMAP_THRESHOLD_ = String(128 * 1024);
  return out;
}

/**
 * Restarts the process with the heap flags its memory limit calls for, unless it already was or the operator set
 * them. Returns only when no restart was needed or possible (then the reason, for a warning).
 */
export function sizeHeap(memory: MemoryLimit, env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (env[HEAP_SIZED_ENV] !== undefined) return undefined;
  const given = [...process.execArgv, ...(env.NODE_OPTIONS ?? "").split(/\s+/)];
  const flags = missingHeapFlags(memory, given);
  if (flags.length === 0) return undefined;
  if (typeof process.execve !== "function") {
    return `V8's heap is not sized from the ${memory.bytes}-byte memory limit: start node with ${flags.join(" ")}`;
  }
  process.execve(process.execPath, [process.execPath, ...process.execArgv, ...flags, ...process.argv.slice(1)], {
    ...env,
    ...allocatorEnv(env),
    [HEAP_SIZED_ENV]: flags.join(" "),
  });
  return undefined;
}
