// The spool budget: 90% of the size limit the chart declares for the spool volume (SCALO_WRITABLE_PATH_LIMITS, one
// PATH=SIZE pair per emptyDir with a sizeLimit), split 8/9 staged bytes, 1/9 free space at startup, 1/9 quarantine,
// so staging and quarantine together stay under the limit past which kubelet evicts the pod.
import { mkdir, statfs } from "node:fs/promises";
import { resolve } from "node:path";
import type { Config } from "../config/schema.ts";
import { ArchiverError, ConfigError } from "../errors.ts";
import { fsError } from "./fs.ts";

export const WRITABLE_PATH_LIMITS_ENV = "SCALO_WRITABLE_PATH_LIMITS";
const GIB = 1024 ** 3;
/** The split with no volume limit declared (docker, a bare host). */
const UNDECLARED = { stagedBytesCap: 8 * GIB, minFreeSpoolBytes: GIB, quarantineBytesCap: GIB };

const QUANTITY = /^(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|[eE][+-]?\d+)?$/;
const BINARY = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
const DECIMAL = ["k", "M", "G", "T", "P", "E"];

/**
 * Bytes in a Kubernetes quantity (`10Gi`, `500Mi`, `1G`, `1.5Gi`, `1e9`, `100k`, `1073741824`), rounded up to a
 * whole byte as Kubernetes does, or undefined when `text` is not one. Exact: computed on integers, not floats.
 */
export function parseQuantity(text: string): number | undefined {
  const m = QUANTITY.exec(text);
  if (m === null) return undefined;
  const [whole = "", frac = ""] = (m[1] as string).split(".");
  let numerator = BigInt(whole + frac || "0");
  let denominator = 10n ** BigInt(frac.length);
  const suffix = m[2] ?? "";
  if (BINARY.includes(suffix)) numerator *= 1024n ** BigInt(BINARY.indexOf(suffix) + 1);
  else if (DECIMAL.includes(suffix)) numerator *= 1000n ** BigInt(DECIMAL.indexOf(suffix) + 1);
  else if (suffix !== "") {
    const exp = Number(suffix.slice(1));
    if (Math.abs(exp) > 30) return undefined;
    if (exp >= 0) numerator *= 10n ** BigInt(exp);
    else denominator *= 10n ** BigInt(-exp);
  }
  const bytes = (numerator + denominator - 1n) / denominator;
  return bytes <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(bytes) : undefined;
}

export interface PathLimit {
  /** Absolute, normalised (no trailing slash). */
  readonly path: string;
  readonly bytes: number;
}

const malformed = (why: string) => new ConfigError(WRITABLE_PATH_LIMITS_ENV, why);

/** The pairs in SCALO_WRITABLE_PATH_LIMITS; throws a ConfigError naming the variable and the bad pair. */
export function parseWritablePathLimits(value: string): PathLimit[] {
  const limits: PathLimit[] = [];
  // Empty items are skipped: a chart joining its list may leave a trailing comma.
  for (const raw of value.split(",")) {
    const pair = raw.trim();
    if (pair === "") continue;
    const eq = pair.lastIndexOf("=");
    const path = pair.slice(0, eq).trim();
    const size = pair.slice(eq + 1).trim();
    if (eq < 0 || !path.startsWith("/")) {
      throw malformed(`pair "${pair}" is not PATH=SIZE with an absolute PATH, e.g. /var/spool/dfe/archiver=10Gi`);
    }
    const bytes = parseQuantity(size);
    if (bytes === undefined) {
      throw malformed(
        `pair "${pair}" has size "${size}", which is not a byte count or a Kubernetes quantity ` +
          "(e.g. 10Gi, 500Mi, 1G, 1.5Gi, 1e9, 100k)",
      );
    }
    const normalised = resolve(path);
    if (limits.some((l) => l.path === normalised)) throw malformed(`pair "${pair}" declares ${normalised} again`);
    limits.push({ path: normalised, bytes });
  }
  return limits;
}

