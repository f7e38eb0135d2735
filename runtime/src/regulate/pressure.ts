// The scaling_pressure composite KEDA scales on (0-100, served at /scaling/pressure): the hottest of the kafka_lag,
// buffer_depth and memory terms, so whichever signal runs hot scales the archiver out; a weighted mean would let
// two idle terms hide one saturated one.
import { memoryRatio } from "./sampler.ts";

export interface PressureOptions {
  /** scaling.enabled: false reports 0 always. */
  enabled: boolean;
  /** scaling.memory_gate_threshold: a memory ratio at or above it forces 100. */
  memoryGateThreshold: number;
  /** The memory guard's limit. */
  memoryLimitBytes: number;
  /** The hot buffers' shared cap (a quarter of the memory limit). */
  hotBufferCapBytes: number;
  /** false on grpc: a push stream keeps no backlog, so the term is dropped rather than read as a false zero. */
  kafkaLag: boolean;
  /** Lag worth this many seconds of the pod's recent intake reads as 1. Default 60 (KEDA's averaging window). */
  lagHorizonSecs?: number;
  /** The least lag that reads as 1, so a trickle's small backlog scales nothing. Default 10k (1 s at 10k/s). */
  lagFloorRecords?: number;
  /** Time constant of the intake-rate average. Default 30 s. */
  rateTauSecs?: number;
  /** scaling_pressure. */
  gauge?: { set(value: number): void };
}

export interface PressureInputs {
  /** Position lag: records past this pod's read position, summed over assigned partitions (the kafka_lag gauge). */
  lagRecords: number;
  /** Records received since start (monotonic): the intake rate the lag is measured in. */
  receivedRecords: number;
  /** Hot-buffer bytes plus bytes flushed and not yet appended (the buffer_bytes gauge). */
  bufferBytes: number;
  rssBytes: number;
  nowMs: number;
}

/** Each term's ratio (1 = saturated); kafkaLag is undefined where the term is dropped. */
export interface PressureTerms {
  kafkaLag: number | undefined;
  bufferDepth: number;
  memory: number;
}

export interface Pressure {
  /** Recomputes the composite from this tick's figures, sets the gauge and returns it. */
  update(inputs: PressureInputs): number;
  /** The last composite, 0-100. */
  value(): number;
  /** Every upload or write failing: the composite reads 0 until the circuit closes, as more pods cannot help. */
  setSinkOpen(open: boolean): void;
  /** The terms of the last update. */
  terms(): PressureTerms;
}

export function createPressure(opts: PressureOptions): Pressure {
  const horizon = opts.lagHorizonSecs ?? 60;
  const floor = opts.lagFloorRecords ?? 10_000;
  const tauMs = (opts.rateTauSecs ?? 30) * 1000;
  let value = 0;
  let sinkOpen = false;
  let terms: PressureTerms = { kafkaLag: opts.kafkaLag ? 0 : undefined, bufferDepth: 0, memory: 0 };
  let rate = 0;
  let lastAt: number | undefined;
  let lastReceived = 0;
  const publish = (v: number): number => {
    value = v;
    opts.gauge?.set(v);
    return v;
  };
  publish(0);

  return {
    update(i) {
      if (lastAt !== undefined && i.nowMs > lastAt) {
        // A counter that went backwards was reset: that interval counts as no intake.
        const got = Math.max(0, i.receivedRecords - lastReceived);
        const dt = i.nowMs - lastAt;
        const alpha = 1 - Math.exp(-dt / tauMs);
        rate += alpha * ((got * 1000) / dt - rate);
      }
      if (lastAt === undefined || i.nowMs > lastAt) {
        lastAt = i.nowMs;
        lastReceived = i.receivedRecords;
      }
      const memory = memoryRatio(i.rssBytes, opts.memoryLimitBytes);
      terms = {
        kafkaLag: opts.kafkaLag ? i.lagRecords / Math.max(floor, rate * horizon) : undefined,
        bufferDepth: opts.hotBufferCapBytes > 0 ? i.bufferBytes / opts.hotBufferCapBytes : 0,
        memory,
      };
      if (!opts.enabled || sinkOpen) return publish(0);
      if (memory >= opts.memoryGateThreshold) return publish(100);
      const hottest = Math.max(terms.kafkaLag ?? 0, terms.bufferDepth, memory);
      // Written so a NaN term (a figure not yet known) reads as 0 rather than poisoning the gauge.
      return publish(hottest > 0 ? Math.min(100, hottest * 100) : 0);
    },
    value: () => value,
    setSinkOpen(open) {
      sinkOpen = open;
      if (open) publish(0);
    },
    terms: () => terms,
  };
}
