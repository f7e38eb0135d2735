// The loop that joins the stages: transport batch -> route -> hot buffer -> flush (compress one frame) -> writer
// appends -> roll -> file complete -> delivery releases the file's offsets -> transport commits the floor.
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import type { Logger } from "pino";
import type { ResolvedConfig } from "./config/resolve.ts";
import { createRouter, TOO_DEEP } from "./route/router.ts";
import { routeBatch, type RouteSpec, type Routed, type RoutedChunk, type RoutedGroup } from "./route/block.ts";
import { flushPieces, HotBufferPool, releaseFlush, viewsOf, wholeBatch, type FlushBatch } from "./buffer/hot.ts";
import { Spill } from "./buffer/spill.ts";
import { resolveSpoolBudget } from "./store/spool.ts";
import { readBlocks } from "./codec/blocks.ts";
import { createCodec, type Codec } from "./codec/index.ts";
import { codecLanes } from "./codec/lanes.ts";
import type { DeadLetter, KafkaDlq } from "./dlq/kafka.ts";
import { createWriterPool, type CompletedFile, type WriterPool } from "./archive/writers.ts";
import { parsePathTemplate } from "./archive/path.ts";
import type { OpenedStore } from "./store/open.ts";
import type { StagedManifest } from "./store/manifest.ts";
import { UPLOAD_DRAIN_MS, type StagingStore } from "./store/staging.ts";
import { backoffDelay, type Backoff } from "./store/backoff.ts";
import { setTimeout as sleep } from "node:timers/promises";
import type { Hold } from "./delivery/hold.ts";
import { OffsetTracker, type PartitionRef } from "./delivery/tracker.ts";
import type { Health } from "./observe/health.ts";
import type { Metrics } from "./observe/metrics.ts";
import type { InboundBatch } from "./records.ts";
import { KAFKA_BATCHES } from "./transport/record-batch.ts";
import type { Transport, TransportSink } from "./transport/types.ts";
import type { MemoryLimit } from "./regulate/memory.ts";
import { createLatch, latchSources, type Latch } from "./regulate/latch.ts";
import { createPressure, type Pressure } from "./regulate/pressure.ts";
import { createSinkCircuit, SinkTally, type SinkCircuit, type SinkOutcomes } from "./regulate/circuit.ts";
import { readRss, reclaim } from "./regulate/sampler.ts";
import { ArchiverError, ConfigError, isRetryable } from "./errors.ts";

const TICK_MS = 1000;
const MAX_FLUSHES_IN_FLIGHT = 256;
const LOCAL_WRITE_BACKOFF: Backoff = { minMs: 100, maxMs: 5000 };
const WRITE_RETRY_AFTER_DRAIN_MS = 10_000;
/** Commits start at least this far apart (see #scheduleCommit). */
const COMMIT_SPACING_MS = 100;
/** Routed chunks held for the end of a turn past this many batches' records are buffered even while others route. */
const TURN_BATCHES = 16;
/**
 * A lane groups this many batches' records a chunk: the event loop buffers a chunk's records for one destination as
 * one group. Chunks of one batch made groups of ten records on the bench's 1000 destinations, and much of the event
 * loop's work goes by the group: at two, with turns and fetches twice as large, it took 1.05-1.13 CPU s, not 1.23-1.32.
 */
const CHUNK_BATCHES = 2;

export interface PipelineDeps {
  config: ResolvedConfig;
  transport: Transport;
  metrics: Metrics;
  log: Logger;
  memory: MemoryLimit;
  store: OpenedStore;
  /** Undefined with the DLQ off: records refused for good are then dropped and counted. */
  dlq?: KafkaDlq | undefined;
  /** Distinguishes this process's writers from every other replica's in file names. */
  instanceId?: string;
  /** Where intake pauses and held local writes show as the transport and sink components. */
  health?: Health | undefined;
}

export type PipelineExit = { code: 0 } | { code: 1; reason: string };

/** Routed chunks of one batch waiting for the end of the turn to be buffered (see Pipeline #buffer). */
interface PendingChunks {
  readonly batch: InboundBatch;
  readonly slot: number;
  /** The partition's assignment when its batch arrived. */
  readonly assignment: number;
  readonly chunks: readonly RoutedChunk[];
  readonly done: (buffered: boolean) => void;
}

