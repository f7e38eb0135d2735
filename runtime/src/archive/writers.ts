// Archive writers: one per destination. A writer appends each flushed frame to its open file, rolls the file on its
// compressed size or its age, and reports every file once it is durable (or errored) so the delivery stage can
// release the offsets its tickets carry. A writer holds no write buffer between flushes: only its file, counters and
// tickets.
// archive.max_writers bounds the writers holding a descriptor. Past it the least recently used one parks: its
// descriptor closes and its file stays in progress, taking the destination's next flushes by its path (a lane opens
// it for each append) until it rolls. Closing the file instead (completing it as on a roll) gave every destination
// past the cap a file per flush: 10,000 destinations through 1,024 writers wrote files of a record or two. A writer
// opening a file holds a place under the cap meanwhile. Parked writers are bounded too, at PARKED_PER_WRITER x
// max_writers: past it the least recently used parked file completes (an eviction roll). Unbounded, 41,000
// destinations of a skewed workload kept 41,000 files in progress and the drain that completed them all ran the heap
// out.
import type { Codec } from "../codec/index.ts";
import { ArchiverError, ConfigError } from "../errors.ts";
import type { Metrics } from "../observe/metrics.ts";
import type { ArchiveFile, ArchiveStore, Retry } from "../store/types.ts";
import { appendTo } from "../lists.ts";
import { expandPathTemplate, type TemplatePart } from "./path.ts";

export type RollTrigger = "size" | "interval" | "evict" | "shutdown" | "revoke";

export interface CompletedFile<T> {
  readonly relPath: string;
  readonly destination: string;
  /** The tickets of every frame the file holds, in append order. */
  readonly tickets: T[];
  readonly records: number;
  readonly rawBytes: number;
  /** Compressed bytes: the file's size. */
  readonly bytes: number;
  /** Epoch milliseconds. */
  readonly openedAt: number;
  readonly closedAt: number;
  readonly outcome: "done" | "errored";
  readonly error?: unknown;
}

export type WriterMetrics = Pick<
  Metrics,
  | "filesCreated"
  | "filesClosed"
  | "archiveRoll"
  | "writerEvictions"
  | "writersOpen"
  | "writersParked"
  | "archiveErrors"
  | "bytesCompressed"
>;

export interface WriterPoolOptions<T> {
  readonly store: ArchiveStore;
  /** The parsed archive.path_template. */
  readonly parts: readonly TemplatePart[];
  /** The codec's file suffix, e.g. ".zst". */
  readonly codecSuffix: string;
  /** Default ".jsonl". */
  readonly extension?: string;
  readonly rollSizeBytes: number;
  readonly rollIntervalSecs: number;
  readonly maxWriters: number;
  /** Random per process, letters and digits: with the pool's counter it names each writer. */
  readonly instanceId: string;
  readonly codecName: string;
  readonly metrics: WriterMetrics;
  /**
   * Folds a frame's ticket into the file's last one when it returns true, so a file of many small flushes keeps one
   * ticket rather than one a frame. Default: every ticket is kept.
   */
  readonly merge?: (into: T, from: T) => boolean;
  /**
   * Runs each step of a destination's file completion that a failure can leave to be done again (see
   * ArchiveFile.complete), retrying as the caller holds out: the pipeline holds a full disk as it holds a failed
   * append. Default: one attempt.
   */
  readonly retry?: <R>(destination: string, attempt: () => Promise<R>) => Promise<R>;
  /** Called exactly once per file that holds a frame. A throw here is a caller's bug and surfaces unhandled. */
  readonly onComplete: (file: CompletedFile<T>) => void;
  /** A parked file's roll has finished (see WriterPool.completing). */
  readonly onRolled?: () => void;
  /** Epoch milliseconds; default Date.now. */
  readonly now?: () => number;
}

/** A flush to append: a compressed frame, or the raw batch and the codec that frames it where it is written. */
export type Block = Buffer | { readonly raw: readonly Buffer[]; readonly codec: Codec };

