// Regulation: the self-regulation latch, which pauses every assigned partition past its sources' thresholds and
// resumes them below; the scaling-pressure composite KEDA reads; the sink circuit; and the transport health
// component, which shows a pause by the latch and the client's own view of its connection.
import type { Logger } from "pino";
import type { ResolvedConfig } from "../config/resolve.ts";
import type { PartitionRef } from "../delivery/tracker.ts";
import type { Health } from "../observe/health.ts";
import type { Metrics } from "../observe/metrics.ts";
import { createSinkCircuit, type SinkCircuit, type SinkOutcomes } from "../regulate/circuit.ts";
import { createLatch, latchSources, MemorySource, type Latch } from "../regulate/latch.ts";
import type { MemoryLimit } from "../regulate/memory.ts";
import { createPressure, type Pressure } from "../regulate/pressure.ts";
import { readRss, reclaim, type ReadRss } from "../regulate/sampler.ts";
import type { StagingStore } from "../store/staging.ts";
import type { Transport } from "../transport/types.ts";

export interface RegulationDeps {
  readonly config: ResolvedConfig;
  readonly memory: MemoryLimit;
  /** The hot buffers' shared cap. */
  readonly hotBufferCapBytes: number;
  readonly transport: Pick<Transport, "pause" | "resume">;
  readonly metrics: Metrics;
  readonly log: Logger;
  readonly health: Health | undefined;
  /** An object-store destination's staging: the latch reads its fill, the sink circuit its uploads. */
  readonly staging: Pick<StagingStore, "pressure" | "attempts"> | undefined;
  /** A local destination's writes, which the sink circuit reads instead. */
  readonly localWrites: SinkOutcomes;
  heldRecords(): number;
  /** Flushes what the hot buffers hold into their files (HotBufferPool.shed). */
  shed(): void;
  /** Nothing in flight and no write retrying (Flushes.settled). */
  settled(): boolean;
  /** The process's RSS (tests give their own). */
  readonly rss?: ReadRss;
  /** Collects the garbage of finished work (sampler.ts reclaim; tests give their own). */
  readonly reclaim?: (lastResort: boolean) => boolean;
}

/** One gauge cycle's reading of the pipeline, for the scaling pressure. */
export interface Reading {
  readonly lagRecords: number;
  readonly receivedRecords: number;
  readonly bufferBytes: number;
}

export class Regulation {
  readonly #d: RegulationDeps;
  readonly #latch: Latch;
  readonly #pressure: Pressure;
  readonly #circuit: SinkCircuit;
  /** What the sink circuit reads: the staging store's uploads, or for a local destination its writes. */
  readonly #sinkAttempts: SinkOutcomes;
  /** Assigned partitions, so the latch pauses and resumes all of them. */
  readonly #assigned = new Map<string, PartitionRef>();
  #pausedBy: string | undefined;
  #connection: string | undefined;

