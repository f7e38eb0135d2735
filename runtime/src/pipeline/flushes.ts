// Flush scheduling: each flushed batch goes to its destination's writer as one frame, in flush order per
// destination, with what is in flight bounded (past the bounds intake waits, so compress and write queues stay short)
// and a local write that can clear retried while nothing more is received.
import type { Logger } from "pino";
import type { WriterPool } from "../archive/writers.ts";
import { flushPieces, releaseFlush, type FlushBatch } from "../buffer/hot.ts";
import type { Spill } from "../buffer/spill.ts";
import type { Codec } from "../codec/index.ts";
import type { Hold } from "../delivery/hold.ts";
import { ArchiverError, isRetryable } from "../errors.ts";
import type { Health } from "../observe/health.ts";
import type { Metrics } from "../observe/metrics.ts";
import type { SinkTally } from "../regulate/circuit.ts";
import { blocks } from "../buffer/blocks.ts";
import { Fifo } from "../fifo.ts";
import { backoffDelay, type Backoff } from "../store/backoff.ts";
import { setTimeout as sleep } from "node:timers/promises";

/**
 * Flushes in flight past which intake waits, and flushes started at most: past it a flush waits in a queue as its batch
 * alone, and starts as another ends. Intake waits only between turns, and within one turn 100,000 destinations'
 * evictions started 22,000 flushes, each an append chain and a read of its spilled records waiting for room, with
 * their promises: a heap snapshot at 22 s held 52,000 suspended async functions and 187,000 promises in 212 MiB.
 */
const MAX_FLUSHES_IN_FLIGHT = 256;
/**
 * One destination's flushes in flight at most before intake waits: they compress and append one after another (see
 * #chains), so past a few they only wait, each holding its records and the route replies they lie in. With one
 * destination (topic routing) intake outran its one compressing lane until 256 flushes (~450 MiB) were waiting.
 */
const MAX_FLUSHES_A_DESTINATION = 4;
/** Parked files rolling past which intake waits (see WriterPool.completing). */
const MAX_COMPLETING = 256;
const LOCAL_WRITE_BACKOFF: Backoff = { minMs: 100, maxMs: 5000 };
const WRITE_RETRY_AFTER_DRAIN_MS = 10_000;

export interface FlushesDeps {
  readonly writers: Pick<WriterPool<Hold>, "append" | "completing">;
  readonly codec: Codec;
  /** The hot buffers' spill: a batch's spilled records are read back from it ahead of its pieces. */
  readonly spill: Spill | undefined;
  /** Bytes of flushes in flight past which intake waits. */
  readonly inflightCap: number;
  /**
   * Bytes of the block pool in use (hot buffers, spill chunks, flushes and read-backs together: blocks.ts) past which
   * intake waits while a flush or a spill write is on its way, since either gives blocks back as it lands.
   */
  readonly poolCap: number;
  readonly metrics: Metrics;
  readonly log: Logger;
  readonly health: Health | undefined;
  /** A local destination's writes, which the sink circuit reads; undefined for a staged one (its uploads count). */
  readonly localWrites: SinkTally | undefined;
  /** The codec or the store refused the batch for good. */
  refused(b: FlushBatch, err: unknown): void;
  /** The batch's write failed in a way retrying did not clear. */
  writeFailed(b: FlushBatch, err: unknown): void;
  /** Flushes are under their bounds again: buffers past their age may flush now (see wake). */
  unsaturated(): void;
}

export class Flushes {
  readonly #d: FlushesDeps;
  /** Per destination, the promise of its last append: frames of one destination reach the writer in flush order. */
  readonly #chains = new Map<string, Promise<void>>();
  /** Per destination, its flushes in flight; and how many destinations have MAX_FLUSHES_A_DESTINATION or more. */
  readonly #depth = new Map<string, number>();
  #deep = 0;
  /** Flushes, and the dead-letter writes and read-backs the drain waits for too (track). */
  readonly #inflight = new Set<Promise<void>>();
  #inflightBytes = 0;
  /** Local writes (appends, file completions) failing and being retried: while any is, nothing more is received. */
  #stalled = 0;
  readonly #waiters: (() => void)[] = [];
  #drainStartedAt: number | undefined;
  /** Flushes started and not ended. */
  #running = 0;
  /** Flushes not yet started (see MAX_FLUSHES_IN_FLIGHT), and when each was flushed. */
  readonly #queued = new Fifo<{ batch: FlushBatch; started: number }>();

