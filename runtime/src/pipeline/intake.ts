// Intake and turns: each transport batch is routed on a lane, and its routed chunks are buffered in turns shared
// with the other batches routed at the same time (one fetch's partitions), destination by destination, with
// back-pressure between turns. What is buffered is received: the tracker learns each partition's last offset.
import type { Logger } from "pino";
import type { BufferedRecords, HotBufferPool } from "../buffer/hot.ts";
import { codecLanes } from "../codec/lanes.ts";
import type { ResolvedConfig } from "../config/resolve.ts";
import type { OffsetTracker } from "../delivery/tracker.ts";
import type { Metrics } from "../observe/metrics.ts";
import type { EncodedFormat, InboundBatch } from "../records.ts";
import {
  GroupReader,
  keyAt,
  nextGroup,
  routeBatch,
  type ReplyViews,
  type RouteSpec,
  type Routed,
  type RoutedChunk,
} from "../route/block.ts";
import { createRouter, TOO_DEEP } from "../route/router.ts";

/** Routed chunks held for the end of a turn past this many batches' records are buffered even while others route. */
const TURN_BATCHES = 16;
/**
 * A lane groups this many batches' records a chunk: the event loop buffers a chunk's records for one destination as
 * one group. Chunks of one batch made groups of ten records on the bench's 1000 destinations, and much of the event
 * loop's work goes by the group: at two, with turns and fetches twice as large, it took 1.05-1.13 CPU s, not 1.23-1.32.
 */
const CHUNK_BATCHES = 2;
/**
 * Past this many destinations numbered (see Intake's #destinationIds), the numbering starts again; a turn of about
 * 10,000 groups numbers at most as many. With 2^17, room for all of the 100,000-destination row's, the row ran V8's
 * 256 MiB heap out at 46 s (it had run out before the numbering too, in one run of two); with 2^14 it finished.
 */
const MAX_DESTINATION_IDS = 1 << 14;

/**
 * How the lanes route `config`'s batches. The router is built here too, so a routing config the lanes would refuse
 * refuses the start instead.
 */
export function routeSpecOf(config: ResolvedConfig): RouteSpec {
  const spec: RouteSpec = {
    mode: config.routing.mode,
    fields: config.routing.expression_fields,
    defaultSegment: config.routing.default_segment,
    chunk: config.kafka.batch_size * CHUNK_BATCHES,
  };
  createRouter({ ...spec, fields: [...spec.fields] });
  return spec;
}

export interface IntakeDeps {
  readonly routeSpec: RouteSpec;
  /** How the source's encoded batches are cut and read (the lanes read them as Kafka's). */
  readonly format: EncodedFormat;
  /** kafka.batch_size: records a slice of a turn, and a turn's records in TURN_BATCHES of it. */
  readonly batchSize: number;
  /** Offsets are held until their records are durable; else each batch received asks for a commit. */
  readonly offsetsHeld: boolean;
  readonly tracker: OffsetTracker;
  readonly buffers: Pick<HotBufferPool, "add" | "settle">;
  readonly metrics: Metrics;
  readonly log: Logger;
  /** Flushes in flight past their bounds (see Flushes): intake waits for room. */
  readonly flushes: { saturated(): boolean; room(): Promise<void> };
  /** Whether batches are refused (a replayable source's, once draining): they are left for the restart. */
  refusing(): boolean;
  /** Records nested past the parse limit: dead-lettered or dropped (Release.tooDeep). */
  tooDeep(batch: InboundBatch, slot: number, g: BufferedRecords): void;
  /** A turn was buffered: the latch reads what is held now. */
  checkLatch(): void;
  scheduleCommit(): void;
  /** Stops the pipeline with `reason`, nothing of the batch committed. */
  withhold(reason: string): void;
}

/** Routed chunks of one batch waiting for the end of the turn to be buffered (see Intake #buffer). */
interface PendingChunks {
  readonly batch: InboundBatch;
  readonly slot: number;
  /** The partition's assignment when its batch arrived. */
  readonly assignment: number;
  readonly chunks: readonly RoutedChunk[];
  readonly done: (buffered: boolean) => void;
}

