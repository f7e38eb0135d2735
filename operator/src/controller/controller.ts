// The workers between the queue and reconcile: a key is reconciled by one worker at a time (the queue sees to it),
// forgotten on success and requeued after its backoff on failure. Nothing is polled: every change that matters to a
// pipeline (its spec, its Deployment, its pods, its Secrets, KEDA's presence) arrives through a watch.
import type { Logger } from "pino";
import type { WorkQueue } from "./queue.ts";

export interface Reconcile {
  reconcile(key: string): Promise<void>;
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
        await this.#reconciler.reconcile(key);
        q.forget(key);
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
