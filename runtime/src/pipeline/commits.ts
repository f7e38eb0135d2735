// The commits: what completed files released goes to the transport as each partition's floor, at most one commit
// every COMMIT_SPACING_MS: with ten thousand files completing at a drain, a commit each (each reading every open hold
// for the floors) took 2.4 s of the event loop. Reading the floors costs a visit to every open hold, so commits are
// spaced by FLOOR_SPACING times what that took too: a skewed workload's 100,000 holds took 12 ms a reading, and 10
// commits a second were 23 s of a 185 s run. A heap of each hold's lowest offsets instead cost 13 MB of heap at
// 100,000 destinations, which the heap of a 512 MiB limit did not have.
import { setTimeout as sleep } from "node:timers/promises";
import type { Logger } from "pino";
import type { OffsetTracker } from "../delivery/tracker.ts";
import type { Metrics } from "../observe/metrics.ts";
import type { Transport } from "../transport/types.ts";

/** Commits start at least this far apart. */
export const COMMIT_SPACING_MS = 100;
/** And at least this many times as far apart as reading the floors took, so it is at most a 20th of the event loop. */
const FLOOR_SPACING = 20;
/** The drain's last commit is retried this long at most (a rebalance or a broker away refuses it for a while). */
export const DRAIN_COMMIT_MS = 10_000;

export interface CommitsDeps {
  readonly tracker: Pick<OffsetTracker, "commitable" | "committed">;
  readonly transport: Pick<Transport, "commit">;
  readonly metrics: Pick<Metrics, "kafkaCommitErrors">;
  readonly log: Logger;
}

export class Commits {
  readonly #d: CommitsDeps;
  #committing: Promise<unknown> | undefined;
  #again = false;
  #timer: NodeJS.Timeout | undefined;
  #lastAt = -Infinity;
  /** What the last reading of the floors took, in milliseconds. */
  #floorsMs = 0;

  constructor(deps: CommitsDeps) {
    this.#d = deps;
  }

  /** Commits what moved now, or once the one running or COMMIT_SPACING_MS since the last start lets it. */
  schedule(): void {
    if (this.#committing !== undefined || this.#timer !== undefined) {
      this.#again = true;
      return;
    }
    const wait = this.#lastAt + Math.max(COMMIT_SPACING_MS, FLOOR_SPACING * this.#floorsMs) - performance.now();
    if (wait > 0) {
      this.#timer = setTimeout(() => {
        this.#timer = undefined;
        this.schedule();
      }, wait);
      return;
    }
    this.#lastAt = performance.now();
    this.#committing = this.#commit().finally(() => {
      this.#committing = undefined;
      if (this.#again) {
        this.#again = false;
        this.schedule();
      }
    });
  }

  /** Commits what moved now, spacing aside (a hand-over's); false when the transport refused it. */
  now(): Promise<boolean> {
    return this.#commit();
  }

  /**
   * The drain's commit: after the one running, in place of a spaced one waiting (it covers what that would), retried
   * for DRAIN_COMMIT_MS: one refused (a rebalance in progress, the broker away) left everything since the last commit
   * to be read again by the partitions' next owners.
   */
  async last(): Promise<void> {
    while (this.#committing !== undefined) await this.#committing;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const deadline = performance.now() + DRAIN_COMMIT_MS;
    while (!(await this.#commit()) && performance.now() < deadline) await sleep(COMMIT_SPACING_MS * 5);
  }

  /** Commits what moved; false when the transport refused the commit (it is retried at the next one). */
  async #commit(): Promise<boolean> {
    const started = performance.now();
    const offsets = this.#d.tracker.commitable();
    this.#floorsMs = performance.now() - started;
    if (offsets.length === 0) return true;
    try {
      await this.#d.transport.commit(offsets);
      this.#d.tracker.committed(offsets);
      return true;
    } catch (err) {
      this.#d.metrics.kafkaCommitErrors.inc();
      this.#d.log.warn({ err, offsets }, "offset commit failed; retried at the next commit");
      return false;
    }
  }
}