export class Intake {
  readonly #d: IntakeDeps;
  /** Records a turn buffers together, at most (one chunk more when a single chunk is larger). */
  readonly #turnRecords: number;
  readonly #pendingChunks: PendingChunks[] = [];
  #batchesRunning = 0;
  #batchesIdle: (() => void) | undefined;
  /** Per partition slot, its batches being routed or buffered, and a promise that resolves once none is. */
  readonly #slotBatches = new Map<number, { running: number; ended: PromiseWithResolvers<undefined> }>();
  /** Batches on a route lane, by the sequence number each started under (see #endTurnSoon). */
  readonly #routing = new Set<number>();
  #routeSeq = 0;
  /** The sequence number when the oldest pending chunks were queued: the turn waits for batches routed since. */
  #turnSince = 0;
  #pendingRecords = 0;
  #turnScheduled = false;
  /** A turn is being buffered, slice by slice: the next waits for it, so a partition's records keep their order. */
  #buffering = false;
  /** Per partition slot, its position lag at its last batch. */
  readonly #lag = new Map<number, number>();
  #received = 0;
  /** Routing outcomes the lanes reported, until reportRouting counts them. */
  #routingErrors = 0;
  readonly #fallbacks: number[] = [];
  /**
   * The turn being buffered, destination by destination (see #order): each group's key, batch, reply and head, by
   * place. Kept across turns with the scratch #order sorts them in, so a turn makes no object a group.
   */
  readonly #turnKeys: (string | typeof TOO_DEEP | undefined)[] = [];
  readonly #turnBatches: (PendingChunks | undefined)[] = [];
  readonly #turnReplies: (ReplyViews | undefined)[] = [];
  #turnAt = new Int32Array(1024);
  /**
   * #order's scratch: each group's destination (by its place in the turn) and head as they arrive; each destination's
   * number (see #destinationIds) and next place.
   */
  #arrivedDestinations = new Int32Array(1024);
  #arrivedAt = new Int32Array(1024);
  #idsInTurn = new Int32Array(1024);
  #places = new Int32Array(1024);
  /**
   * A number for each destination of recent turns, kept from one turn to the next, with the last turn each was seen in
   * and its place in that turn. A Map of each turn's destinations made afresh grew, at 10,000 destinations, tables
   * large enough to be allocated in the old generation every turn: 79 MB of the 925 MB the 10,000-destination row
   * promoted. The turn hands on each destination's first key string, whose hash is kept, not the copy of each group.
   */
  readonly #destinationIds = new Map<string | typeof TOO_DEEP, number>();
  readonly #idKeys: (string | typeof TOO_DEEP)[] = [];
  #seenIn = new Int32Array(1024);
  #placeIn = new Int32Array(1024);
  #turnNumber = 0;
  readonly #reader = new GroupReader();

  constructor(deps: IntakeDeps) {
    this.#d = deps;
    this.#turnRecords = deps.batchSize * TURN_BATCHES;
  }

  /** Records received so far. */
  get received(): number {
    return this.#received;
  }

