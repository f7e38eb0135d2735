// The workers between the queue and reconcile: a key is reconciled by one worker at a time (the queue sees to it),
// forgotten on success, requeued after its backoff on failure, and looked at again when reconcile asks.
import type { Logger } from "pino";
import type { WorkQueue } from "./queue.ts";
import type { ReconcileResult } from "./reconcile.ts";

export interface Reconcile {
  reconcile(key: string): Promise<ReconcileResult>;
}

export interface ControllerOptions {
  workers: number;
  log: Logger;
  /** Told the outcome and duration of every reconcile. */
  observe?: (ok: boolean, seconds: number) => void;
}

export class Controller {
  readonly #reconciler: Reconcile;
  readonly #queue: WorkQueue;
  readonly #opts: ControllerOptions;
  #workers: Promise<void>[] = [];

  constructor(reconciler: Reconcile, queue: WorkQueue, opts: ControllerOptions) {
    this.#reconciler = reconciler;
    this.#queue = queue;
    this.#opts = opts;
  }

  start(): void {
    if (this.#workers.length > 0) return;
    for (let i = 0; i < this.#opts.workers; i++) this.#workers.push(this.#work());
  }

  /** Drains the queue: reconciles already queued or running finish, then the workers end. */
  async stop(): Promise<void> {
    await this.#queue.shutDown();
    await Promise.all(this.#workers);
  }

  async #work(): Promise<void> {
    const q = this.#queue;
    for (let key = await q.get(); key !== undefined; key = await q.get()) {
      const started = performance.now();
      let ok = true;
      try {
        const result = await this.#reconciler.reconcile(key);
        q.forget(key);
        if (result.requeueAfterMs !== undefined) q.addAfter(key, result.requeueAfterMs);
      } catch (err) {
        ok = false;
        this.#opts.log.warn({ pipeline: key, err, retryInMs: q.backoff(key) }, "reconcile failed");
        q.addRateLimited(key);
      } finally {
        this.#opts.observe?.(ok, (performance.now() - started) / 1000);
        q.done(key);
      }
    }
  }
}
