// <spool_dir>/uploads/quarantine: staged files no process can upload, and a local destination's files a kill left
// half written where nothing delivers their records again, kept for an operator, at most
// buffer.quarantine_bytes_cap of them. A file that would push it past the cap is removed instead, and counted.
import { constants } from "node:fs";
import { copyFile, lstat, mkdir, readdir, rename, unlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Logger } from "pino";
import type { Metrics } from "../observe/metrics.ts";
import { errnoOf, fsError } from "./fs.ts";
import { pruneEmptyDirs, QUARANTINE_DIR } from "./manifest.ts";

export type QuarantineReason = "unreadable" | "incomplete" | "corrupt" | "no_store";

export type QuarantineMetrics = Pick<Metrics, "stagedFilesQuarantined" | "stagedFilesRemoved">;

export class Quarantine {
  readonly #uploads: string;
  readonly #dir: string;
  readonly #cap: number;
  readonly #m: QuarantineMetrics;
  readonly #log: Logger;
  /** Bytes quarantine holds, measured on first use: an operator may have cleared it since the last process. */
  #used: number | undefined;
  #tail: Promise<unknown> = Promise.resolve();

  constructor(opts: { uploadsDir: string; capBytes: number; metrics: QuarantineMetrics; log: Logger }) {
    this.#uploads = opts.uploadsDir;
    this.#dir = join(opts.uploadsDir, QUARANTINE_DIR);
    this.#cap = opts.capBytes;
    this.#m = opts.metrics;
    this.#log = opts.log;
  }

  /**
   * Moves one staged file's entries (its copy, manifest, temp manifest: paths relative to uploads/, those absent
   * skipped) to the same place under quarantine/, or removes them when they would push it past the cap. `why` is
   * logged.
   */
  admit(entries: readonly string[], reason: QuarantineReason, why: string): Promise<"quarantined" | "removed"> {
    const moves = entries.map((rel) => ({ from: join(this.#uploads, rel), rel }));
    return this.#serial(moves, reason, why, dirname(join(this.#uploads, entries[0] ?? "")));
  }

  /** Moves one file from anywhere (another volume too) to `rel` under quarantine/, or removes it past the cap. */
  admitFile(from: string, rel: string, reason: QuarantineReason, why: string): Promise<"quarantined" | "removed"> {
    return this.#serial([{ from, rel }], reason, why, undefined);
  }

  #serial(
    moves: readonly Move[],
    reason: QuarantineReason,
    why: string,
    prune: string | undefined,
  ): Promise<"quarantined" | "removed"> {
    // One at a time, so two admissions never both count on the last free bytes.
    const run = this.#tail.then(() => this.#admit(moves, reason, why, prune));
    this.#tail = run.catch(() => undefined);
    return run;
  }

  async #admit(
    moves: readonly Move[],
    reason: QuarantineReason,
    why: string,
    prune: string | undefined,
  ): Promise<"quarantined" | "removed"> {
    const present: (Move & { size: number })[] = [];
    for (const m of moves) {
      try {
        present.push({ ...m, size: (await lstat(m.from)).size });
      } catch (err) {
        if (errnoOf(err) !== "ENOENT") throw fsError(err, "stat", m.from);
      }
    }
    const bytes = present.reduce((sum, e) => sum + e.size, 0);
    const used = (this.#used ??= await sumSizes(this.#dir));
    const admitted = used + bytes <= this.#cap;
    if (admitted) this.#used = used + bytes;
    for (const { from, rel } of present) {
      try {
        if (admitted) {
          const to = join(this.#dir, rel);
          await mkdir(dirname(to), { recursive: true });
          await move(from, to);
        } else {
          await unlink(from);
        }
      } catch (err) {
        throw fsError(err, admitted ? "quarantine" : "remove", from);
      }
    }
    const path = moves[0]?.from ?? "";
    if (prune !== undefined) await pruneEmptyDirs(prune, this.#uploads);
    if (admitted) {
      this.#m.stagedFilesQuarantined.inc({ reason });
      this.#log.warn({ path, reason, why, bytes }, "staged file moved to quarantine");
      return "quarantined";
    }
    this.#m.stagedFilesRemoved.inc({ reason: "quarantine_full" });
    this.#log.warn(
      { path, reason, why, bytes, quarantineBytes: used, quarantineBytesCap: this.#cap },
      "staged file removed: quarantine is full (buffer.quarantine_bytes_cap)",
    );
    return "removed";
  }
}

interface Move {
  readonly from: string;
  /** Where it goes, relative to quarantine/. */
  readonly rel: string;
}

/** rename, or across volumes (a local destination's file into the spool's quarantine) a copy, then the unlink. */
async function move(from: string, to: string): Promise<void> {
  try {
    await rename(from, to);
  } catch (err) {
    if (errnoOf(err) !== "EXDEV") throw err;
    await copyFile(from, to, constants.COPYFILE_EXCL);
    await unlink(from);
  }
}

async function sumSizes(dir: string): Promise<number> {
  let entries;
  try {
    entries = await readdir(dir, { recursive: true, withFileTypes: true });
  } catch (err) {
    if (errnoOf(err) === "ENOENT") return 0;
    throw fsError(err, "read", dir);
  }
  let total = 0;
  for (const e of entries) if (!e.isDirectory()) total += (await lstat(join(e.parentPath, e.name))).size;
  return total;
}
