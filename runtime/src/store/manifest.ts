// The staging directory's layout and the manifest a completed staged file carries beside it. Shared by the staging
// store, which writes them, and restart recovery, which reads them back.
import { open, rename, rmdir, unlink } from "node:fs/promises";
import { dirname, join, relative, sep } from "node:path";
import { errnoOf, fsError, syncDir } from "./fs.ts";

export const UPLOADS_DIR = "uploads";
/** Top-level name under uploads/ that holds files moved aside for an operator. */
export const QUARANTINE_DIR = "quarantine";
export const MANIFEST_SUFFIX = ".part.json";
/** The manifest while it is written, before the rename that makes it whole. */
export const MANIFEST_TEMP_SUFFIX = ".part.json.tmp";

/** The JSON in `<name>.part.json`: the object the file becomes and the length of each block, in order. */
export interface ManifestJson {
  readonly version: 1;
  readonly key: string;
  readonly size: number;
  readonly blockLengths: readonly number[];
  /** Records in each block. */
  readonly blockRecords: readonly number[];
  readonly records: number;
  readonly codec: string;
  readonly openedAt: number;
  readonly closedAt: number;
}

/** A completed staged file: its manifest, the store path it was opened under, and where its staged copy lies. */
export interface StagedManifest extends ManifestJson {
  readonly relPath: string;
  readonly stagedPath: string;
}

// A destination may be named "quarantine" (a topic, a routed value), so that top-level name is staged one
// character aside, where no routed segment lands: segment encoding writes "=" only before two upper-case hex digits.
const ESCAPED_QUARANTINE = `=${QUARANTINE_DIR}`;

/** Where `relPath` is staged, relative to uploads/. */
export function stagedRelPath(relPath: string): string {
  const [first] = relPath.split("/", 1);
  return first === QUARANTINE_DIR ? `=${relPath}` : relPath;
}

/** The store path a staged file (a path relative to uploads/, `/`-separated) was opened under. */
export function relPathOfStaged(stagedRel: string): string {
  const [first] = stagedRel.split("/", 1);
  return first === ESCAPED_QUARANTINE ? stagedRel.slice(1) : stagedRel;
}

/** `path` relative to `root`, `/`-separated. */
export function relUnder(root: string, path: string): string {
  return relative(root, path).split(sep).join("/");
}

const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;

/** The manifest in `text`, or why it is not one. */
export function parseManifest(text: string): ManifestJson | { error: string } {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (err) {
    return { error: `not JSON: ${(err as Error).message}` };
  }
  if (typeof v !== "object" || v === null) return { error: "not an object" };
  const m = v as Record<string, unknown>;
  if (m.version !== 1) return { error: `unknown version ${JSON.stringify(m.version)}` };
  if (typeof m.key !== "string" || m.key === "") return { error: "no key" };
  if (typeof m.codec !== "string") return { error: "no codec" };
  for (const field of ["size", "records", "openedAt", "closedAt"] as const)
    if (!isCount(m[field])) return { error: `${field} is not a whole number` };
  if (!Array.isArray(m.blockLengths) || !m.blockLengths.every(isCount)) return { error: "blockLengths is not a list" };
  if (
    !Array.isArray(m.blockRecords) ||
    !m.blockRecords.every(isCount) ||
    m.blockRecords.length !== m.blockLengths.length
  )
    return { error: "blockRecords is not a list as long as blockLengths" };
  return {
    version: 1,
    key: m.key,
    size: m.size as number,
    blockLengths: m.blockLengths as number[],
    blockRecords: m.blockRecords as number[],
    records: m.records as number,
    codec: m.codec,
    openedAt: m.openedAt as number,
    closedAt: m.closedAt as number,
  };
}

/** Writes the manifest beside `stagedPath` whole or not at all: a temp file, synced, renamed over, directory synced. */
export async function writeManifest(stagedPath: string, manifest: ManifestJson): Promise<void> {
  const path = stagedPath + MANIFEST_SUFFIX;
  const temp = stagedPath + MANIFEST_TEMP_SUFFIX;
  try {
    const handle = await open(temp, "w");
    try {
      await handle.writeFile(JSON.stringify(manifest));
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(temp, path);
    await syncDir(dirname(path));
  } catch (err) {
    throw fsError(err, "write manifest", path);
  }
}

/** Removes the empty directories from `dir` up to, not including, `root`; stops at the first that holds anything. */
export async function pruneEmptyDirs(dir: string, root: string): Promise<void> {
  for (let d = dir; d !== root && d.startsWith(root + sep); d = dirname(d)) {
    try {
      await rmdir(d);
    } catch (err) {
      if (errnoOf(err) !== "ENOENT") return;
    }
  }
}

/** Removes a staged copy, its manifest and any temp manifest, then the directories that leaves empty under `root`. */
export async function removeStaged(stagedPath: string, root: string): Promise<void> {
  for (const path of [stagedPath, stagedPath + MANIFEST_SUFFIX, stagedPath + MANIFEST_TEMP_SUFFIX]) {
    try {
      await unlink(path);
    } catch (err) {
      if (errnoOf(err) !== "ENOENT") throw fsError(err, "remove", path);
    }
  }
  await pruneEmptyDirs(dirname(stagedPath), root);
}

/** The staging directory under the spool directory. */
export const uploadsDir = (spoolDir: string): string => join(spoolDir, UPLOADS_DIR);
