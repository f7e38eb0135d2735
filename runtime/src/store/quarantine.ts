// <spool_dir>/uploads/quarantine: staged files no process can upload, kept for an operator, at most
// buffer.quarantine_bytes_cap of them. A file that would push it past the cap is removed instead, and counted.
import { lstat, mkdir, readdir, rename, unlink } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Logger } from "pino";
import type { Metrics } from "../observe/metrics.ts";
import { errnoOf, fsError } from "./file.ts";
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
    // One at a time, so two admissions never both count on the last free bytes.
    const run = this.#tail.then(() => this.#admit(entries, reason, why));
    this.#tail = run.catch(() => undefined);
    return run;
  }

  async #admit(entries: readonly string[], reason: QuarantineReason, why: string): Promise<"quarantined" | "removed"> {
    const present: { rel: string; size: number }[] = [];
    for (const rel of entries) {
      try {
        present.push({ rel, size: (await lstat(join(this.#uploads, rel))).size });
      } catch (err) {
        if (errnoOf(err) !== "ENOENT") throw fsError(err, "stat", join(this.#uploads, rel));
      }
    }
    const bytes = present.reduce((sum, e) => sum + e.size, 0);
    const used = (this.#used ??= await sumSizes(this.#dir));
    const admitted = used + bytes <= this.#cap;
    if (admitted) this.#used = used + bytes;
    for (const { rel } of present) {
      const from = join(this.#uploads, rel);
      try {
        if (admitted) {
          const to = join(this.#dir, rel);
          await mkdir(dirname(to), { recursive: true });
          await rename(from, to);
        } else {
          await unlink(from);
        }
      } catch (err) {
        throw fsError(err, admitted ? "quarantine" : "remove", from);
      }
    }
    const path = entries[0] ?? "";
    await pruneEmptyDirs(dirname(join(this.#uploads, path)), this.#uploads);
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
