// The self-regulation latch: pauses intake (every assigned partition) while any pressure source runs high, and
// resumes only once every source has fallen back, so a store outage or memory growth turns into consumer lag.
import { HELD_BYTES_PER_RECORD } from "../config/resolve.ts";
import { memoryRatio, readRss, type ReadRss } from "./sampler.ts";

export interface LatchOptions {
  /** self_regulation.pause_above: a source at or above it pauses. */
  pauseAbove: number;
  /** self_regulation.resume_below: a paused latch resumes once every source is below it. */
  resumeBelow: number;
  /** self_regulation.enabled: false never pauses (resolveConfig warns of it at startup). */
  enabled: boolean;
  /** Each a ratio, 0 when idle, 1 at its cap, may exceed 1. */
  sources: Record<string, () => number>;
  onPause: (source: string, ratio: number) => void;
  onResume: () => void;
  /** Called before each reading while paused, with the source holding the latch: a chance to shed what it counts. */
  whilePaused?: (source: string) => void;
  /**
   * While paused: true when a source has shed all that pausing can shed (memory, with nothing left in flight). Such a
   * source holds the latch only at or above pause_above: RSS keeps the process's own floor (code, allocator pools)
   * however long intake waits, and a floor above resume_below would otherwise keep the latch paused for good.
   */
  settled?: (source: string) => boolean;
  /** self_regulation_paused: 1 while paused. */
  gauge?: { set(value: number): void };
}

export interface LatchState {
  paused: boolean;
  /** The hottest source: the one holding a paused latch. Undefined with no sources. */
  source?: string;
  /** The hottest source's ratio. */
  ratio: number;
}

export interface Latch {
  /** Reads every source and pauses or resumes; call about once a second and after a large change. */
  check(): LatchState;
  readonly paused: boolean;
}

export function createLatch(opts: LatchOptions): Latch {
  const names = Object.keys(opts.sources);
  const reads = Object.values(opts.sources);
  let paused = false;
  let holder: string | undefined;
  opts.gauge?.set(0);

  return {
    get paused() {
      return paused;
    },
    check(): LatchState {
      if (paused && holder !== undefined) opts.whilePaused?.(holder);
      let source: string | undefined;
      let hottest = 0;
      /** While paused: some source is still high enough to hold the latch. */
      let holds = false;
      for (let i = 0; i < reads.length; i++) {
        const v = reads[i]?.() ?? 0;
        // NaN (a cap of 0 read as 0/0) would otherwise block resuming for good; it reads as idle.
        const r = Number.isNaN(v) ? 0 : v;
        if (source === undefined || r > hottest) {
          source = names[i];
          hottest = r;
        }
        const name = names[i] ?? "";
        if (paused && r >= opts.resumeBelow && !(r < opts.pauseAbove && opts.settled?.(name) === true)) holds = true;
      }
      const state = (): LatchState =>
        source === undefined ? { paused, ratio: 0 } : { paused, source, ratio: hottest };
      if (!opts.enabled) return state();
      // State changes only after the callback returns: a pause or resume that throws is tried again next check.
      if (!paused && source !== undefined && hottest >= opts.pauseAbove) {
        opts.onPause(source, hottest);
        paused = true;
        holder = source;
        opts.gauge?.set(1);
      } else if (paused && holds) {
        holder = source;
      } else if (paused) {
        opts.onResume();
        paused = false;
        opts.gauge?.set(0);
      }
      return state();
    },
  };
}

export interface LatchSourceOptions {
  /** The memory guard's limit (resolveMemoryLimit). */
  memoryLimitBytes: number;
  /** memory.pressure_threshold (DFE_ARCHIVER_MEMORY_PRESSURE_THRESHOLD); 0 turns the memory source off. */
  pressureThreshold: number;
  /** self_regulation.pause_above, to place the memory source's pause point on the threshold. */
  pauseAbove: number;
  /** OffsetTracker.heldRecords. */
  heldRecords: () => number;
  /** StagingStore.pressure (staged bytes over buffer.staged_bytes_cap); absent for a local destination. */
  stagedPressure?: (() => number) | undefined;
  rss?: ReadRss;
}

/**
 * The pipeline's three pressure sources, each scaled so the latch's pause_above is the point the seed names:
 * - held_records: held x 32 bytes over a quarter of the memory limit, pausing at pause_above of that quarter.
 * - staged_bytes: staged bytes over buffer.staged_bytes_cap, pausing at pause_above of the cap.
 * - memory: the threshold is the trigger, so the ratio is (rss / limit) x (pause_above / threshold): it reaches
 *   pause_above exactly when rss reaches threshold x limit, and resumes below threshold x limit x
 *   resume_below / pause_above (0.6 of the limit with the defaults). Reading rss / (limit x threshold) against
 *   pause_above would instead pause at 0.64 of the limit, applying the 0.8 twice.
 */
export function latchSources(o: LatchSourceOptions): Record<string, () => number> {
  const sources: Record<string, () => number> = {};
  const quarter = o.memoryLimitBytes / 4;
  sources.held_records = () => (o.heldRecords() * HELD_BYTES_PER_RECORD) / quarter;
  if (o.stagedPressure !== undefined) sources.staged_bytes = o.stagedPressure;
  if (o.pressureThreshold > 0) {
    const rss = o.rss ?? readRss;
    const scale = o.pauseAbove / o.pressureThreshold;
    sources.memory = () => memoryRatio(rss(), o.memoryLimitBytes) * scale;
  }
  return sources;
}
