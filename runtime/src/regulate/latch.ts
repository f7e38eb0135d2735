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
        if (paused && r >= opts.resumeBelow) holds = true;
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
  /** OffsetTracker.heldRecords. */
  heldRecords: () => number;
  /** StagingStore.pressure (staged bytes over buffer.staged_bytes_cap); absent for a local destination. */
  stagedPressure?: (() => number) | undefined;
  /** The memory source (MemorySource.ratio); absent when memory.pressure_threshold is 0. */
  memory?: MemorySource | undefined;
}

/**
 * The pipeline's pressure sources, each scaled so the latch's pause_above is the point the seed names:
 * - held_records: held x 32 bytes over a quarter of the memory limit, pausing at pause_above of that quarter.
 * - staged_bytes: staged bytes over buffer.staged_bytes_cap, pausing at pause_above of the cap.
 * - memory: see MemorySource.
 */
export function latchSources(o: LatchSourceOptions): Record<string, () => number> {
  const sources: Record<string, () => number> = {};
  const quarter = o.memoryLimitBytes / 4;
  sources.held_records = () => (o.heldRecords() * HELD_BYTES_PER_RECORD) / quarter;
  if (o.stagedPressure !== undefined) sources.staged_bytes = o.stagedPressure;
  const memory = o.memory;
  if (memory !== undefined) sources.memory = () => memory.ratio();
  return sources;
}

export interface MemorySourceOptions {
  /** The memory guard's limit (resolveMemoryLimit). */
  limitBytes: number;
  /** memory.pressure_threshold (DFE_ARCHIVER_MEMORY_PRESSURE_THRESHOLD), above 0. */
  pressureThreshold: number;
  /** self_regulation.pause_above and resume_below. */
  pauseAbove: number;
  resumeBelow: number;
  rss?: ReadRss;
}

/**
 * The memory source. The threshold is the trigger, so the ratio is (rss / limit) x (pause_above / threshold): it
 * reaches pause_above exactly when rss reaches threshold x limit, and falls under resume_below below threshold x
 * limit x resume_below / pause_above (0.6 of the limit with the defaults). Reading rss / (limit x threshold) against
 * pause_above would instead pause at 0.64 of the limit, applying the 0.8 twice.
 *
 * RSS keeps a floor no pause lowers: code, the lanes' WebAssembly memories, the allocator's pools, 206-229 MiB after
 * a run here. At a 250 MiB limit that floor lay above the resume point (150 MiB), and a latch waiting for it paused
 * intake for 80 s with nothing buffered. So once intake waits with nothing left to free (settled: the hot buffers
 * shed, their flushes landed, the garbage collected), the RSS it then reads is the floor: the band moves up by what
 * the floor lies above the resume point, the latch resumes, and it pauses again only once RSS climbs the band's width
 * (pause point less resume point) above the floor. The lift sinks with RSS, so memory freed later moves it back down.
 */
export class MemorySource {
  readonly #limit: number;
  readonly #scale: number;
  readonly #rss: ReadRss;
  /** RSS at which the ratio reads resume_below, before any lift. */
  readonly #resumeBytes: number;
  /** How far under the resume point a settled floor reads, so the latch resumes on it. */
  readonly #margin: number;
  #lift = 0;

  constructor(o: MemorySourceOptions) {
    this.#limit = o.limitBytes;
    this.#scale = o.pauseAbove / o.pressureThreshold;
    this.#rss = o.rss ?? readRss;
    this.#resumeBytes = (o.limitBytes * o.pressureThreshold * o.resumeBelow) / o.pauseAbove;
    this.#margin = (o.limitBytes * o.pressureThreshold - this.#resumeBytes) / 8;
  }

  /** The ratio the latch reads: RSS less the lift, over the limit, scaled as above. */
  ratio(): number {
    const rss = this.#rss();
    this.#lift = Math.min(this.#lift, this.#liftAt(rss));
    return memoryRatio(rss - this.#lift, this.#limit) * this.#scale;
  }

  /** Intake waits with nothing left to free: RSS now is the floor (see above). */
  settled(): void {
    this.#lift = this.#liftAt(this.#rss());
  }

  /** Bytes the band has moved up by: 0 until a floor was found above the resume point. */
  get liftBytes(): number {
    return this.#lift;
  }

  #liftAt(rss: number): number {
    return Math.max(0, rss - this.#resumeBytes + this.#margin);
  }
}
