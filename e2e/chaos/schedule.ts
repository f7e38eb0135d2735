// The chaos test's fault schedule: drawn from a seed, so the schedule a failing run printed is replayed by running
// again with DFE_ARCHIVER_CHAOS_SEED set to its seed.
import { random } from "../support/random.ts";

export type Fault =
  /** SIGKILL of a base replica; its pod's container comes back on the same spool after `restartMs`. */
  | { at: number; kind: "sigkill"; replica: number; restartMs: number }
  /** SIGTERM (drain) of a base replica, which comes back on the same spool after `restartMs`. */
  | { at: number; kind: "sigterm"; replica: number; restartMs: number }
  /** `joins` extra replicas join `gapMs` apart, each leaving (SIGTERM) once ready: a rebalance storm. */
  | { at: number; kind: "storm"; joins: number; gapMs: number }
  /** The broker stopped cleanly and started again after `downMs`. */
  | { at: number; kind: "broker-restart"; downMs: number }
  | { at: number; kind: "minio-outage"; downMs: number }
  /** A base replica's spool filled to its last 256 KiB for `holdMs`. */
  | { at: number; kind: "spool-full"; replica: number; holdMs: number };

export type FaultKind = Fault["kind"];
export const FAULT_KINDS: readonly FaultKind[] = [
  "sigkill",
  "sigterm",
  "storm",
  "broker-restart",
  "minio-outage",
  "spool-full",
];

/** How many faults of each kind a window of `windowS` seconds gets: the minimums for a soak, one or more of each otherwise. */
export function faultCounts(windowS: number, soak: boolean): Record<FaultKind, number> {
  if (!soak) return { sigkill: 3, sigterm: 2, storm: 1, "broker-restart": 1, "minio-outage": 1, "spool-full": 1 };
  const per = (s: number) => Math.max(1, Math.floor(windowS / s));
  return {
    sigkill: Math.max(20, per(75)),
    sigterm: per(150),
    storm: per(300),
    "broker-restart": per(450),
    "minio-outage": Math.max(5, per(300)),
    "spool-full": per(300),
  };
}

/**
 * The faults of a `windowMs` window, by start time. Faults that last (outages, a broker's downtime, a full spool) never
 * overlap one of their own kind on the same target, and end 5 s before the window does.
 */
export function schedule(seed: number, windowMs: number, replicas: number, soak: boolean): Fault[] {
  const rnd = random(seed);
  const between = (lo: number, hi: number) => lo + Math.floor(rnd() * (hi - lo + 1));
  const counts = faultCounts(windowMs / 1000, soak);
  const out: Fault[] = [];
  const busy: { key: string; from: number; to: number }[] = [];
  const place = (key: string, lasts: number): number => {
    for (let tries = 0; ; tries++) {
      const at = between(5_000, windowMs - 5_000 - lasts);
      const free = busy.every((b) => b.key !== key || at + lasts + 2_000 < b.from || at > b.to + 2_000);
      if (free || tries > 200) {
        busy.push({ key, from: at, to: at + lasts });
        return at;
      }
    }
  };
  for (const kind of FAULT_KINDS) {
    for (let i = 0; i < counts[kind]; i++) {
      switch (kind) {
        case "sigkill":
        case "sigterm": {
          const replica = between(0, replicas - 1);
          const restartMs = between(1_000, 5_000);
          out.push({ at: place(`${kind}-${i}`, 0), kind, replica, restartMs });
          break;
        }
        case "storm":
          out.push({ at: place(`storm-${i}`, 10_000), kind, joins: between(2, 3), gapMs: between(500, 2_000) });
          break;
        case "broker-restart": {
          const downMs = between(2_000, 8_000);
          out.push({ at: place(kind, downMs + 10_000), kind, downMs });
          break;
        }
        case "minio-outage": {
          const downMs = soak ? between(10_000, 60_000) : between(10_000, 20_000);
          out.push({ at: place(kind, downMs), kind, downMs });
          break;
        }
        case "spool-full": {
          const replica = between(0, replicas - 1);
          const holdMs = between(2_000, 6_000);
          out.push({ at: place(`${kind}-${replica}`, holdMs), kind, replica, holdMs });
          break;
        }
      }
    }
  }
  return out.sort((a, b) => a.at - b.at);
}

/** One line a fault, as the run's log prints it. */
export function describe(f: Fault): string {
  const { at, kind, ...rest } = f;
  return `${(at / 1000).toFixed(1).padStart(7)} s  ${kind.padEnd(14)} ${JSON.stringify(rest)}`;
}