  constructor(deps: RegulationDeps) {
    this.#d = deps;
    const { config: cfg, memory, transport, metrics, log, health, staging } = deps;
    this.#sinkAttempts = staging?.attempts ?? deps.localWrites;
    const rss = deps.rss ?? readRss;
    const collect = deps.reclaim ?? reclaim;
    const memorySource =
      cfg.memory.pressure_threshold > 0
        ? new MemorySource({
            limitBytes: memory.bytes,
            pressureThreshold: cfg.memory.pressure_threshold,
            pauseAbove: cfg.self_regulation.pause_above,
            resumeBelow: cfg.self_regulation.resume_below,
            rss,
          })
        : undefined;
    this.#latch = createLatch({
      pauseAbove: cfg.self_regulation.pause_above,
      resumeBelow: cfg.self_regulation.resume_below,
      enabled: cfg.self_regulation.enabled,
      gauge: metrics.selfRegulationPaused,
      sources: latchSources({
        memoryLimitBytes: memory.bytes,
        heldRecords: () => deps.heldRecords(),
        stagedPressure: staging ? () => staging.pressure() : undefined,
        memory: memorySource,
      }),
      onPause: (source, ratio) => {
        transport.pause([...this.#assigned.values()]);
        this.#pausedBy = source;
        this.#showTransport();
        log.warn({ source, ratio }, "self-regulation: intake paused");
      },
      // Paused on memory, what the hot buffers hold goes to its files, half of it a reading, and the garbage of
      // finished work is what holds RSS up (see reclaim). Buffers left waiting for their age held a paused process
      // at its limit with nothing in flight, for as long as flush_age.
      whilePaused: (source) => {
        if (source !== "memory" || memorySource === undefined) return;
        // Only while RSS is still at the pause point: a shed at every reading put flushes in flight before each
        // reading of `settled`, and held 10,000 destinations paused 10-15 s a time under the pause point.
        if (memorySource.ratio() >= cfg.self_regulation.pause_above) deps.shed();
        // With nothing in flight (what was shed has landed) and the garbage collected, waiting longer frees
        // nothing more: RSS is the floor, and the memory source moves its band above it (MemorySource).
        const settled = deps.settled();
        if (collect(settled) && settled) {
          const before = memorySource.liftBytes;
          memorySource.settled();
          if (memorySource.liftBytes > before)
            log.info(
              { rssBytes: rss(), memoryLimitBytes: memory.bytes },
              "self-regulation: RSS with nothing left to free is above the memory resume point; resuming above it",
            );
        }
      },
      onResume: () => {
        transport.resume([...this.#assigned.values()]);
        this.#pausedBy = undefined;
        this.#showTransport();
        log.info("self-regulation: intake resumed");
      },
    });
    this.#pressure = createPressure({
      enabled: cfg.scaling.enabled,
      memoryGateThreshold: cfg.scaling.memory_gate_threshold,
      memoryLimitBytes: memory.bytes,
      hotBufferCapBytes: deps.hotBufferCapBytes,
      kafkaLag: cfg.transport === "kafka",
      gauge: metrics.scalingPressure,
    });
    this.#circuit = createSinkCircuit({
      gauge: metrics.sinkCircuitOpen,
      onChange: (open) => {
        this.#pressure.setSinkOpen(open);
        if (staging) health?.set("sink", open ? "degraded" : "ok", open ? "every upload is failing" : undefined);
        if (open) log.warn("sink circuit open: every write is failing; scaling pressure reads 0 until one lands");
        else log.info("sink circuit closed: writes land again");
      },
    });
  }

  /** The scaling-pressure composite, 0-100. */
  pressure(): number {
    return this.#pressure.value();
  }

  /** The latch reads its sources again (after a turn is buffered). */
  check(): void {
    this.#latch.check();
  }

  /** A gauge cycle: the latch reads its sources, the circuit its outcomes, the pressure `reading`. */
  cycle(reading: Reading): void {
    this.#latch.check();
    this.#circuit.cycle(this.#sinkAttempts);
    this.#pressure.update({ ...reading, rssBytes: readRss(), nowMs: Date.now() });
  }

  assigned(partitions: readonly PartitionRef[]): void {
    for (const p of partitions) this.#assigned.set(`${p.topic}\u0000${p.partition}`, p);
    // A partition assigned while the latch holds intake paused stays paused.
    if (this.#latch.paused) this.#d.transport.pause(partitions);
  }

  revoked(partitions: readonly PartitionRef[]): void {
    for (const p of partitions) this.#assigned.delete(`${p.topic}\u0000${p.partition}`);
  }

  /** The client's own view of its connection (TransportSink.onState). */
  connection(state: "ok" | "degraded", reason?: string): void {
    this.#connection = state === "ok" ? undefined : (reason ?? "degraded");
    this.#showTransport();
  }

  // A pause by the latch and the client's own view of its connection both show on the one transport component.
  #showTransport(): void {
    const health = this.#d.health;
    if (this.#pausedBy !== undefined)
      health?.set("transport", "degraded", `intake paused by self-regulation (${this.#pausedBy})`);
    else if (this.#connection !== undefined) health?.set("transport", "degraded", this.#connection);
    else health?.set("transport", "ok");
  }
}