export interface WriterPool<T> {
  /**
   * Appends one frame to the destination's open file. Resolves once the frame is on the file, which then holds
   * `ticket`. Rejects (with the store's or codec's ArchiverError) with nothing of the frame left on the file: the
   * ticket stays the caller's. Appends for one destination apply in call order.
   */
  /**
   * `since`: when the block's oldest record arrived (epoch milliseconds, default now); a file rolls on the interval by
   * its oldest record's age, so a frame that waited in the spill does not wait a second interval in its file.
   * `last`: the destination's last append before shutdown (the drain's flush): its file completes right behind it.
   */
  append(
    destination: string,
    block: Block,
    records: number,
    rawBytes: number,
    ticket: T,
    since?: number,
    last?: boolean,
  ): Promise<void>;
  /** Rolls files older than roll_interval_secs; call about once a second. */
  tick(): void;
  /**
   * Completes every file whose tickets `match` (the files holding a revoked partition's records), behind the appends
   * accepted so far. Resolves once those files, and every file already completing, have completed or failed.
   */
  roll(match: (tickets: readonly T[]) => boolean): Promise<void>;
  /** Shutdown: lets accepted appends land, then completes every file. Later appends are refused. */
  closeAll(): Promise<void>;
  stats(): { writers: number; closing: number; parked: number };
  /**
   * Parked files rolling: waiting behind their appends or for a sync slot, or syncing. Nothing else bounds them, so
   * the caller holds intake back past a bound: a skewed workload's evictions queued 20,000 completions, each keeping
   * its file, writer and tickets alive.
   */
  readonly completing: number;
}

interface OpenFile<T> {
  readonly file: ArchiveFile;
  readonly openedAt: number;
  /** When its oldest record arrived: its age for the roll interval. */
  oldest: number;
  tickets: T[];
  blockLengths: number[];
  blockRecords: number[];
  records: number;
  rawBytes: number;
  rollQueued: boolean;
}

interface Writer<T> {
  readonly destination: string;
  readonly id: string;
  /** Sequence number of the last file this writer opened. */
  seq: number;
  file: OpenFile<T> | undefined;
  /** Every operation on the writer chains here, so its frames never reorder or interleave. */
  tail: Promise<void>;
  /** While the writer waits for a place: gives it the place. */
  admit: (() => void) | undefined;
  /** From its admission until the descriptor it may hold is closed (a retired writer keeps its place until then). */
  placed: boolean;
}

const SEQ: readonly TemplatePart[] = [{ token: "seq" }];
/** Parked writers kept, per place under archive.max_writers (see the head of this file). */
export const PARKED_PER_WRITER = 16;
/** Parked files completing at once, each with a descriptor open for its sync (see #rollParked). */
const SYNC_SLOTS = 64;
const noop = () => undefined;

class Pool<T> implements WriterPool<T> {
  readonly #o: WriterPoolOptions<T>;
  readonly #extension: string;
  readonly #now: () => number;
  /** Writers holding a place under the cap, least recently used first. */
  readonly #open = new Map<string, Writer<T>>();
  /** Writers waiting for a place, in arrival order; their appends queue on them meanwhile. */
  readonly #waiting = new Map<string, Writer<T>>();
  /** Writers whose file is in progress with its descriptor closed (or closing), least recently used first. */
  readonly #parked = new Map<string, Writer<T>>();
  /** Writers closing their descriptor (a park, a retired writer's complete): each holds a place. */
  #closing = 0;
  /** Parked files syncing to complete, and the rolls waiting for a slot (see #rollParked). */
  #syncing = 0;
  readonly #syncWaiters: (() => void)[] = [];
  #completing = 0;
  /** Background work closeAll waits for: retiring writers and completing files. */
  readonly #inflight = new Set<Promise<void>>();
  #writers = 0;
  #closed = false;

  constructor(opts: WriterPoolOptions<T>) {
    this.#o = opts;
    this.#extension = opts.extension ?? ".jsonl";
    this.#now = opts.now ?? Date.now;
  }

  append(
    destination: string,
    block: Block,
    records: number,
    rawBytes: number,
    ticket: T,
    since?: number,
    last = false,
  ): Promise<void> {
    if (this.#closed) {
      return Promise.reject(new ArchiverError("writers_closed", "append after the writers closed", "permanent"));
    }
    let w = this.#open.get(destination);
    if (w !== undefined) {
      this.#open.delete(destination);
      this.#open.set(destination, w);
    } else {
      const parked = this.#parked.get(destination);
      if (parked !== undefined) {
        // Now the most recently used of the parked ones.
        this.#parked.delete(destination);
        this.#parked.set(destination, parked);
      }
      w = this.#waiting.get(destination) ?? parked ?? this.#newWriter(destination);
    }
    const writer = w;
    const appended = this.#enqueue(writer, () =>
      this.#write(writer, block, records, rawBytes, ticket, since ?? this.#now()),
    );
    // Completed now, not parked and opened again by closeAll: the drain of 89,000 destinations parked, reopened and
    // closed each file once more than it needed, and completed none until every flush had landed.
    if (last) {
      if (this.#parked.get(destination) === writer) this.#rollParked(writer, "shutdown");
      // On the writer's chain, so it keeps its place (and the cap bounds the descriptors) until its file is complete.
      else this.#track(this.#enqueue(writer, () => this.#roll(writer, "shutdown")));
    }
    return appended;
  }