export class Pipeline implements TransportSink {
  /** The delivery guarantee in force and why, as pipeline_delivery_guarantee reports it. */
  readonly guarantee: { guarantee: string; reason: string };
  readonly #cfg: ResolvedConfig;
  readonly #transport: Transport;
  readonly #m: Metrics;
  readonly #log: Logger;
  readonly #health: Health | undefined;
  #pausedBy: string | undefined;
  #connection: string | undefined;
  readonly #tracker: OffsetTracker;
  readonly #routeSpec: RouteSpec;
  /** Routing outcomes the lanes reported, until the next gauge cycle counts them. */
  #routingErrors = 0;
  readonly #fallbacks: number[] = [];
  readonly #codec: Codec;
  readonly #buffers: HotBufferPool;
  readonly #writers: WriterPool<Hold>;
  readonly #staging: StagingStore | undefined;
  readonly #dlq: KafkaDlq | undefined;
  readonly #latch: Latch;
  readonly #pressure: Pressure;
  readonly #circuit: SinkCircuit;
  /** What the sink circuit reads: the staging store's uploads, or for a local destination its writes. */
  readonly #sinkAttempts: SinkOutcomes;
  readonly #localWrites: SinkTally | undefined;
  /** Assigned partitions, so the latch pauses and resumes all of them. */
  readonly #assigned = new Map<string, PartitionRef>();
  #received = 0;
  /** Per destination, the promise of its last append: frames of one destination reach the writer in flush order. */
  readonly #chains = new Map<string, Promise<void>>();
  readonly #inflight = new Set<Promise<void>>();
  #inflightBytes = 0;
  /** Local writes (appends, file completions) failing and being retried: while any is, nothing more is received. */
  #stalled = 0;
  #drainStartedAt: number | undefined;
  readonly #inflightCap: number;
  readonly #spill: Spill | undefined;
  /** Records a turn buffers together, at most (one chunk more when a single chunk is larger). */
  readonly #turnRecords: number;
  readonly #waiters: (() => void)[] = [];
  readonly #pendingChunks: PendingChunks[] = [];
  #timer: NodeJS.Timeout | undefined;
  #committing: Promise<void> | undefined;
  #commitAgain = false;
  #commitTimer: NodeJS.Timeout | undefined;
  #lastCommitAt = -Infinity;
  #draining: Promise<PipelineExit> | undefined;
  #batchesRunning = 0;
  /** Batches on a route lane, by the sequence number each started under (see #endTurnSoon). */
  readonly #routing = new Set<number>();
  #routeSeq = 0;
  /** The sequence number when the oldest pending chunks were queued: the turn waits for batches routed since. */
  #turnSince = 0;
  #pendingRecords = 0;
  #turnScheduled = false;
  /** A turn is being buffered, slice by slice: the next waits for it, so a partition's records keep their order. */
  #buffering = false;
  #batchesIdle: (() => void) | undefined;
  readonly #lag = new Map<number, number>();
  #exitReason: string | undefined;
  readonly #done: Promise<PipelineExit>;
  #resolveDone!: (e: PipelineExit) => void;