  /** The assigned partitions' position lag, summed. */
  lag(): number {
    let lag = 0;
    for (const v of this.#lag.values()) lag += v;
    return lag;
  }

  /** Revoked partitions have no lag here any more. */
  forget(slots: readonly number[]): void {
    for (const s of slots) this.#lag.delete(s);
  }

  /** Resolves once no batch is being routed or buffered. */
  async idle(): Promise<void> {
    if (this.#batchesRunning > 0) await new Promise<void>((r) => (this.#batchesIdle = r));
  }

  /** Resolves once no batch of these partition slots is being routed or buffered (a revoked partition's hand-over). */
  async slotsIdle(slots: ReadonlySet<number>): Promise<void> {
    await Promise.all([...slots].map((s) => this.#slotBatches.get(s)?.ended.promise));
  }

  /** Counts the routing outcomes the lanes reported since the last call. */
  reportRouting(): void {
    const m = this.#d.metrics;
    this.#d.routeSpec.fields.forEach((field, i) => {
      const n = this.#fallbacks[i] ?? 0;
      if (n > 0) m.routingFallback.inc({ field }, n);
    });
    this.#fallbacks.fill(0);
    if (this.#routingErrors > 0) m.routingErrors.inc(this.#routingErrors);
    this.#routingErrors = 0;
  }

  /**
   * Resolves once the batch is routed and its last chunks wait for their turn, so the transport fetches the
   * partition's next batch while this one is buffered: waiting for the buffering too kept the lanes idle while the
   * event loop buffered, and the event loop idle while the lanes routed. The next batch's chunks queue behind this
   * one's, so a partition's records are still buffered in order. Back-pressure is unchanged: a saturated pipeline
   * holds the transport here as it held it before.
   */
  async onBatch(batch: InboundBatch): Promise<void> {
    if (this.#d.refusing()) return;
    this.#batchesRunning++;
    const slot = this.#d.tracker.slot(batch.topic ?? "", batch.partition);
    this.#slotBatchStarted(slot);
    let routed: Routed;
    let assignment: number;
    try {
      assignment = this.#d.tracker.assignment(slot);
      // A lane decodes, routes and groups the batch, kafka.batch_size records a chunk, while the event loop buffers
      // and flushes; chunks are buffered with back-pressure between.
      const seq = ++this.#routeSeq;
      this.#routing.add(seq);
      try {
        routed = await routeBatch(this.#d.routeSpec, batch, this.#d.format);
      } finally {
        this.#routing.delete(seq);
        this.#endTurnSoon();
      }
    } catch (err) {
      this.#batchEnded(slot);
      throw err;
    }
    this.#countRouting(routed);
    const queued = Promise.withResolvers<undefined>();
    const buffered = this.#bufferRouted(batch, slot, assignment, routed, () => queued.resolve(undefined))
      .catch((err: unknown) => {
        // Nothing of the batch past this point is received, so nothing of it is committed; the pipeline stops so
        // the restart reads it again.
        this.#d.log.error({ err, topic: batch.topic, partition: batch.partition }, "buffering a routed batch failed");
        this.#d.withhold(`buffering failed: ${(err as Error).message}`);
      })
      .finally(() => {
        // Every chunk was buffered (copied) or let go, and none waits in #pendingChunks: the reply is read no more.
        codecLanes().recycle(routed.memory);
        this.#batchEnded(slot);
      });
    await Promise.race([queued.promise, buffered]);
    await this.#unsaturated();
  }

  /** Resolves once flushes in flight are back under their bounds, or once refusing. */
  async #unsaturated(): Promise<void> {
    while (this.#d.flushes.saturated() && !this.#d.refusing()) await this.#d.flushes.room();
  }

  #slotBatchStarted(slot: number): void {
    const entry = this.#slotBatches.get(slot);
    if (entry !== undefined) entry.running++;
    else this.#slotBatches.set(slot, { running: 1, ended: Promise.withResolvers() });
  }

  #batchEnded(slot: number): void {
    const entry = this.#slotBatches.get(slot);
    if (entry !== undefined && --entry.running === 0) {
      this.#slotBatches.delete(slot);
      entry.ended.resolve(undefined);
    }
    if (--this.#batchesRunning === 0) this.#batchesIdle?.();
  }

  /**
   * Buffers a routed batch's chunks a turn's records at a time, with back-pressure between turns. `queued`: its last
   * turn's chunks wait in #pendingChunks, so chunks queued from now on are buffered after all of this batch's.
   */
  async #bufferRouted(
    batch: InboundBatch,
    slot: number,
    assignment: number,
    routed: Routed,
    queued: () => void,
  ): Promise<void> {
    let last = -1;
    const turnRecords = this.#turnRecords;
    for (let i = 0; i < routed.chunks.length;) {
      // As many chunks as a turn takes are buffered together, with back-pressure between turns.
      const chunks: RoutedChunk[] = [];
      let records = 0;
      do {
        const chunk = routed.chunks[i++] as RoutedChunk;
        chunks.push(chunk);
        records += chunk.records;
      } while (i < routed.chunks.length && records + (routed.chunks[i]?.records ?? 0) <= turnRecords);
      const lastTurn = i === routed.chunks.length;
      const turn = this.#buffer({ batch, slot, assignment, chunks });
      if (lastTurn) queued();
      if (!(await turn)) return;
      for (const chunk of chunks) {
        last = chunk.lastOffset;
        this.#receivedUpTo(batch, slot, last, chunk.records);
      }
      this.#d.checkLatch();
      // After the last turn, onBatch waits instead: the transport's next batch is what back-pressure holds.
      if (!lastTurn) await this.#unsaturated();
    }
    // Control records after the last data record still take offsets.
    const covered = batch.encoded?.lastOffset ?? last;
    if (covered > last && !this.#d.refusing() && this.#d.tracker.assignment(slot) === assignment) {
      this.#receivedUpTo(batch, slot, covered, 0);
    }
  }

  /**
   * Buffers a batch's chunks (up to a turn's records) together with those of every batch that was on a route lane
   * when the turn's first chunks were queued (one fetch's partitions, up to TURN_BATCHES batches' records; see
   * #endTurnSoon), destination by destination: with more destinations than hot buffers, a buffer the LRU evicts then
   * carries what all of those partitions had for it, not one partition's share. On 1000 destinations that took the
   * 2M-record bench from 120k flushes to 79k.
   * Resolves false, buffering nothing, once draining or once a rebalance took the partition (or handed it back from
   * its committed offset) while the batch waited: the rest of it is left to whoever reads the partition next.
   */
  #buffer(entry: Omit<PendingChunks, "done">): Promise<boolean> {
    return new Promise((done) => {
      if (this.#pendingChunks.length === 0) this.#turnSince = this.#routeSeq;
      this.#pendingChunks.push({ ...entry, done });
      for (const chunk of entry.chunks) this.#pendingRecords += chunk.records;
      // A batch alone (a push listener's, one at a time) has nothing to wait for: a turn each cost its intake.
      if (this.#batchesRunning <= 1) this.#bufferPending();
      else this.#endTurnSoon();
    });
  }

  #endTurnSoon(): void {
    if (this.#turnScheduled || this.#buffering || this.#pendingChunks.length === 0) return;
    if (this.#pendingRecords < this.#turnRecords) {
      // Batches that were routing when the turn's first chunks came (one fetch's partitions) join the turn; those
      // handed since, the next fetch's, do not hold it, or the event loop would wait on the lanes for each fetch.
      for (const seq of this.#routing) if (seq <= this.#turnSince) return;
    }
    this.#turnScheduled = true;
    setImmediate(() => {
      this.#turnScheduled = false;
      this.#bufferPending();
    });
  }

  #bufferPending(): void {
    if (this.#buffering) return;
    const { tracker, buffers } = this.#d;
    this.#pendingRecords = 0;
    const live: PendingChunks[] = [];
    for (const p of this.#pendingChunks.splice(0)) {
      if (this.#d.refusing() || tracker.assignment(p.slot) !== p.assignment) p.done(false);
      else live.push(p);
    }
    // Destination by destination, so a buffer the LRU evicts carries all of the turn's records for it.
    const turnLength = this.#order(live);
    const keys = this.#turnKeys;
    const batches = this.#turnBatches;
    const replies = this.#turnReplies;
    const heads = this.#turnAt;
    const reader = this.#reader;
    this.#buffering = true;
    // A batch's records a slice. A slice's flushes reach the lanes once its microtasks have run, and the transport's
    // replies are read between slices: buffered in one go, a turn of 80k records kept the event loop busy for 40-80
    // ms while the lanes sat idle.
    const sliceRecords = this.#d.batchSize;
    let next = 0;
    const slice = (): void => {
      for (let records = 0; next < turnLength && records < sliceRecords; next++) {
        const p = batches[next] as PendingChunks;
        // A rebalance between slices took the partition: the rest of its records are left to its next reader.
        if (tracker.assignment(p.slot) !== p.assignment) continue;
        reader.read(replies[next] as ReplyViews, heads[next] ?? 0);
        const key = keys[next] as string | typeof TOO_DEEP;
        if (key === TOO_DEEP) this.#d.tooDeep(p.batch, p.slot, reader);
        else buffers.add(key, p.slot, reader);
        records += reader.count;
      }
      if (next < turnLength) {
        // Behind the slice's lane posts (queued as its microtasks run), not ahead of them.
        setImmediate(() => setImmediate(slice));
        return;
      }
      // Let go, so no reply stays reachable from here until a later turn writes over it.
      keys.fill(undefined, 0, turnLength);
      batches.fill(undefined, 0, turnLength);
      replies.fill(undefined, 0, turnLength);
      this.#buffering = false;
      // The turn's replies go back to the lanes once its batches are done: what waits in a buffer is copied first.
      buffers.settle();
      for (const p of live) p.done(tracker.assignment(p.slot) === p.assignment);
      this.#endTurnSoon();
    };
    slice();
  }

  /**
   * Lays the groups of `live` out in the #turn arrays destination by destination, destinations in the order they first
   * came and each one's groups in arrival order (a counting sort); returns how many groups.
   */
  #order(live: readonly PendingChunks[]): number {
    const ids = this.#destinationIds;
    if (ids.size >= MAX_DESTINATION_IDS) {
      ids.clear();
      this.#idKeys.length = 0;
    }
    const turn = ++this.#turnNumber;
    let destinations = 0;
    let n = 0;
    for (const p of live) {
      for (const chunk of p.chunks) {
        for (let g = 0, at = chunk.at; g < chunk.groups; g++, at = nextGroup(chunk.reply, at)) {
          const key = keyAt(chunk.reply, at);
          let id = ids.get(key);
          if (id === undefined) {
            id = ids.size;
            ids.set(key, id);
            this.#idKeys.push(key);
            if (id === this.#seenIn.length) {
              this.#seenIn = grown(this.#seenIn);
              this.#placeIn = grown(this.#placeIn);
            }
          }
          let d = this.#placeIn[id] ?? 0;
          if (this.#seenIn[id] !== turn) {
            this.#seenIn[id] = turn;
            d = destinations++;
            this.#placeIn[id] = d;
            if (d === this.#places.length) {
              this.#places = grown(this.#places);
              this.#idsInTurn = grown(this.#idsInTurn);
            }
            this.#idsInTurn[d] = id;
            this.#places[d] = 0;
          }
          if (n === this.#arrivedAt.length) {
            this.#arrivedDestinations = grown(this.#arrivedDestinations);
            this.#arrivedAt = grown(this.#arrivedAt);
          }
          this.#arrivedDestinations[n] = d;
          this.#arrivedAt[n++] = at;
          this.#places[d] = (this.#places[d] ?? 0) + 1;
        }
      }
    }
    // Filled up to n first: written out of order into a shorter array, V8 would keep it as a dictionary.
    for (let j = this.#turnKeys.length; j < n; j++) {
      this.#turnKeys.push(undefined);
      this.#turnBatches.push(undefined);
      this.#turnReplies.push(undefined);
    }
    if (this.#turnAt.length < n) this.#turnAt = new Int32Array(this.#arrivedAt.length);
    // Each destination's first place: the counts before it.
    const places = this.#places;
    for (let d = 0, at = 0; d < destinations; d++) {
      const count = places[d] ?? 0;
      places[d] = at;
      at += count;
    }
    let i = 0;
    for (const p of live) {
      for (const chunk of p.chunks) {
        for (let g = 0; g < chunk.groups; g++, i++) {
          const d = this.#arrivedDestinations[i] ?? 0;
          const place = places[d] ?? 0;
          places[d] = place + 1;
          this.#turnKeys[place] = this.#idKeys[this.#idsInTurn[d] ?? 0];
          this.#turnBatches[place] = p;
          this.#turnReplies[place] = chunk.reply;
          this.#turnAt[place] = this.#arrivedAt[i] ?? 0;
        }
      }
    }
    return n;
  }

  #receivedUpTo(batch: InboundBatch, slot: number, last: number, records: number): void {
    if (last >= 0) this.#d.tracker.received(slot, last);
    this.#d.metrics.messagesReceived.inc(records);
    this.#received += records;
    if (batch.highWatermark !== undefined && last >= 0) {
      this.#lag.set(slot, Math.max(0, Number(batch.highWatermark) - last - 1));
    }
    if (!this.#d.offsetsHeld) this.#d.scheduleCommit();
  }

  #countRouting(r: Routed): void {
    this.#routingErrors += r.errors;
    r.fallbacks.forEach((n, i) => (this.#fallbacks[i] = (this.#fallbacks[i] ?? 0) + n));
  }
}

/** `a` in an array twice its length. */
function grown(a: Int32Array<ArrayBuffer>): Int32Array<ArrayBuffer> {
  const b = new Int32Array(a.length * 2);
  b.set(a);
  return b;
}
