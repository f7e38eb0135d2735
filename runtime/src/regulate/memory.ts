// The memory guard's limit: DFE_ARCHIVER_MEMORY_LIMIT_BYTES, or (0) the cgroup's limit times the headroom, or with
// neither a bounded default: the seed's recommended memory (1 GiB), or the machine's memory times the headroom where
// that is less. Sized from the machine (0.85 of 24 GiB here) the runtime fetched 64 MiB at a time and let its hot
// buffers hold 5.4 GB, and a single-topic stream peaked at 680-714 MB where the OpenTelemetry Collector took 233-242.
import { readFileSync } from "node:fs";
import { totalmem } from "node:os";

const CGROUP_FILES = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"];
// cgroup v1 reports "no limit" as a huge page-aligned number rather than "max".
const V1_UNLIMITED = 2 ** 60;

export function cgroupMemoryLimit(files: readonly string[] = CGROUP_FILES): number | undefined {
  for (const f of files) {
    let text: string;
    try {
      text = readFileSync(f, "utf8").trim();
    } catch {
      continue;
    }
    if (text === "max") return undefined;
    const n = Number(text);
    if (Number.isFinite(n) && n > 0 && n < V1_UNLIMITED) return n;
    return undefined;
  }
  return undefined;
}

/** The limit with none given or found: the seed's recommended memory (Resource Requirements: 1 GB). */
export const DEFAULT_LIMIT_BYTES = 1 << 30;

export interface MemoryLimit {
  bytes: number;
  /** default: no limit given or found; the process sizes itself as if given DEFAULT_LIMIT_BYTES. */
  source: "env" | "cgroup" | "default";
}

export function resolveMemoryLimit(
  limitBytes: number,
  headroom: number,
  cgroup = cgroupMemoryLimit(),
  hostBytes = totalmem(),
): MemoryLimit {
  if (limitBytes > 0) return { bytes: limitBytes, source: "env" };
  if (cgroup !== undefined) return { bytes: Math.floor(cgroup * headroom), source: "cgroup" };
  return { bytes: Math.min(DEFAULT_LIMIT_BYTES, Math.floor(hostBytes * headroom)), source: "default" };
}
