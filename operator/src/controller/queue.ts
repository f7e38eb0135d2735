// The controller's work queue, with controller-runtime's semantics: a key is queued once however often it is added,
// a key added while a worker holds it is handed out again after that worker's done(), failures back off per key,
// and shutDown() lets the workers finish what is queued.

/** Per-key exponential backoff of failed keys: 5 ms doubling up to 1000 s, as client-go's default limiter. */
export const BACKOFF_BASE_MS = 5;
export const BACKOFF_MAX_MS = 1_000_000;

/** The queue key of a namespaced object. */
export function objectKey(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

/** The namespace and name of a key objectKey made. */
export function splitKey(key: string): { namespace: string; name: string } {
  const i = key.indexOf("/");
  if (i < 0) throw new Error(`work queue key '${key}' is not namespace/name`);
  return { namespace: key.slice(0, i), name: key.slice(i + 1) };
}

export class WorkQueue {
  readonly #queue: string[] = [];
  // Keys waiting to be handed out (queued, or held and added again since).
  readonly #dirty = new Set<string>();
  readonly #processing = new Set<string>();
  readonly #failures = new Map<string, number>();
  readonly #delayed = new Map<string, { at: number; timer: NodeJS.Timeout }>();
  readonly #waiters: ((key: string | undefined) => void)[] = [];
  readonly #drained: (() => void)[] = [];
  #shuttingDown = false;

  /** Keys queued and not yet handed out. */
  get length(): number {
    return this.#queue.length;
  }

  get shuttingDown(): boolean {
    return this.#shuttingDown;
  }

  add(key: string): void {
    if (this.#shuttingDown || this.#dirty.has(key)) return;
    this.#dirty.add(key);
    if (this.#processing.has(key)) return;
    const waiter = this.#waiters.shift();
    if (waiter) this.#handOut(key, waiter);
    else this.#queue.push(key);
  }

  /** Adds the key after `ms`; a later call for a key already waiting only ever brings its time forward. */
  addAfter(key: string, ms: number): void {
    if (this.#shuttingDown) return;
    if (ms <= 0) return this.add(key);
    const at = Date.now() + ms;
    const pending = this.#delayed.get(key);
    if (pending && pending.at <= at) return;
    if (pending) clearTimeout(pending.timer);
    const timer = setTimeout(() => {
      this.#delayed.delete(key);
      this.add(key);
    }, ms);
    this.#delayed.set(key, { at, timer });
  }

  /** Adds the key after its backoff, and doubles the backoff for its next failure. */
  addRateLimited(key: string): void {
    this.addAfter(key, this.backoff(key));
    this.#failures.set(key, (this.#failures.get(key) ?? 0) + 1);
  }

  /** The delay the key's next failure waits. */
  backoff(key: string): number {
    return Math.min(BACKOFF_BASE_MS * 2 ** (this.#failures.get(key) ?? 0), BACKOFF_MAX_MS);
  }

  /** Failures counted so far for the key. */
  failures(key: string): number {
    return this.#failures.get(key) ?? 0;
  }

  /** Forgets the key's failures: it succeeded. */
  forget(key: string): void {
    this.#failures.delete(key);
  }

  /** The next key, held by the caller until done(); undefined once the queue is shut down and empty. */
  get(): Promise<string | undefined> {
    const key = this.#queue.shift();
    if (key !== undefined) {
      this.#dirty.delete(key);
      this.#processing.add(key);
      return Promise.resolve(key);
    }
    if (this.#shuttingDown) return Promise.resolve(undefined);
    return new Promise((resolve) => this.#waiters.push(resolve));
  }

  /** The worker is finished with the key; one added meanwhile is queued again now. */
  done(key: string): void {
    this.#processing.delete(key);
    if (this.#dirty.has(key)) {
      const waiter = this.#waiters.shift();
      if (waiter) this.#handOut(key, waiter);
      else this.#queue.push(key);
    }
    this.#checkDrained();
  }

  /**
   * Refuses new keys and drops delayed ones, lets the workers take what is queued, and resolves once nothing is
   * queued or held; idle workers' get() then returns undefined.
   */
  shutDown(): Promise<void> {
    this.#shuttingDown = true;
    for (const { timer } of this.#delayed.values()) clearTimeout(timer);
    this.#delayed.clear();
    const drained = new Promise<void>((resolve) => this.#drained.push(resolve));
    this.#checkDrained();
    return drained;
  }

  #handOut(key: string, waiter: (key: string | undefined) => void): void {
    this.#dirty.delete(key);
    this.#processing.add(key);
    waiter(key);
  }

  #checkDrained(): void {
    if (!this.#shuttingDown || this.#queue.length > 0 || this.#processing.size > 0) return;
    for (const waiter of this.#waiters.splice(0)) waiter(undefined);
    for (const resolve of this.#drained.splice(0)) resolve();
  }
}
