// A revoked partition's hand-over. Its next owner reads it from the committed offset, so whatever the last owner
// archived past that offset is archived twice. Before the transport lets the partition go, the records received of it
// are made durable and committed: its batches still being routed end, the hot buffers holding its records flush and
// the flushes land, the files holding them complete (uploaded), and the floor is committed, retried until it lands.
// The transport bounds it (the rebalance or session timeout, by `signal`): what is not committed by then is released
// as before, and its next owner reads it again.
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import type { PartitionRef } from "./tracker.ts";

/** Between commit attempts of a hand-over whose commit failed (a broker away, a coordinator moving). */
const COMMIT_RETRY_MS = 250;

/** What a hand-over asks of the pipeline, for the partition slots it hands over. */
export interface HandOverSteps {
  /** Resolves once no batch of these slots is being routed or buffered. */
  batchesEnded(slots: ReadonlySet<number>): Promise<unknown>;
  /** Flushes the hot buffers holding these slots' records; resolves once every flush in flight has landed. */
  flush(slots: ReadonlySet<number>): Promise<void>;
  /** Completes the files holding these slots' records; resolves once they, and every file completing, are done. */
  roll(slots: ReadonlySet<number>): Promise<void>;
  /** Commits every floor that moved, now. */
  commit(): Promise<unknown>;
  /** True once these slots' records are all released and committed. */
  handedOver(slots: ReadonlySet<number>): boolean;
  /** Uploads retry promptly until the returned release is called (StagingStore.hurry); undefined without staging. */
  hurry: (() => () => void) | undefined;
}

export type HandOverOutcome = "done" | "cut_short";

/** Runs a hand-over of `slots` (the slots of `partitions`) until it is done or `signal` aborts. */
export async function handOver(
  steps: HandOverSteps,
  partitions: readonly PartitionRef[],
  slots: ReadonlySet<number>,
  signal: AbortSignal,
  log: Logger,
): Promise<HandOverOutcome> {
  const started = performance.now();
  const release = steps.hurry?.();
  let step = "batches";
  try {
    const stop = aborted(signal);
    const bounded = <T>(p: Promise<T>): Promise<T> => Promise.race([p, stop]);
    await bounded(steps.batchesEnded(slots));
    step = "flush";
    await bounded(steps.flush(slots));
    step = "files";
    await bounded(steps.roll(slots));
    step = "commit";
    for (;;) {
      await bounded(steps.commit());
      if (steps.handedOver(slots)) break;
      await sleep(COMMIT_RETRY_MS, undefined, { signal });
    }
    log.info({ partitions, ms: Math.round(performance.now() - started) }, "revoked partitions handed over: committed");
    return "done";
  } catch (err) {
    if (!signal.aborted) throw err;
    log.warn(
      { partitions, step, ms: Math.round(performance.now() - started) },
      "revoked partitions' hand-over cut short at its bound: what is not committed is read again by the next owner",
    );
    return "cut_short";
  } finally {
    release?.();
  }
}

/** Rejects once `signal` aborts. */
function aborted(signal: AbortSignal): Promise<never> {
  return new Promise((_, reject) => {
    if (signal.aborted) reject(signal.reason as Error);
    else signal.addEventListener("abort", () => reject(signal.reason as Error), { once: true });
  });
}