  constructor(deps: PipelineDeps) {
    const cfg = deps.config;
    this.#cfg = cfg;
    this.#transport = deps.transport;
    this.#m = deps.metrics;
    this.#log = deps.log;
    this.#health = deps.health;
    this.#done = new Promise((r) => (this.#resolveDone = r));
    if (cfg.archive.destination === undefined) {
      throw new ConfigError("archive.destination", "no destination: the pipeline idles");
    }
    this.#staging = deps.store.staging;
    this.#dlq = deps.dlq;
    this.#tracker = new OffsetTracker({ holdsCommit: cfg.offsetsHeld });
    this.#routeSpec = {
      mode: cfg.routing.mode,
      fields: cfg.routing.expression_fields,
      defaultSegment: cfg.routing.default_segment,
      chunk: cfg.kafka.batch_size * CHUNK_BATCHES,
    };
    // The lanes route; built here too so a routing config they would refuse refuses the start instead.
    createRouter({ ...this.#routeSpec, fields: [...this.#routeSpec.fields] });
    this.#codec = createCodec(cfg.compression.codec, cfg.compression.level);
    const memory = deps.memory;
    const capBytes = Math.floor(memory.bytes / 4);
    codecLanes().limitSpares(memory.bytes);
    this.#inflightCap = Math.max(capBytes / 2, cfg.buffer.flush_bytes * 2);
    this.#turnRecords = cfg.kafka.batch_size * TURN_BATCHES;
    // Read back at most half what may be in flight: the drain reads every destination's spill at once.
    // Only where records can be read again (kafka): grpc's answered pushes are kept in memory, as before the spill.
    this.#spill = deps.transport.replayable ? openSpill(cfg, this.#inflightCap / 2, this.#log) : undefined;
    this.#buffers = new HotBufferPool({
      spill: this.#spill,
      onSpill: () => this.#m.hotBufferSpills.inc(),
      flushBytes: cfg.buffer.flush_bytes,
      flushRecords: cfg.buffer.flush_records,
      flushAgeMs: cfg.buffer.flush_age_secs * 1000,
      capBytes,
      openHold: () => this.#tracker.open(),
      onFlush: (b) => this.#flush(b),
      onEmptied: (h) => this.#tracker.release(h, "dropped"),
    });
    const parsed = parsePathTemplate(cfg.archive.path_template);
    if ("error" in parsed) throw new ConfigError("archive.path_template", `unknown token ${parsed.error}`);
    this.#writers = createWriterPool<Hold>({
      store: deps.store.store,
      parts: parsed.parts,
      codecSuffix: this.#codec.suffix,
      rollSizeBytes: cfg.archive.roll_size_bytes,
      rollIntervalSecs: cfg.archive.roll_interval_secs,
      maxWriters: cfg.archive.max_writers,
      instanceId: deps.instanceId ?? randomBytes(3).toString("hex"),
      codecName: this.#codec.name,
      metrics: this.#m,
      merge: (into, from) => this.#tracker.merge(into, from),
      retry: (destination, attempt) => this.#held(destination, "file", attempt),
      onComplete: (f) => this.#completed(f),
    });
    this.#log.info(
      { memoryLimitBytes: memory.bytes, memorySource: memory.source, hotBufferCapBytes: capBytes },
      "memory guard",
    );
    const staging = this.#staging;
    const memoryPausePoint = memory.bytes * cfg.memory.pressure_threshold;
    this.#latch = createLatch({
      pauseAbove: cfg.self_regulation.pause_above,
      resumeBelow: cfg.self_regulation.resume_below,
      enabled: cfg.self_regulation.enabled,
      gauge: this.#m.selfRegulationPaused,
      sources: latchSources({
        memoryLimitBytes: memory.bytes,
        pressureThreshold: cfg.memory.pressure_threshold,
        pauseAbove: cfg.self_regulation.pause_above,
        heldRecords: () => this.#tracker.heldRecords(),
        stagedPressure: staging ? () => staging.pressure() : undefined,
      }),
      onPause: (source, ratio) => {
        this.#transport.pause([...this.#assigned.values()]);
        this.#pausedBy = source;
        this.#showTransport();
        this.#log.warn({ source, ratio }, "self-regulation: intake paused");
      },
      // Paused on memory, what the hot buffers hold goes to its files, half of it a reading, and the garbage of
      // finished work is what holds RSS up (see reclaim). Buffers left waiting for their age held a paused process
      // at its limit with nothing in flight, for as long as flush_age.
      whilePaused: (source) => {
        if (source !== "memory") return;
        // Only while RSS is still at the pause point: a shed at every reading put flushes in flight before each
        // reading of `settled`, and held 10,000 destinations paused 10-15 s a time under the pause point, above a
        // floor that resume_below never reaches.
        if (readRss() >= memoryPausePoint) this.#buffers.shed();
        reclaim(this.#inflight.size === 0 && this.#stalled === 0);
      },
      // With nothing in flight (what was shed has landed), waiting longer frees nothing more: memory then holds the
      // latch only at pause_above.
      settled: (source) => source === "memory" && this.#inflight.size === 0 && this.#stalled === 0,
      onResume: () => {
        this.#transport.resume([...this.#assigned.values()]);
        this.#pausedBy = undefined;
        this.#showTransport();
        this.#log.info("self-regulation: intake resumed");
      },
    });
    this.#pressure = createPressure({
      enabled: cfg.scaling.enabled,
      memoryGateThreshold: cfg.scaling.memory_gate_threshold,
      memoryLimitBytes: memory.bytes,
      hotBufferCapBytes: capBytes,
      kafkaLag: cfg.transport === "kafka",
      gauge: this.#m.scalingPressure,
    });
    const localWrites = new SinkTally();
    this.#localWrites = staging ? undefined : localWrites;
    this.#sinkAttempts = staging?.attempts ?? localWrites;
    this.#circuit = createSinkCircuit({
      gauge: this.#m.sinkCircuitOpen,
      onChange: (open) => {
        this.#pressure.setSinkOpen(open);
        if (staging) this.#health?.set("sink", open ? "degraded" : "ok", open ? "every upload is failing" : undefined);
        if (open) this.#log.warn("sink circuit open: every write is failing; scaling pressure reads 0 until one lands");
        else this.#log.info("sink circuit closed: writes land again");
      },
    });
    this.guarantee = cfg.offsetsHeld
      ? { guarantee: "at_least_once", reason: "offsets_held_until_durable" }
      : {
          guarantee: "best_effort",
          reason: this.#transport.replayable ? "acknowledgements_disabled" : "sink_cannot_confirm",
        };
    this.#m.pipelineDeliveryGuarantee.reset();
    this.#m.pipelineDeliveryGuarantee.set(this.guarantee, 1);
  }

  /** Starts receiving; resolves once the transport runs. `done` resolves when the pipeline has drained. */
  async start(): Promise<void> {
    this.#timer = setInterval(() => this.#tick(), TICK_MS);
    this.#timer.unref();
    codecLanes().start();
    await this.#transport.start(this);
  }

  /** The scaling-pressure composite, 0-100, as /scaling/pressure serves it. */
  pressure(): number {
    return this.#pressure.value();
  }

  get done(): Promise<PipelineExit> {
    return this.#done;
  }

  // ---- transport sink ----

  /**
   * Resolves once the batch is routed and its last chunks wait for their turn, so the transport fetches the
   * partition's next batch while this one is buffered: waiting for the buffering too kept the lanes idle while the
   * event loop buffered, and the event loop idle while the lanes routed. The next batch's chunks queue behind this
   * one's, so a partition's records are still buffered in order. Back-pressure is unchanged: a saturated pipeline
   * holds the transport here as it held it before.
   */
  async onBatch(batch: InboundBatch): Promise<void> {
    if (this.#refusing()) return;
    this.#batchesRunning++;
    let routed: Routed;
    let slot: number;
    let assignment: number;
    try {
      slot = this.#tracker.slot(batch.topic ?? "", batch.partition);
      assignment = this.#tracker.assignment(slot);
      // A lane decodes, routes and groups the batch, kafka.batch_size records a chunk, while the event loop buffers
      // and flushes; chunks are buffered with back-pressure between.
      const seq = ++this.#routeSeq;
      this.#routing.add(seq);
      try {
        routed = await routeBatch(this.#routeSpec, batch, KAFKA_BATCHES);
      } finally {
        this.#routing.delete(seq);
        this.#endTurnSoon();
      }
    } catch (err) {
      this.#batchEnded();
      throw err;
    }
    this.#countRouting(routed);
    const queued = Promise.withResolvers<undefined>();
    const buffered = this.#bufferRouted(batch, slot, assignment, routed, () => queued.resolve(undefined))
      .catch((err: unknown) => {
        // Nothing of the batch past this point is received, so nothing of it is committed; the pipeline stops so
        // the restart reads it again.
        this.#log.error({ err, topic: batch.topic, partition: batch.partition }, "buffering a routed batch failed");
        this.#withhold(`buffering failed: ${(err as Error).message}`);
      })
      .finally(() => {
        // Every chunk was buffered (copied) or let go, and none waits in #pendingChunks: the reply is read no more.
        codecLanes().recycle(routed.memory);
        this.#batchEnded();
      });
    await Promise.race([queued.promise, buffered]);
    await this.#unsaturated();
  }

  /** Resolves once flushes in flight are back under their bounds (see #saturated), or once draining. */
  async #unsaturated(): Promise<void> {
    while (this.#saturated() && !this.#refusing()) await new Promise<void>((r) => this.#waiters.push(r));
  }

  #batchEnded(): void {
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
      this.#latch.check();
      // After the last turn, onBatch waits instead: the transport's next batch is what back-pressure holds.
      if (!lastTurn) await this.#unsaturated();
    }
    // Control records after the last data record still take offsets.
    const covered = batch.encoded?.lastOffset ?? last;
    if (covered > last && !this.#refusing() && this.#tracker.assignment(slot) === assignment) {
      this.#receivedUpTo(batch, slot, covered, 0);
    }
  }

  /**
   * Once draining, a replayable source's batches are left for the restart to read again. A push listener's are
   * already answered: its stopReceiving hands over everything it queued, and all of it is routed and written.
   */
  #refusing(): boolean {
    return this.#draining !== undefined && this.#transport.replayable;
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
    this.#pendingRecords = 0;
    const live: PendingChunks[] = [];
    const byKey = new Map<string | typeof TOO_DEEP, { p: PendingChunks; g: RoutedGroup }[]>();
    for (const p of this.#pendingChunks.splice(0)) {
      if (this.#refusing() || this.#tracker.assignment(p.slot) !== p.assignment) {
        p.done(false);
        continue;
      }
      live.push(p);
      for (const chunk of p.chunks) {
        for (const g of chunk.groups) {
          const list = byKey.get(g.key);
          if (list === undefined) byKey.set(g.key, [{ p, g }]);
          else list.push({ p, g });
        }
      }
    }
    // Destination by destination, so a buffer the LRU evicts carries all of the turn's records for it.
    const turn = [...byKey.values()].flat();
    this.#buffering = true;
    // A batch's records a slice. A slice's flushes reach the lanes once its microtasks have run, and the transport's
    // replies are read between slices: buffered in one go, a turn of 80k records kept the event loop busy for 40-80
    // ms while the lanes sat idle.
    const sliceRecords = this.#cfg.kafka.batch_size;
    let next = 0;
    const slice = (): void => {
      for (let records = 0; next < turn.length && records < sliceRecords; next++) {
        const { p, g } = turn[next] as (typeof turn)[number];
        // A rebalance between slices took the partition: the rest of its records are left to its next reader.
        if (this.#tracker.assignment(p.slot) !== p.assignment) continue;
        if (g.key === TOO_DEEP) this.#tooDeep(p.batch, p.slot, g);
        else this.#buffers.add(g.key, p.slot, g);
        records += g.count;
      }
      if (next < turn.length) {
        // Behind the slice's lane posts (queued as its microtasks run), not ahead of them.
        setImmediate(() => setImmediate(slice));
        return;
      }
      this.#buffering = false;
      // The turn's replies go back to the lanes once its batches are done: what waits in a buffer is copied first.
      this.#buffers.settle();
      for (const p of live) p.done(this.#tracker.assignment(p.slot) === p.assignment);
      this.#endTurnSoon();
    };
    slice();
  }

  #receivedUpTo(batch: InboundBatch, slot: number, last: number, records: number): void {
    if (last >= 0) this.#tracker.received(slot, last);
    this.#m.messagesReceived.inc(records);
    this.#received += records;
    if (batch.highWatermark !== undefined && last >= 0) {
      this.#lag.set(slot, Math.max(0, Number(batch.highWatermark) - last - 1));
    }
    if (!this.#cfg.offsetsHeld) this.#scheduleCommit();
  }

  #countRouting(r: Routed): void {
    this.#routingErrors += r.errors;
    r.fallbacks.forEach((n, i) => (this.#fallbacks[i] = (this.#fallbacks[i] ?? 0) + n));
  }

  /** Records nested past 64 levels are never parsed: dead-lettered as they arrived, or dropped and counted. */
  #tooDeep(batch: InboundBatch, slot: number, g: RoutedGroup): void {
    const reason = "payload nesting exceeds the maximum parse depth of 64";
    const destination = batch.topic ?? this.#cfg.routing.default_segment;
    if (this.#dlq === undefined) {
      this.#m.messagesDropped.inc({ reason: "too_deep" }, g.count);
      this.#log.warn({ topic: batch.topic, partition: batch.partition, records: g.count }, `${reason}: dropped`);
      return;
    }
    const hold = this.#tracker.open();
    const letters: DeadLetter[] = [];
    let start = 0;
    const { data, ends, offsets } = viewsOf(g);
    for (let i = 0; i < g.count; i++) {
      const offset = offsets[i] ?? 0;
      const end = ends[i] ?? start;
      hold.add(slot, offset);
      letters.push({
        // A copy: the reply's memory goes back to the lanes while the DLQ still holds its letters.
        payload: Buffer.from(data.subarray(start, end - 1)),
        reason,
        destination,
        topic: batch.topic,
        partition: batch.partition,
        offset: String(offset),
      });
      start = end;
    }
    this.#deadLetter(hold, letters);
  }

  /**
   * Sends what fits to the DLQ and releases the hold Rejected once the DLQ confirms; an entry no backend can hold
   * is dropped and counted; a failed DLQ write is Errored, so the restart reads the records again.
   */
  #deadLetter(hold: Hold, letters: readonly DeadLetter[]): void {
    const dlq = this.#dlq;
    if (dlq === undefined) throw new Error("dead letter without a DLQ");
    const fit = letters.filter((l) => dlq.fits(l.payload.length));
    const tooLarge = letters.length - fit.length;
    if (tooLarge > 0) {
      this.#m.messagesDropped.inc({ reason: "dlq_too_large" }, tooLarge);
      this.#log.error(
        { records: tooLarge, ceiling: dlq.ceiling },
        "dead letters larger than any DLQ backend holds: dropped",
      );
    }
    if (fit.length === 0) {
      this.#tracker.release(hold, "dropped");
      this.#scheduleCommit();
      return;
    }
    const sent = dlq.send(fit).then(
      () => {
        this.#tracker.release(hold, "rejected");
        this.#m.messagesDlq.inc(fit.length);
        this.#scheduleCommit();
      },
      (err: unknown) => this.#errored([hold], "DLQ write failed", { err, entries: fit.length }),
    );
    this.#inflight.add(sent);
    void sent.finally(() => this.#inflight.delete(sent));
  }

  onState(state: "ok" | "degraded", reason?: string): void {
    this.#connection = state === "ok" ? undefined : (reason ?? "degraded");
    this.#showTransport();
  }

  // A pause by the latch and the client's own view of its connection both show on the one transport component.
  #showTransport(): void {
    if (this.#pausedBy !== undefined)
      this.#health?.set("transport", "degraded", `intake paused by self-regulation (${this.#pausedBy})`);
    else if (this.#connection !== undefined) this.#health?.set("transport", "degraded", this.#connection);
    else this.#health?.set("transport", "ok");
  }

  onAssigned(partitions: readonly PartitionRef[]): void {
    this.#tracker.assigned(partitions);
    for (const p of partitions) this.#assigned.set(`${p.topic}\u0000${p.partition}`, p);
    // A partition assigned while the latch holds intake paused stays paused.
    if (this.#latch.paused) this.#transport.pause(partitions);
  }

  onRevoked(partitions: readonly PartitionRef[]): void {
    for (const p of partitions) this.#assigned.delete(`${p.topic}\u0000${p.partition}`);
    const slots = this.#tracker.revoked(partitions);
    for (const s of slots) this.#lag.delete(s);
    const discarded = this.#buffers.discardSlots(new Set(slots));
    if (discarded > 0) {
      this.#m.transportRevokeDiscarded.inc({ stage: "buffer" }, discarded);
      this.#log.info({ partitions, discarded }, "revoked partitions: buffered records discarded before any write");
    }
  }

  // ---- flush and write ----

  #flush(b: FlushBatch): void {
    const started = performance.now();
    const bytes = b.bytes;
    this.#inflightBytes += bytes;
    this.#m.flushOperations.inc();
    if (b.trigger === "evict") this.#m.hotBufferEvictions.inc();
    this.#m.batchSizeBytes.observe(bytes);
    const prev = this.#chains.get(b.destination);
    // Compressed on the lane that appends it (see codec/lanes.ts compressAppend), in the destination's order.
    const next = (prev ?? Promise.resolve())
      .then(() =>
        this.#appendHeld(b).then(() => {
          this.#m.messagesWritten.inc(b.records);
          this.#m.bytesWritten.inc(bytes);
          this.#m.flushDuration.observe((performance.now() - started) / 1000);
        }),
      )
      .catch((err: unknown) => (isRetryable(err) ? this.#writeFailed(b, err) : this.#refused(b, err)))
      .finally(() => {
        // The frame is on file (or its records dead-lettered from a copy, or Errored): nothing reads the pieces again.
        releaseFlush(b, this.#spill);
        this.#inflightBytes -= bytes;
        this.#inflight.delete(next);
        if (this.#chains.get(b.destination) === next) this.#chains.delete(b.destination);
        this.#wake();
      });
    this.#chains.set(b.destination, next);
    this.#inflight.add(next);
  }

  /** The codec or the store refused the batch for good. No DLQ takes it yet: released Dropped and counted. */
  #refused(b: FlushBatch, err: unknown): void {
    if (this.#dlq === undefined) {
      this.#tracker.release(b.hold, "dropped");
      this.#m.messagesDropped.inc({ reason: "refused" }, b.records);
      this.#log.error(
        { err, destination: b.destination, records: b.records },
        "batch refused for good: records dropped",
      );
      this.#scheduleCommit();
      return;
    }
    this.#log.warn({ err, destination: b.destination, records: b.records }, "batch refused for good: dead-lettering");
    const reason = err instanceof Error ? err.message : String(err);
    const letters: DeadLetter[] = [];
    const { data, ends, offsets, runs } = wholeBatch(b, this.#spill);
    let i = 0;
    let start = 0;
    for (let r = 0; r < runs.length; r += 3) {
      const ref = this.#tracker.ref(runs[r] ?? 0);
      for (let k = 0; k < (runs[r + 1] ?? 0); k++, i++) {
        const end = ends[i] ?? start;
        letters.push({
          payload: data.subarray(start, end - 1),
          reason,
          destination: b.destination,
          topic: ref.topic,
          partition: ref.partition,
          offset: String(offsets[i]),
        });
        start = end;
      }
    }
    this.#deadLetter(b.hold, letters);
  }

  /**
   * Appends the batch as one frame; a local write that fails in a way that can clear (a full or failing disk, staging
   * that cannot be created) is never dead-lettered: the writer has cut the file back to its last whole block, and the
   * batch and its offsets stay held while the append is retried (see #held).
   */
  async #appendHeld(b: FlushBatch): Promise<void> {
    let raw: readonly Buffer[];
    try {
      raw = await flushPieces(b, this.#spill);
    } catch (err) {
      // Its records are in no file yet: held, so the restart reads them again.
      throw new ArchiverError("spill_unreadable", `spilled records unreadable: ${String(err)}`, "retryable");
    }
    const block = { raw, codec: this.#codec };
    return this.#held(b.destination, "batch", () =>
      this.#writers.append(b.destination, block, b.records, b.bytes, b.hold),
    );
  }

  /**
   * Runs a local write (an append, or a step of a file's completion: its manifest, its link to its archive name, a
   * directory sync), holding it while it fails in a way that can clear: what it writes and its offsets stay held, and
   * it is retried from 0.1 s to 5 s while nothing more is received and the sink shows degraded. Once shutdown begins
   * it gets WRITE_RETRY_AFTER_DRAIN_MS more, then its failure is the caller's (its records are Errored and the restart
   * reads them again).
   */
  async #held<R>(destination: string, what: "batch" | "file", write: () => Promise<R>): Promise<R> {
    for (let failures = 0; ;) {
      try {
        const result = await write();
        this.#localWrites?.ok();
        if (failures > 0) {
          this.#log.info({ destination, failures }, `local write landed after retries (${what})`);
          if (--this.#stalled === 0) this.#health?.set("sink", "ok");
          this.#wake();
        }
        return result;
      } catch (err) {
        const late =
          this.#drainStartedAt !== undefined && Date.now() - this.#drainStartedAt > WRITE_RETRY_AFTER_DRAIN_MS;
        if (!isRetryable(err) || late) {
          if (failures > 0 && --this.#stalled === 0) this.#health?.set("sink", "ok");
          throw err;
        }
        this.#localWrites?.fail();
        if (failures++ === 0) {
          this.#stalled++;
          this.#health?.set("sink", "degraded", `local write failing, ${what} held and retried: ${String(err)}`);
          this.#log.warn({ err, destination }, `local write failed: holding the ${what} and retrying`);
        }
        await sleep(backoffDelay(failures, LOCAL_WRITE_BACKOFF));
      }
    }
  }

  /** A write that failed: its batch is Errored. */
  #writeFailed(b: FlushBatch, err: unknown): void {
    this.#m.archiveErrors.inc();
    this.#errored([b.hold], "archive write failed", { err, destination: b.destination, records: b.records });
  }

  #completed(f: CompletedFile<Hold>): void {
    if (f.outcome === "done") {
      for (const h of f.tickets) this.#tracker.release(h, "done");
      this.#m.messagesArchived.inc(f.records);
      this.#log.debug({ path: f.relPath, records: f.records, bytes: f.bytes }, "archive file complete");
      this.#scheduleCommit();
      return;
    }
    const code = f.error instanceof ArchiverError ? f.error.code : undefined;
    if (code === "upload_pending_at_shutdown") {
      // Its staged copy stays on disk and its offsets stay unreleased: the restart reads the records again.
      this.#log.warn({ path: f.relPath, records: f.records }, "still uploading at shutdown: offsets left uncommitted");
      return;
    }
    // Only a file the store refused for good is read back to the DLQ: staging keeps its copy for that. One that could
    // not complete (its sync, its name, its manifest failed) or cannot be read back is Errored and read again.
    const kept = this.#staging?.readBack(f.relPath);
    if (f.error !== undefined && !isRetryable(f.error) && kept !== undefined) {
      const read = this.#readBackRefused(f, f.error, kept);
      this.#inflight.add(read);
      void read.finally(() => this.#inflight.delete(read));
      return;
    }
    this.#errored(f.tickets, "archive file could not complete", { err: f.error, path: f.relPath, records: f.records });
  }

  /**
   * The store refused a whole file for good. Its staged copy is read back a block at a time (each block one flush)
   * and its records dead-lettered one entry per line, or, when the file holds more lines than records (a payload
   * with a newline of its own), each block whole as one entry, so no record is split across entries.
   */
  async #readBackRefused(f: CompletedFile<Hold>, err: unknown, staged: StagedManifest): Promise<void> {
    const [hold, ...rest] = f.tickets;
    if (hold === undefined) return;
    for (const h of rest) this.#tracker.merge(hold, h);
    if (this.#dlq === undefined) {
      this.#tracker.release(hold, "dropped");
      this.#m.messagesDropped.inc({ reason: "refused" }, f.records);
      this.#log.error({ err, path: f.relPath, records: f.records }, "store refused the file for good: records dropped");
    } else {
      const reason = err instanceof Error ? err.message : String(err);
      const destination = f.destination;
      const letters: DeadLetter[] = [];
      try {
        let lines = 0;
        for await (const block of readBlocks(this.#codec, staged.stagedPath, staged.blockLengths)) {
          for (let at = block.indexOf(0x0a); at >= 0; at = block.indexOf(0x0a, at + 1)) lines++;
        }
        const whole = lines > f.records;
        let index = 0;
        for await (const block of readBlocks(this.#codec, staged.stagedPath, staged.blockLengths)) {
          const base = { reason, destination, topic: undefined, partition: undefined, offset: undefined };
          if (whole) {
            letters.push({ ...base, payload: block, records: staged.blockRecords[index++] ?? 0 });
            continue;
          }
          let start = 0;
          for (let at = block.indexOf(0x0a); at >= 0; at = block.indexOf(0x0a, at + 1)) {
            letters.push({ ...base, payload: block.subarray(start, at) });
            start = at + 1;
          }
        }
      } catch (readErr) {
        this.#errored([hold], "refused file could not be read back", { err: readErr, path: f.relPath });
        return;
      }
      this.#log.warn({ err, path: f.relPath, records: f.records }, "store refused the file for good: dead-lettering");
      this.#deadLetter(hold, letters);
    }
    await this.#staging
      ?.discard(f.relPath)
      .catch((e: unknown) => this.#log.warn({ err: e }, "refused copy not removed"));
    this.#scheduleCommit();
  }

  /**
   * Releases holds Errored. Where the source reads them again from the held offsets (kafka with acknowledgements),
   * the process drains and exits so the restart does. A source that cannot deliver them again (grpc, or kafka with
   * acknowledgements off) has already let them go: they are counted dropped as unreplayable and the pipeline runs on.
   */
  #errored(holds: readonly Hold[], reason: string, fields: Record<string, unknown>): void {
    if (this.#cfg.offsetsHeld) {
      for (const h of holds) this.#tracker.release(h, "errored");
      this.#log.error(fields, `${reason}: offsets withheld`);
      this.#withhold(reason);
      return;
    }
    let records = 0;
    for (const h of holds) records += this.#tracker.release(h, "dropped");
    this.#m.messagesDropped.inc({ reason: "unreplayable" }, records);
    this.#log.error({ ...fields, records }, `${reason}: records dropped, the source cannot deliver them again`);
    this.#scheduleCommit();
  }

  #withhold(reason: string): void {
    this.#exitReason ??= reason;
    void this.drain();
  }

  /** Flushes in flight past either bound hold intake back, so compress and write queues stay short. */
  #saturated(): boolean {
    return this.#stalled > 0 || this.#inflightBytes > this.#inflightCap || this.#inflight.size > MAX_FLUSHES_IN_FLIGHT;
  }

  #wake(): void {
    while (!this.#saturated() && this.#waiters.length > 0) this.#waiters.shift()?.();
  }

  // ---- commit ----

  /**
   * Commits what completed files released, at most one commit every COMMIT_SPACING_MS: with ten thousand files
   * completing at a drain, a commit each (each reading every open hold for the floors) took 2.4 s of the event loop.
   */
  #scheduleCommit(): void {
    if (this.#committing !== undefined || this.#commitTimer !== undefined) {
      this.#commitAgain = true;
      return;
    }
    const wait = this.#lastCommitAt + COMMIT_SPACING_MS - performance.now();
    if (wait > 0) {
      this.#commitTimer = setTimeout(() => {
        this.#commitTimer = undefined;
        this.#scheduleCommit();
      }, wait);
      return;
    }
    this.#lastCommitAt = performance.now();
    this.#committing = this.#commit().finally(() => {
      this.#committing = undefined;
      if (this.#commitAgain) {
        this.#commitAgain = false;
        this.#scheduleCommit();
      }
    });
  }

  async #commit(): Promise<void> {
    const offsets = this.#tracker.commitable();
    if (offsets.length === 0) return;
    try {
      await this.#transport.commit(offsets);
      this.#tracker.committed(offsets);
    } catch (err) {
      this.#m.kafkaCommitErrors.inc();
      this.#log.warn({ err, offsets }, "offset commit failed; retried at the next commit");
    }
  }

  // ---- housekeeping ----

  #tick(): void {
    this.#buffers.tick();
    this.#writers.tick();
    this.#gauges();
    this.#scheduleCommit();
  }

  #gauges(): void {
    const s = this.#buffers.stats();
    this.#m.hotBuffersActive.set(s.buffers);
    this.#m.hotBuffersBytes.set(s.bytes);
    this.#m.spilledBytes.set(this.#spill?.bytes ?? 0);
    this.#m.bufferBytes.set(s.bytes + this.#inflightBytes);
    this.#m.bufferRecords.set(s.records);
    this.#m.heldRecords.set(this.#tracker.heldRecords());
    this.#m.heldOffsetBytes.set(this.#tracker.heldBytes());
    let lag = 0;
    for (const v of this.#lag.values()) lag += v;
    this.#m.kafkaLag.set(lag);
    this.#latch.check();
    this.#circuit.cycle(this.#sinkAttempts);
    this.#pressure.update({
      lagRecords: lag,
      receivedRecords: this.#received,
      bufferBytes: s.bytes + this.#inflightBytes,
      rssBytes: readRss(),
      nowMs: Date.now(),
    });
    this.#routeSpec.fields.forEach((field, i) => {
      const n = this.#fallbacks[i] ?? 0;
      if (n > 0) this.#m.routingFallback.inc({ field }, n);
    });
    this.#fallbacks.fill(0);
    if (this.#routingErrors > 0) this.#m.routingErrors.inc(this.#routingErrors);
    this.#routingErrors = 0;
  }

  // ---- shutdown ----

  /** Stop receiving, flush every buffer, complete every file, commit; idempotent. */
  drain(): Promise<PipelineExit> {
    this.#draining ??= this.#drain();
    return this.#draining;
  }

  async #drain(): Promise<PipelineExit> {
    this.#drainStartedAt = Date.now();
    this.#log.info("draining: stop receiving, flush buffers, complete files, commit");
    await this.#transport.stopReceiving();
    this.#staging?.hurry();
    this.#wake();
    for (const w of this.#waiters.splice(0)) w();
    if (this.#batchesRunning > 0) await new Promise<void>((r) => (this.#batchesIdle = r));
    this.#buffers.flushAll();
    while (this.#inflight.size > 0) await Promise.allSettled([...this.#inflight]);
    const closing = this.#writers.closeAll();
    if (this.#staging) {
      // Uploads get UPLOAD_DRAIN_MS; a file still uploading then keeps its staged copy and its offsets.
      const grace = new AbortController();
      const closed = await Promise.race([
        closing.then(() => true),
        sleep(UPLOAD_DRAIN_MS, false, { signal: grace.signal }).catch(() => false),
      ]);
      grace.abort();
      await this.#staging.drainUploads(closed ? UPLOAD_DRAIN_MS : 0);
    }
    await closing;
    clearInterval(this.#timer);
    while (this.#committing !== undefined) await this.#committing;
    // The last commit below covers whatever a spaced one waits to commit.
    clearTimeout(this.#commitTimer);
    this.#commitTimer = undefined;
    await this.#commit();
    this.#gauges();
    await this.#transport.close();
    await this.#dlq?.close();
    await this.#spill?.close();
    const reason = this.#exitReason ?? (this.#tracker.withheld ? "offsets withheld" : undefined);
    const exit: PipelineExit = reason ? { code: 1, reason } : { code: 0 };
    this.#log.info({ ...exit }, "drained");
    this.#resolveDone(exit);
    return exit;
  }
}

/**
 * The hot buffers' spill, under spool_dir: at most min_free_spool_bytes of it (the room the spool keeps free at
 * startup), read back at most `readCapBytes` at once. Without a spool to write (a local run with no spool volume), the
 * hot buffers flush what the bound relieves, as they did before the spill.
 */
function openSpill(cfg: ResolvedConfig, readCapBytes: number, log: Logger): Spill | undefined {
  const dir = join(cfg.buffer.spool_dir, "spill");
  try {
    return new Spill(dir, resolveSpoolBudget(cfg, process.env).minFreeSpoolBytes, readCapBytes);
  } catch (err) {
    log.warn({ err, dir }, "no spill: hot buffers relieved for the memory bound flush small frames instead");
    return undefined;
  }
}