/** The declared path that holds `dir`: the longest that is `dir` or one of its parents, on segment boundaries. */
export function limitFor(limits: readonly PathLimit[], dir: string): PathLimit | undefined {
  const target = resolve(dir);
  let best: PathLimit | undefined;
  for (const l of limits) {
    const holds = target === l.path || target.startsWith(l.path === "/" ? "/" : `${l.path}/`);
    if (holds && (best === undefined || l.path.length > best.path.length)) best = l;
  }
  return best;
}

export interface SpoolBudget {
  readonly stagedBytesCap: number;
  readonly minFreeSpoolBytes: number;
  readonly quarantineBytesCap: number;
  /** 90% of the declared limit; unset when no declared path holds the spool directory. */
  readonly budget?: number;
  readonly declaredPath?: string;
}

type SpoolKeys = "spool_dir" | "staged_bytes_cap" | "min_free_spool_bytes" | "quarantine_bytes_cap";

/** The three spool sizes: each configured key as set, the others from the spool volume's declared limit. */
export function resolveSpoolBudget(
  cfg: { readonly buffer: Pick<Config["buffer"], SpoolKeys> },
  env: NodeJS.ProcessEnv,
): SpoolBudget {
  const b = cfg.buffer;
  const limit = limitFor(parseWritablePathLimits(env[WRITABLE_PATH_LIMITS_ENV] ?? ""), b.spool_dir);
  let derived: SpoolBudget = UNDECLARED;
  if (limit !== undefined) {
    const budget = Math.floor(limit.bytes * 0.9);
    const ninth = Math.floor(budget / 9);
    derived = {
      stagedBytesCap: Math.floor((budget * 8) / 9),
      minFreeSpoolBytes: ninth,
      quarantineBytesCap: ninth,
      budget,
      declaredPath: limit.path,
    };
    if (b.staged_bytes_cap === undefined && derived.stagedBytesCap < 1) {
      throw malformed(
        `${limit.path} is declared ${limit.bytes} bytes, which leaves nothing to stage; ` +
          "declare the spool volume's real size limit or set buffer.staged_bytes_cap",
      );
    }
  }
  return {
    ...derived,
    stagedBytesCap: b.staged_bytes_cap ?? derived.stagedBytesCap,
    minFreeSpoolBytes: b.min_free_spool_bytes ?? derived.minFreeSpoolBytes,
    quarantineBytesCap: b.quarantine_bytes_cap ?? derived.quarantineBytesCap,
  };
}

/**
 * The startup free-space check on the spool volume, run once staging is recovered. Refuses (permanent) with less
 * than `minFreeSpoolBytes` free, unless recovery kept complete files to upload: only a running archiver uploads
 * them, and a write that finds the disk full waits for those uploads, so it starts and returns a warning.
 */
export async function checkSpoolFree(opts: {
  spoolDir: string;
  minFreeSpoolBytes: number;
  /** Complete staged files recovery kept to upload. */
  toUpload: number;
}): Promise<{ freeBytes: number; warning?: string }> {
  const dir = resolve(opts.spoolDir);
  let freeBytes: number;
  try {
    await mkdir(dir, { recursive: true });
    const fs = await statfs(dir);
    freeBytes = fs.bavail * fs.bsize;
  } catch (err) {
    throw fsError(err, "statfs", dir);
  }
  if (freeBytes >= opts.minFreeSpoolBytes) return { freeBytes };
  const shortfall =
    `the spool volume at ${dir} has ${freeBytes} bytes free, ` +
    `below buffer.min_free_spool_bytes (${opts.minFreeSpoolBytes})`;
  if (opts.toUpload > 0) {
    return {
      freeBytes,
      warning: `${shortfall}; starting anyway to upload the ${opts.toUpload} staged files recovery kept, which frees it`,
    };
  }
  throw new ArchiverError(
    "spool_low_free",
    `${shortfall}: free space on it, give the volume a larger sizeLimit, or lower buffer.min_free_spool_bytes`,
    "permanent",
  );
}
