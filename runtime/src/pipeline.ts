// The loop that joins the stages: transport batch -> route -> hot buffer -> flush (compress one frame) -> writer
// appends -> roll -> file complete -> delivery releases the file's offsets -> transport commits the floor. Each
// concern is a piece of its own under pipeline/: intake and turns (intake.ts), flush scheduling (flushes.ts), release
// (release.ts), commits (commits.ts) and the drain (drain.ts); this joins them to the stages and to regulation.
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import type { Logger } from "pino";
import { parsePathTemplate } from "./archive/path.ts";
import { createWriterPool, PARKED_PER_WRITER, type WriterPool } from "./archive/writers.ts";
import { HotBufferPool } from "./buffer/hot.ts";
import { Spill } from "./buffer/spill.ts";
import { createCodec } from "./codec/index.ts";
import { codecLanes } from "./codec/lanes.ts";
import type { ResolvedConfig } from "./config/resolve.ts";
import { handOver, type HandOverSteps } from "./delivery/handover.ts";
import type { Hold } from "./delivery/hold.ts";
import { OffsetTracker, type PartitionRef } from "./delivery/tracker.ts";
import type { KafkaDlq } from "./dlq/kafka.ts";
import { ConfigError } from "./errors.ts";
import type { Health } from "./observe/health.ts";
import type { Metrics } from "./observe/metrics.ts";
import { Commits } from "./pipeline/commits.ts";
import { drain, type PipelineExit } from "./pipeline/drain.ts";
import { Flushes } from "./pipeline/flushes.ts";
import { Intake, routeSpecOf } from "./pipeline/intake.ts";
import { Regulation } from "./pipeline/regulation.ts";
import { Release } from "./pipeline/release.ts";
import type { InboundBatch } from "./records.ts";
import { SinkTally } from "./regulate/circuit.ts";
import type { MemoryLimit } from "./regulate/memory.ts";
import type { OpenedStore } from "./store/open.ts";
import { resolveSpoolBudget } from "./store/spool.ts";
import { UPLOAD_DRAIN_MS, type StagingStore } from "./store/staging.ts";
import { KAFKA_BATCHES } from "./transport/record-batch.ts";
import type { Transport, TransportSink } from "./transport/types.ts";

export type { PipelineExit } from "./pipeline/drain.ts";

const TICK_MS = 1000;

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

export class Pipeline implements TransportSink {
  /** The delivery guarantee in force and why, as pipeline_delivery_guarantee reports it. */
  readonly guarantee: { guarantee: string; reason: string };
  readonly #transport: Transport;
  readonly #m: Metrics;
  readonly #log: Logger;
  readonly #tracker: OffsetTracker;
  readonly #buffers: HotBufferPool;
  readonly #writers: WriterPool<Hold>;
  readonly #staging: StagingStore | undefined;
  readonly #dlq: KafkaDlq | undefined;
  readonly #spill: Spill | undefined;
  readonly #intake: Intake;
  readonly #flushes: Flushes;
  readonly #release: Release;
  readonly #commits: Commits;
  readonly #regulation: Regulation;
  readonly #offsetsHeld: boolean;
  readonly #handOverSteps: HandOverSteps;
  #timer: NodeJS.Timeout | undefined;
  #draining: Promise<PipelineExit> | undefined;
  #exitReason: string | undefined;
  readonly #done: Promise<PipelineExit>;
  #resolveDone!: (e: PipelineExit) => void;

