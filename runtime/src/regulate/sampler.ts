// Process memory as the kernel counts it against the cgroup limit (RSS), read cheaply enough to call per batch:
// process.memoryUsage.rss() reads one figure, where process.memoryUsage() also collects V8's heap statistics.
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

export type ReadRss = () => number;

export const readRss: ReadRss = () => process.memoryUsage.rss();

/** RSS over the memory guard's limit: the raw memory ratio the scaling terms and the memory gate read. */
export function memoryRatio(rssBytes: number, limitBytes: number): number {
  return limitBytes > 0 ? rssBytes / limitBytes : 0;
}

// V8 collects garbage only as it allocates, so a process whose intake the memory source paused allocates almost
// nothing and its RSS keeps the garbage of the work it finished: the latch would never see memory fall and never
// resume. A full collection, made callable at startup, returns that memory before the next reading. The last-resort
// flavour (V8's low-memory collection) also hands back the pages V8 keeps pooled and shrinks the young generation:
// an ordinary full collection frees the objects but left RSS where it was, above the resume point.
setFlagsFromString("--expose-gc");
type Gc = (options: { type: "major"; flavor?: "last-resort"; execution?: "async" }) => Promise<void> | undefined;
const gc = runInNewContext("gc") as Gc;
let lastCollect = 0;

/**
 * A full garbage collection, at most once per `minIntervalMs`; true when it ran. The last-resort flavour blocks the
 * event loop for several full collections in a row (0.4 s each on a 10,000-destination run, 9 s of a 55 s run when
 * made at every reading while paused), so it is for a process with nothing left in flight; otherwise the collection
 * is started and left to run beside the work (V8 marks concurrently), and RSS falls once it finishes.
 */
export function reclaim(lastResort: boolean, minIntervalMs = 2000, now = Date.now()): boolean {
  if (now - lastCollect < minIntervalMs) return false;
  lastCollect = now;
  if (lastResort) gc({ type: "major", flavor: "last-resort" });
  else collectSoon();
  return true;
}

/** Starts a full collection and leaves it to run beside the work. */
export function collectSoon(): void {
  void gc({ type: "major", execution: "async" });
}
