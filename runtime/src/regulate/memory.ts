// The memory guard's limit: DFE_ARCHIVER_MEMORY_LIMIT_BYTES, or (0) the cgroup's limit times the headroom,
// or with no cgroup limit the machine's memory times the headroom.
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

export interface MemoryLimit {
  bytes: number;
  source: "env" | "cgroup" | "host";
}

export function resolveMemoryLimit(limitBytes: number, headroom: number, cgroup = cgroupMemoryLimit()): MemoryLimit {
  if (limitBytes > 0) return { bytes: limitBytes, source: "env" };
  if (cgroup !== undefined) return { bytes: Math.floor(cgroup * headroom), source: "cgroup" };
  return { bytes: Math.floor(totalmem() * headroom), source: "host" };
}