  constructor(deps: PipelineDeps) {
    const cfg = deps.config;
    this.#transport = deps.transport;
    this.#m = deps.metrics;
    this.#log = deps.log;
    this.#done = new Promise((r) => (this.#resolveDone = r));
    if (cfg.archive.destination === undefined) {
      throw new ConfigError("archive.destination", "no destination: the pipeline idles");
    }
    const staging = deps.store.staging;
    this.#staging = staging;
    this.#dlq = deps.dlq;
    const tracker = new OffsetTracker({ holdsCommit: cfg.offsetsHeld });
    this.#tracker = tracker;
    const routeSpec = routeSpecOf(cfg);
    const codec = createCodec(cfg.compression.codec, cfg.compression.level);
    const memory = deps.memory;
    const capBytes = Math.floor(memory.bytes / 4);
    codecLanes().limitSpares(memory.bytes);
    const inflightCap = Math.max(capBytes / 2, cfg.buffer.flush_bytes * 2);
    // Read back at most half what may be in flight: the drain reads every destination's spill at once.
    // Only where records can be read again (kafka): grpc's answered pushes are kept in memory, as before the spill.
    const spill = deps.transport.replayable ? openSpill(cfg, inflightCap / 2, this.#log) : undefined;
    this.#spill = spill;
    this.#commits = new Commits({ tracker, transport: this.#transport, metrics: this.#m, log: this.#log });
    const scheduleCommit = () => this.#commits.schedule();
    const withhold = (reason: string) => this.#withhold(reason);
    this.#release = new Release({
      offsetsHeld: cfg.offsetsHeld,
      defaultSegment: cfg.routing.default_segment,
      tracker,
      dlq: this.#dlq,
      staging,
      spill,
      codec,
      metrics: this.#m,
      log: this.#log,
      scheduleCommit,
      track: (work) => this.#flushes.track(work),
      withhold,
    });
    const localWrites = new SinkTally();
    this.#buffers = new HotBufferPool({
      spill,
      onSpill: () => this.#m.hotBufferSpills.inc(),
      flushBytes: cfg.buffer.flush_bytes,
      flushRecords: cfg.buffer.flush_records,
      flushAgeMs: cfg.buffer.flush_age_secs * 1000,
      coldAgeMs: cfg.archive.roll_interval_secs * 1000,
      coldPast: cfg.archive.max_writers * (1 + PARKED_PER_WRITER),
      capBytes,
      openHold: () => tracker.open(),
      onFlush: (b) => this.#flushes.flush(b),
      onEmptied: (h) => tracker.release(h, "dropped"),
    });
    const parsed = parsePathTemplate(cfg.archive.path_template);
    if ("error" in parsed) throw new ConfigError("archive.path_template", `unknown token ${parsed.error}`);
    const instanceId = deps.instanceId ?? randomBytes(3).toString("hex");
    // Which process wrote a file, by its name (e2e/chaos traces each duplicate to the processes that archived it).
    this.#log.info({ instanceId }, "archive file names end in -<seq>-<instance id>_<writer>");
    this.#writers = createWriterPool<Hold>({
      store: deps.store.store,
      parts: parsed.parts,
      codecSuffix: codec.suffix,
      rollSizeBytes: cfg.archive.roll_size_bytes,
      rollIntervalSecs: cfg.archive.roll_interval_secs,
      maxWriters: cfg.archive.max_writers,
      instanceId,
      codecName: codec.name,
      metrics: this.#m,
      merge: (into, from) => tracker.merge(into, from),
      retry: (destination, attempt) => this.#flushes.held(destination, "file", attempt),
      onComplete: (f) => this.#release.completed(f),
      onRolled: () => this.#flushes.wake(),
    });
    this.#flushes = new Flushes({
      writers: this.#writers,
      codec,
      spill,
      inflightCap,
      poolCap: capBytes,
      metrics: this.#m,
      log: this.#log,
      health: deps.health,
      localWrites: staging ? undefined : localWrites,
      refused: (b, err) => this.#release.refused(b, err),
      writeFailed: (b, err) => this.#release.writeFailed(b, err),
      unsaturated: () => this.#buffers.tick(() => !this.#flushes.saturated()),
    });
    this.#intake = new Intake({
      routeSpec,
      format: KAFKA_BATCHES,
      batchSize: cfg.kafka.batch_size,
      offsetsHeld: cfg.offsetsHeld,
      tracker,
      buffers: this.#buffers,
      metrics: this.#m,
      log: this.#log,
      flushes: this.#flushes,
      refusing: () => this.#refusing(),
      tooDeep: (batch, slot, g) => this.#release.tooDeep(batch, slot, g),
      checkLatch: () => this.#regulation.check(),
      scheduleCommit,
      withhold,
    });
    this.#log.info(
      { memoryLimitBytes: memory.bytes, memorySource: memory.source, hotBufferCapBytes: capBytes },
      "memory guard",
    );
    this.#regulation = new Regulation({
      config: cfg,
      memory,
      hotBufferCapBytes: capBytes,
      transport: this.#transport,
      metrics: this.#m,
      log: this.#log,
      health: deps.health,
      staging,
      localWrites,
      heldRecords: () => tracker.heldRecords(),
      shed: () => this.#buffers.shed(),
      settled: () => this.#flushes.settled,
    });
    this.#offsetsHeld = cfg.offsetsHeld;
    this.#handOverSteps = {
      batchesEnded: (slots) => this.#intake.slotsIdle(slots),
      flush: async (slots) => {
        while (!this.#buffers.flushSlots(slots, () => this.#flushes.hasRoom())) await this.#flushes.room();
        await this.#flushes.landedSoFar();
      },
      roll: (slots) => this.#writers.roll((holds) => holds.some((h) => h.holdsAny(slots))),
      commit: () => this.#commits.now(),
      handedOver: (slots) => tracker.handedOver(slots),
      hurry: staging ? () => staging.hurry() : undefined,
    };
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
    return this.#regulation.pressure();
  }

  get done(): Promise<PipelineExit> {
    return this.#done;
  }

  // ---- transport sink ----

  onBatch(batch: InboundBatch): Promise<void> {
    return this.#intake.onBatch(batch);
  }

  /**
   * Once draining, a replayable source's batches are left for the restart to read again. A push listener's are
   * already answered: its stopReceiving hands over everything it queued, and all of it is routed and written.
   */
  #refusing(): boolean {
    return this.#draining !== undefined && this.#transport.replayable;
  }

  onState(state: "ok" | "degraded", reason?: string): void {
    this.#regulation.connection(state, reason);
  }

  onAssigned(partitions: readonly PartitionRef[]): void {
    this.#tracker.assigned(partitions);
    this.#regulation.assigned(partitions);
  }

  /**
   * With `handOver` (see TransportSink.onRevoked), the partitions' records are committed first (delivery/handover.ts):
   * until then they stay assigned here, so their batches still running are buffered and their floors committed.
   */
  onRevoked(partitions: readonly PartitionRef[], signal?: AbortSignal): Promise<void> | void {
    if (signal === undefined || !this.#offsetsHeld) return this.#revoke(partitions);
    const slots = new Set(partitions.map((p) => this.#tracker.slot(p.topic, p.partition)));
    return handOver(this.#handOverSteps, partitions, slots, signal, this.#log).then(
      (outcome) => {
        this.#m.transportHandovers.inc({ outcome });
        this.#revoke(partitions);
      },
      (err: unknown) => {
        this.#log.error({ err, partitions }, "revoked partitions' hand-over failed");
        this.#revoke(partitions);
      },
    );
  }

  #revoke(partitions: readonly PartitionRef[]): void {
    this.#regulation.revoked(partitions);
    const slots = this.#tracker.revoked(partitions);
    this.#intake.forget(slots);
    const discarded = this.#buffers.discardSlots(new Set(slots));
    if (discarded > 0) {
      this.#m.transportRevokeDiscarded.inc({ stage: "buffer" }, discarded);
      this.#log.info({ partitions, discarded }, "revoked partitions: buffered records discarded before any write");
    }
  }

  #withhold(reason: string): void {
    this.#exitReason ??= reason;
    void this.drain();
  }

  // ---- housekeeping ----

  #tick(): void {
    this.#buffers.compact();
    this.#buffers.tick(() => !this.#flushes.saturated());
    this.#writers.tick();
    this.#gauges();
    this.#commits.schedule();
  }

  #gauges(): void {
    const s = this.#buffers.stats();
    // Flushes in flight, and what the spill holds in memory (its chunks before they are on file), are buffered too.
    const buffered = s.bytes + this.#flushes.inflightBytes + (this.#spill?.memory ?? 0);
    this.#m.hotBuffersActive.set(s.buffers);
    this.#m.hotBuffersBytes.set(s.bytes);
    this.#m.spilledBytes.set(this.#spill?.bytes ?? 0);
    this.#m.bufferBytes.set(buffered);
    this.#m.bufferRecords.set(s.records);
    this.#m.heldRecords.set(this.#tracker.heldRecords());
    this.#m.heldOffsetBytes.set(this.#tracker.heldBytes());
    const lag = this.#intake.lag();
    this.#m.kafkaLag.set(lag);
    this.#regulation.cycle({
      lagRecords: lag,
      receivedRecords: this.#intake.received,
      bufferBytes: buffered,
    });
    this.#intake.reportRouting();
  }

  // ---- shutdown ----

  /** Stop receiving, flush every buffer, complete every file, commit; idempotent. */
  drain(): Promise<PipelineExit> {
    this.#draining ??= this.#drain();
    return this.#draining;
  }

  async #drain(): Promise<PipelineExit> {
    this.#flushes.drainStarted(Date.now());
    this.#log.info("draining: stop receiving, flush buffers, complete files, commit");
    const staging = this.#staging;
    const exit = await drain({
      stopReceiving: () => this.#transport.stopReceiving(),
      uploads: staging && {
        graceMs: UPLOAD_DRAIN_MS,
        // Never released: the drain's grace is all the time the uploads have left.
        hurry: () => void staging.hurry(),
        drain: (graceMs) => staging.drainUploads(graceMs),
      },
      releaseIntake: () => this.#flushes.releaseWaiters(),
      batchesEnded: () => this.#intake.idle(),
      // A buffer at a time as room frees: ten thousand flushes at once queued at the writers past what the heap held.
      flushBuffers: async () => {
        while (!this.#buffers.flushAll(() => this.#flushes.hasRoom())) await this.#flushes.room();
      },
      flushesLanded: () => this.#flushes.landed(),
      closeFiles: () => this.#writers.closeAll(),
      stopTicking: () => clearInterval(this.#timer),
      lastCommit: () => this.#commits.last(),
      gauges: () => this.#gauges(),
      close: async () => {
        await this.#transport.close();
        await this.#dlq?.close();
        await this.#spill?.close();
      },
      exitReason: () => this.#exitReason ?? (this.#tracker.withheld ? "offsets withheld" : undefined),
    });
    this.#log.info({ ...exit }, "drained");
    this.#resolveDone(exit);
    return exit;
  }
}

/**
 * The hot buffers' spill, under spool_dir: at most min_free_spool_bytes of it (the room the spool keeps free at
 * startup), read back or on its way to file at most `ioCapBytes` at once. Without a spool to write (a local run with no spool volume), the
 * hot buffers flush what the bound relieves, as they did before the spill.
 */
function openSpill(cfg: ResolvedConfig, ioCapBytes: number, log: Logger): Spill | undefined {
  const dir = join(cfg.buffer.spool_dir, "spill");
  try {
    return new Spill(dir, resolveSpoolBudget(cfg, process.env).minFreeSpoolBytes, ioCapBytes);
  } catch (err) {
    log.warn({ err, dir }, "no spill: hot buffers relieved for the memory bound flush small frames instead");
    return undefined;
  }
}
