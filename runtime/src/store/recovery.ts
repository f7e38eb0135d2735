// Restart recovery: the staging directory is settled before anything new is staged. On kafka with acknowledgements
// on, every staged file is removed, because its records are read again from the committed offset. Where nothing
// delivers them again (grpc, or acknowledgements off), a complete file is kept to upload and the rest moved to
// quarantine for an operator. quarantine/ itself is never touched here.
import { readdir, readFile, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Logger } from "pino";
import type { Metrics } from "../observe/metrics.ts";
import { errnoOf, fsError } from "./fs.ts";
import {
  MANIFEST_SUFFIX,
  MANIFEST_TEMP_SUFFIX,
  parseManifest,
  QUARANTINE_DIR,
  relPathOfStaged,
  relUnder,
  removeStaged,
  uploadsDir,
  type StagedManifest,
} from "./manifest.ts";
import { Quarantine, type QuarantineReason } from "./quarantine.ts";
import type { ObjectBackend } from "./object/types.ts";

export type RecoveryMetrics = Pick<Metrics, "stagedFilesQuarantined" | "stagedFilesRemoved">;

export interface RecoveryOptions {
  readonly spoolDir: string;
  /** "remove" on kafka with acknowledgements on; "upload" on grpc, or with acknowledgements off. */
  readonly mode: "remove" | "upload";
  /** The destination's backend; unset when no object store is configured any more, which quarantines every file. */
  readonly backend?: ObjectBackend | undefined;
  readonly quarantineBytesCap: number;
  readonly metrics: RecoveryMetrics;
  readonly log: Logger;
}

export interface RecoveryResult {
  /** Staged files removed: replayed, or past the quarantine cap. */
  readonly removed: number;
  /** Complete files to hand to the staging store's enqueueRecovered. */
  readonly toUpload: StagedManifest[];
  readonly quarantined: number;
}

/** One staged file, relative to uploads/: its copy, manifest and temp manifest, any of them possibly absent. */
interface Group {
  readonly rel: string;
  manifest: boolean;
}

/** Settles <spool_dir>/uploads; throws (an fs ArchiverError) only when the directory cannot be listed. */
export async function recoverStaging(opts: RecoveryOptions): Promise<RecoveryResult> {
  const uploads = uploadsDir(resolve(opts.spoolDir));
  const groups = await listGroups(uploads);
  const quarantine = new Quarantine({
    uploadsDir: uploads,
    capBytes: opts.quarantineBytesCap,
    metrics: opts.metrics,
    log: opts.log,
  });
  let removed = 0;
  let quarantined = 0;
  const toUpload: StagedManifest[] = [];
  for (const g of groups) {
    const stagedPath = join(uploads, g.rel);
    try {
      if (opts.mode === "remove") {
        await removeStaged(stagedPath, uploads);
        opts.metrics.stagedFilesRemoved.inc({ reason: "replayed" });
        removed++;
        continue;
      }
      const verdict =
        opts.backend === undefined
          ? { reason: "no_store" as const, why: "no object store is configured any more" }
          : await inspect(uploads, g);
      if ("manifest" in verdict) {
        toUpload.push(verdict.manifest);
        continue;
      }
      const entries = [g.rel, g.rel + MANIFEST_SUFFIX, g.rel + MANIFEST_TEMP_SUFFIX];
      if ((await quarantine.admit(entries, verdict.reason, verdict.why)) === "quarantined") quarantined++;
      else removed++;
    } catch (err) {
      // Left where it is: the next start settles it again.
      opts.log.error({ err, path: stagedPath }, "staged file could not be settled at startup");
    }
  }
  opts.log.info(
    { mode: opts.mode, removed, quarantined, toUpload: toUpload.length, uploadsDir: uploads },
    "staging recovered",
  );
  return { removed, toUpload, quarantined };
}

/** Every staged file under uploads/, quarantine/ excepted, grouped with its manifest and temp manifest. */
async function listGroups(uploads: string): Promise<Group[]> {
  let entries;
  try {
    entries = await readdir(uploads, { recursive: true, withFileTypes: true });
  } catch (err) {
    if (errnoOf(err) === "ENOENT") return [];
    throw fsError(err, "read", uploads);
  }
  const groups = new Map<string, Group>();
  for (const e of entries) {
    if (e.isDirectory()) continue;
    const rel = relUnder(uploads, join(e.parentPath, e.name));
    if (rel.split("/", 1)[0] === QUARANTINE_DIR) continue;
    const isManifest = rel.endsWith(MANIFEST_SUFFIX);
    const base = isManifest
      ? rel.slice(0, -MANIFEST_SUFFIX.length)
      : rel.endsWith(MANIFEST_TEMP_SUFFIX)
        ? rel.slice(0, -MANIFEST_TEMP_SUFFIX.length)
        : rel;
    const g = groups.get(base) ?? { rel: base, manifest: false };
    g.manifest ||= isManifest;
    groups.set(base, g);
  }
  return [...groups.values()].sort((a, b) => (a.rel < b.rel ? -1 : 1));
}

type Verdict = { manifest: StagedManifest } | { reason: QuarantineReason; why: string };

/** Whether a staged file can be uploaded: its manifest reads, and matches the copy's size. */
async function inspect(uploads: string, g: Group): Promise<Verdict> {
  const stagedPath = join(uploads, g.rel);
  if (!g.manifest) return { reason: "incomplete", why: "it has no manifest: it never completed" };
  let text: string;
  try {
    text = await readFile(stagedPath + MANIFEST_SUFFIX, "utf8");
  } catch (err) {
    return { reason: "unreadable", why: `its manifest cannot be read: ${errnoOf(err) ?? String(err)}` };
  }
  const json = parseManifest(text);
  if ("error" in json) return { reason: "corrupt", why: `its manifest is ${json.error}` };
  let size: number;
  try {
    size = (await stat(stagedPath)).size;
  } catch (err) {
    return { reason: "unreadable", why: `its staged copy cannot be read: ${errnoOf(err) ?? String(err)}` };
  }
  const blocks = json.blockLengths.reduce((sum, n) => sum + n, 0);
  if (size !== json.size || blocks !== json.size) {
    return { reason: "corrupt", why: `it is ${size} bytes, its manifest says ${json.size} in blocks of ${blocks}` };
  }
  return { manifest: { ...json, relPath: relPathOfStaged(g.rel), stagedPath } };
}