  constructor(deps: FlushesDeps) {
    this.#d = deps;
    deps.spill?.onLanded(() => this.wake());
  }

  /** Bytes of the flushes in flight. */
  get inflightBytes(): number {
    return this.#inflightBytes;
  }

  flush(b: FlushBatch): void {
    const m = this.#d.metrics;
    const started = performance.now();
    const bytes = b.bytes;
    this.#inflightBytes += bytes;
    m.flushOperations.inc();
    if (b.trigger === "evict") m.hotBufferEvictions.inc();
    m.batchSizeBytes.observe(bytes);
    const depth = (this.#depth.get(b.destination) ?? 0) + 1;
    this.#depth.set(b.destination, depth);
    if (depth === MAX_FLUSHES_A_DESTINATION) this.#deep++;
    if (this.#running >= MAX_FLUSHES_IN_FLIGHT) {
      this.#queued.push({ batch: b, started });
      return;
    }
    this.#start(b, started);
  }

  /** Starts `b` (flushed at `started`): its append goes behind its destination's last. */
  #start(b: FlushBatch, started: number): void {
    const m = this.#d.metrics;
    const bytes = b.bytes;
    this.#running++;
    const prev = this.#chains.get(b.destination);
    // Compressed on the lane that appends it (see codec/lanes.ts compressAppend), in the destination's order.
    const next = (prev ?? Promise.resolve())
      .then(() =>
        this.#appendHeld(b).then(() => {
          m.messagesWritten.inc(b.records);
          m.bytesWritten.inc(bytes);
          m.flushDuration.observe((performance.now() - started) / 1000);
        }),
      )
      .catch((err: unknown) => (isRetryable(err) ? this.#d.writeFailed(b, err) : this.#d.refused(b, err)))
      .finally(() => {
        // The frame is on file (or its records dead-lettered from a copy, or Errored): nothing reads the pieces again.
        releaseFlush(b, this.#d.spill);
        const left = (this.#depth.get(b.destination) ?? 1) - 1;
        if (left === MAX_FLUSHES_A_DESTINATION - 1) this.#deep--;
        if (left === 0) this.#depth.delete(b.destination);
        else this.#depth.set(b.destination, left);
        this.#inflightBytes -= bytes;
        this.#inflight.delete(next);
        if (this.#chains.get(b.destination) === next) this.#chains.delete(b.destination);
        this.#running--;
        this.#startQueued();
        this.wake();
      });
    this.#chains.set(b.destination, next);
    this.#inflight.add(next);
  }

  /** Starts queued flushes, oldest first, while fewer than MAX_FLUSHES_IN_FLIGHT run. */
  #startQueued(): void {
    while (this.#running < MAX_FLUSHES_IN_FLIGHT) {
      const next = this.#queued.shift();
      if (next === undefined) return;
      this.#start(next.batch, next.started);
    }
  }

  /** Keeps the drain waiting for `work` (a dead-letter write, a read-back) as for a flush. */
  track(work: Promise<void>): void {
    this.#inflight.add(work);
    void work.finally(() => this.#inflight.delete(work));
  }

  /**
   * Appends the batch as one frame; a local write that fails in a way that can clear (a full or failing disk, staging
   * that cannot be created) is never dead-lettered: the writer has cut the file back to its last whole block, and the
   * batch and its offsets stay held while the append is retried (see held).
   */
  async #appendHeld(b: FlushBatch): Promise<void> {
    let raw: readonly Buffer[];
    try {
      raw = await flushPieces(b, this.#d.spill);
    } catch (err) {
      // Its records are in no file yet: held, so the restart reads them again.
      throw new ArchiverError("spill_unreadable", `spilled records unreadable: ${String(err)}`, "retryable");
    }
    const block = { raw, codec: this.#d.codec };
    return this.held(b.destination, "batch", () =>
      this.#d.writers.append(b.destination, block, b.records, b.bytes, b.hold, b.openedAt, b.trigger === "drain"),
    );
  }

  /**
   * Runs a local write (an append, or a step of a file's completion: its manifest, its link to its archive name, a
   * directory sync), holding it while it fails in a way that can clear: what it writes and its offsets stay held, and
   * it is retried from 0.1 s to 5 s while nothing more is received and the sink shows degraded. Once shutdown begins
   * it gets WRITE_RETRY_AFTER_DRAIN_MS more, then its failure is the caller's (its records are Errored and the restart
   * reads them again).
   */
  async held<R>(destination: string, what: "batch" | "file", write: () => Promise<R>): Promise<R> {
    const { health, log, localWrites } = this.#d;
    for (let failures = 0; ;) {
      try {
        const result = await write();
        localWrites?.ok();
        if (failures > 0) {
          log.info({ destination, failures }, `local write landed after retries (${what})`);
          if (--this.#stalled === 0) health?.set("sink", "ok");
          this.wake();
        }
        return result;
      } catch (err) {
        const late =
          this.#drainStartedAt !== undefined && Date.now() - this.#drainStartedAt > WRITE_RETRY_AFTER_DRAIN_MS;
        if (!isRetryable(err) || late) {
          if (failures > 0 && --this.#stalled === 0) health?.set("sink", "ok");
          throw err;
        }
        localWrites?.fail();
        if (failures++ === 0) {
          this.#stalled++;
          health?.set("sink", "degraded", `local write failing, ${what} held and retried: ${String(err)}`);
          log.warn({ err, destination }, `local write failed: holding the ${what} and retrying`);
        }
        await sleep(backoffDelay(failures, LOCAL_WRITE_BACKOFF));
      }
    }
  }

  /**
   * A local write retrying, a destination with MAX_FLUSHES_A_DESTINATION in flight, the spill's writes backed up, no
   * room (see hasRoom), or the pool past its cap: intake waits, so compress and write queues stay short.
   */
  saturated(): boolean {
    return (
      this.#stalled > 0 || this.#deep > 0 || (this.#d.spill?.backedUp ?? false) || !this.hasRoom() || this.#poolFull()
    );
  }

  /**
   * The pool past its cap while blocks are on their way back. Each of the hot buffers' bound, the spill's cap and
   * the in-flight cap held alone, yet together 100,000 destinations had 148 MiB of blocks in use against the 128 MiB
   * cap, and the pool held 180. Only while something will land: with nothing on its way, waiting frees nothing.
   */
  #poolFull(): boolean {
    return blocks.inUse > this.#d.poolCap && (this.#inflight.size > 0 || (this.#d.spill?.writing ?? false));
  }

  /** Flushes in flight, and parked files rolling, are within their bounds: another flush may start. */
  hasRoom(): boolean {
    return (
      this.#inflightBytes <= this.#d.inflightCap &&
      this.#inflight.size + this.#queued.length <= MAX_FLUSHES_IN_FLIGHT &&
      this.#d.writers.completing <= MAX_COMPLETING
    );
  }

  /** Resolves at the next moment the flushes may be back under their bounds (ask saturated() again then). */
  room(): Promise<void> {
    return new Promise<void>((r) => this.#waiters.push(r));
  }

  /** Nothing in flight and no write retrying: what was shed has landed. */
  get settled(): boolean {
    return this.#inflight.size === 0 && this.#stalled === 0;
  }

  /** The drain began at `at` (Date.now()): a local write still failing WRITE_RETRY_AFTER_DRAIN_MS later gives up. */
  drainStarted(at: number): void {
    this.#drainStartedAt = at;
  }

  /** Lets every intake waiting for room go on, saturated or not: the drain no longer holds the source back. */
  releaseWaiters(): void {
    this.wake();
    for (const w of this.#waiters.splice(0)) w();
  }

  /** Resolves once every flush, and every piece of work tracked, has ended (the drain's). */
  async landed(): Promise<void> {
    while (this.#inflight.size > 0) await Promise.allSettled([...this.#inflight]);
  }

  /**
   * Resolves once the flushes in flight now, queued ones too, have landed; those begun later (other partitions') are
   * not waited for. While one queued now has not started, some flush runs (a flush is queued only behind running ones).
   */
  async landedSoFar(): Promise<void> {
    const upTo = this.#queued.taken + this.#queued.length;
    for (;;) {
      const allStarted = this.#queued.taken >= upTo;
      await Promise.allSettled([...this.#inflight]);
      if (allStarted) return;
    }
  }

  /** Something landed (a flush, a parked file's roll): what waits for room goes on as far as the bounds allow. */
  wake(): void {
    while (!this.saturated() && this.#waiters.length > 0) this.#waiters.shift()?.();
    if (!this.saturated()) this.#d.unsaturated();
  }
}