  tick(): void {
    const now = this.#now();
    const maxAge = this.#o.rollIntervalSecs * 1000;
    for (const w of this.#open.values()) {
      const f = w.file;
      if (f === undefined || f.rollQueued || now - f.oldest < maxAge) continue;
      f.rollQueued = true;
      void this.#enqueue(w, () => {
        if (w.file === f) this.#track(this.#roll(w, "interval"));
      });
    }
    for (const w of [...this.#parked.values()]) {
      const f = w.file;
      if (f !== undefined && !f.rollQueued && now - f.oldest >= maxAge) this.#rollParked(w, "interval");
    }
  }

  async roll(match: (tickets: readonly T[]) => boolean): Promise<void> {
    const matches = (w: Writer<T>) => w.file !== undefined && match(w.file.tickets);
    for (const w of this.#open.values()) {
      // Behind the appends queued on it, which may add to its file or open one.
      this.#track(this.#enqueue(w, () => (matches(w) ? this.#roll(w, "revoke") : undefined)));
    }
    for (const w of [...this.#parked.values()]) if (matches(w)) this.#rollParked(w, "revoke");
    const pending = [...this.#inflight, ...[...this.#waiting.values()].map((w) => w.tail)];
    await Promise.allSettled(pending);
  }

  async closeAll(): Promise<void> {
    this.#closed = true;
    // Waiting writers take places as retired ones free them, then are retired in turn.
    for (;;) {
      for (const w of [...this.#open.values()]) this.#retire(w, "shutdown");
      for (const w of [...this.#parked.values()]) this.#rollParked(w, "shutdown");
      const pending = [...this.#inflight, ...[...this.#waiting.values()].map((w) => w.tail)];
      if (pending.length === 0) return;
      await Promise.allSettled(pending);
    }
  }

  stats(): { writers: number; closing: number; parked: number } {
    return { writers: this.#open.size, closing: this.#closing, parked: this.#parked.size };
  }

  get completing(): number {
    return this.#completing;
  }

  #enqueue(w: Writer<T>, op: () => Promise<void> | void): Promise<void> {
    const run = w.tail.then(op);
    w.tail = run.then(noop, noop);
    return run;
  }

  #track(p: Promise<void>): void {
    this.#inflight.add(p);
    // Only a throwing onComplete rejects here: rethrown so it surfaces unhandled rather than vanishing.
    p.then(
      () => this.#inflight.delete(p),
      (err: unknown) => {
        this.#inflight.delete(p);
        throw err;
      },
    );
  }

  #newWriter(destination: string): Writer<T> {
    const w: Writer<T> = {
      destination,
      // Unique per writer, so an evicted writer still closing and its replacement never share a name.
      id: `${this.#o.instanceId}_${++this.#writers}`,
      seq: 0,
      file: undefined,
      tail: Promise.resolve(),
      admit: undefined,
      placed: false,
    };
    w.tail = this.#place(w);
    return w;
  }

  /** Queues `w` (parked, or new) for a place under the cap; resolves once it has one. */
  #place(w: Writer<T>): Promise<void> {
    if (this.#parked.get(w.destination) === w) this.#parked.delete(w.destination);
    this.#waiting.set(w.destination, w);
    const placed = new Promise<void>((resolve) => (w.admit = resolve));
    this.#admit();
    return placed;
  }

  /**
   * Gives free places to waiting writers in arrival order, then retires least recently used writers until every
   * writer still waiting has a close under way to free its place. Each close frees exactly one place for exactly one
   * waiter, so with thousands of destinations waiting no close wakes them all (which cost time quadratic in them).
   */
  #admit(): void {
    for (const w of this.#waiting.values()) {
      if (this.#open.size + this.#closing >= this.#o.maxWriters) break;
      this.#waiting.delete(w.destination);
      this.#open.set(w.destination, w);
      w.placed = true;
      w.admit?.();
      w.admit = undefined;
    }
    while (this.#closing < this.#waiting.size) {
      const lru = this.#open.values().next().value;
      if (lru === undefined) break;
      this.#retire(lru, "evict");
    }
    this.#gauge();
  }

  /**
   * Evicted, `w` parks behind its queued appends (its file stays in progress); at shutdown its file completes. It
   * keeps its place under the cap until its descriptor is closed.
   */
  #retire(w: Writer<T>, trigger: "evict" | "shutdown"): void {
    this.#open.delete(w.destination);
    if (trigger === "evict") {
      this.#o.metrics.writerEvictions.inc();
      this.#parked.set(w.destination, w);
      if (this.#parked.size > this.#o.maxWriters * PARKED_PER_WRITER) {
        const lru = this.#parked.values().next().value;
        if (lru !== undefined) this.#rollParked(lru, "evict");
      }
    }
    this.#closing++;
    this.#gauge();
    const closed = this.#enqueue(w, () => (trigger === "evict" ? this.#park(w) : this.#roll(w, trigger)));
    this.#track(
      closed.finally(() => {
        this.#closing--;
        w.placed = false;
        this.#admit();
      }),
    );
  }

  /**
   * Completes a parked writer's file; the writer goes with it (a later flush for its destination makes a new one).
   * Its sync opens a descriptor for a moment, beside the cap: at most SYNC_SLOTS such syncs at a time. Waiting for a
   * place under the cap instead evicted an open writer for each, which parked one more, whose roll evicted another.
   */
  #rollParked(w: Writer<T>, trigger: RollTrigger): void {
    this.#parked.delete(w.destination);
    this.#completing++;
    // Behind the writer's queued appends: the file may not even be open yet.
    this.#track(
      this.#enqueue(w, async () => {
        if (w.file === undefined) return;
        await this.#syncSlot();
        try {
          await this.#roll(w, trigger);
        } finally {
          this.#syncDone();
        }
      }).finally(() => {
        this.#completing--;
        this.#o.onRolled?.();
      }),
    );
  }

  #syncSlot(): Promise<void> | undefined {
    if (this.#syncing < SYNC_SLOTS) {
      this.#syncing++;
      return undefined;
    }
    return new Promise((resolve) => this.#syncWaiters.push(resolve));
  }

  /** Hands the slot to the next sync waiting, or frees it. */
  #syncDone(): void {
    const next = this.#syncWaiters.shift();
    if (next !== undefined) next();
    else this.#syncing--;
  }

  /** Closes the descriptor of `w`'s file, which stays in progress; a file that cannot be parked is errored. */
  async #park(w: Writer<T>): Promise<void> {
    const f = w.file;
    if (f === undefined) {
      // Its file rolled before the park: nothing is in progress, so the writer goes; a later flush makes a new one.
      if (this.#parked.get(w.destination) === w) this.#parked.delete(w.destination);
      return;
    }
    try {
      await f.file.park();
    } catch (err) {
      if (this.#parked.get(w.destination) === w) this.#parked.delete(w.destination);
      this.#giveUp(w, f, err);
    }
  }

  /** writers_open counts every writer holding a place, closing ones included; writers_parked, the parked ones. */
  #gauge(): void {
    this.#o.metrics.writersOpen.set(this.#open.size + this.#closing);
    this.#o.metrics.writersParked.set(this.#parked.size);
  }

  async #write(w: Writer<T>, block: Block, records: number, rawBytes: number, ticket: T, since: number): Promise<void> {
    // A parked writer whose file rolled opens its next file under the cap, like a new writer.
    if (w.file === undefined && !w.placed) await this.#place(w);
    const f = w.file ?? (await this.#openFile(w));
    const before = f.file.size;
    let length: number;
    try {
      if (Buffer.isBuffer(block)) {
        await f.file.append(block);
        length = block.length;
      } else length = await f.file.appendCompressed(block.codec, block.raw);
    } catch (err) {
      // A codec's refusal wrote nothing: the batch's fault, not the file's.
      if (f.file.size === before && err instanceof ArchiverError && err.code === "codec_refused") throw err;
      this.#o.metrics.archiveErrors.inc();
      await this.#cutBack(w, f, before);
      throw err;
    }
    f.blockLengths = appendTo(f.blockLengths, length);
    f.blockRecords = appendTo(f.blockRecords, records);
    const lastTicket = f.tickets[f.tickets.length - 1];
    if (lastTicket === undefined || !this.#o.merge?.(lastTicket, ticket)) f.tickets = appendTo(f.tickets, ticket);
    f.records += records;
    f.rawBytes += rawBytes;
    if (since < f.oldest) f.oldest = since;
    this.#o.metrics.bytesCompressed.inc(length);
    // The roll's completion runs in the background; the next append opens the next file.
    if (f.file.size >= this.#o.rollSizeBytes) this.#track(this.#roll(w, "size"));
  }

  async #openFile(w: Writer<T>): Promise<OpenFile<T>> {
    // Taken before the open, so a retry after a failed open (EEXIST included) never meets the same name.
    const seq = ++w.seq;
    const openedAt = this.#now();
    const at = new Date(openedAt);
    const relPath =
      `${w.destination}/${expandPathTemplate(this.#o.parts, at, seq)}-${expandPathTemplate(SEQ, at, seq)}` +
      `-${w.id}${this.#extension}${this.#o.codecSuffix}`;
    let file: ArchiveFile;
    try {
      file = await this.#o.store.open(relPath);
    } catch (err) {
      this.#o.metrics.archiveErrors.inc();
      throw err;
    }
    this.#o.metrics.filesCreated.inc();
    const f: OpenFile<T> = {
      file,
      openedAt,
      oldest: openedAt,
      tickets: [],
      blockLengths: [],
      blockRecords: [],
      records: 0,
      rawBytes: 0,
      rollQueued: false,
    };
    w.file = f;
    return f;
  }

  /** Cuts a failed append back to the last whole block; a file that cannot be cut back is given up, errored. */
  async #cutBack(w: Writer<T>, f: OpenFile<T>, size: number): Promise<void> {
    try {
      await f.file.truncate(size);
    } catch (err) {
      this.#giveUp(w, f, err);
    }
  }

  /** Gives `w`'s file up after `err`: what it holds is reported errored, and what was written removed. */
  #giveUp(w: Writer<T>, f: OpenFile<T>, err: unknown): void {
    this.#o.metrics.archiveErrors.inc();
    w.file = undefined;
    if (f.blockLengths.length > 0) this.#report(w, f, this.#now(), { error: err });
    this.#abandon(f);
  }

  /** Detaches the writer's file and completes it. */
  async #roll(w: Writer<T>, trigger: RollTrigger): Promise<void> {
    const f = w.file;
    if (f === undefined) return;
    w.file = undefined;
    // A file whose only append was cut back holds nothing to deliver.
    if (f.blockLengths.length === 0) return this.#abandon(f);
    this.#o.metrics.archiveRoll.inc({ trigger });
    this.#o.metrics.filesClosed.inc();
    const closedAt = this.#now();
    const { records, openedAt, blockLengths, blockRecords } = f;
    // Every failed attempt counts once: each the retry ran here, and below a failure outside it.
    let counted: unknown;
    const retry = this.#o.retry;
    const attempts: Retry | undefined =
      retry &&
      ((attempt) =>
        retry(w.destination, () =>
          attempt().catch((err: unknown) => {
            this.#o.metrics.archiveErrors.inc();
            counted = err;
            throw err;
          }),
        ));
    try {
      const meta = { records, codec: this.#o.codecName, openedAt, closedAt, blockLengths, blockRecords };
      await f.file.complete(meta, attempts);
    } catch (err) {
      if (err !== counted) this.#o.metrics.archiveErrors.inc();
      return this.#report(w, f, closedAt, { error: err });
    }
    this.#report(w, f, closedAt);
  }

  #report(w: Writer<T>, f: OpenFile<T>, closedAt: number, failure?: { error: unknown }): void {
    this.#o.onComplete({
      relPath: f.file.relPath,
      destination: w.destination,
      tickets: f.tickets,
      records: f.records,
      rawBytes: f.rawBytes,
      bytes: f.file.size,
      openedAt: f.openedAt,
      closedAt,
      ...(failure ? { outcome: "errored", error: failure.error } : { outcome: "done" }),
    });
  }

  #abandon(f: OpenFile<T>): void {
    this.#track(
      f.file.abandon().catch(() => {
        this.#o.metrics.archiveErrors.inc();
      }),
    );
  }
}

/** The writer pool. Throws ConfigError when archive.max_writers is below 1 (no writer could ever open). */
export function createWriterPool<T>(opts: WriterPoolOptions<T>): WriterPool<T> {
  if (!Number.isInteger(opts.maxWriters) || opts.maxWriters < 1) {
    throw new ConfigError("archive.max_writers", `must be a whole number of at least 1, got ${opts.maxWriters}`);
  }
  if (!/^[A-Za-z0-9]+$/.test(opts.instanceId)) {
    throw new ArchiverError(
      "invalid_instance_id",
      `instance id must be letters and digits: ${opts.instanceId}`,
      "permanent",
    );
  }
  return new Pool(opts);
}
