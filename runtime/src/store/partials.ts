// A local destination's in-progress files. Each is written under a hidden name (.<name>.partial) until it is synced,
// and this journal keeps a marker per such file under <spool_dir>/partials, so the next start on the same spool
// finds the files a kill left half written without walking the archive, and never touches a file another replica
// sharing the volume is still writing. At startup, as for staged files: on kafka with acknowledgements on each
// is removed, because its records are read again from the committed offset; where nothing delivers them again
// (grpc, or acknowledgements off) it is moved to quarantine for an operator.
import { createHash } from "node:crypto";
import { access, mkdir, readdir, readFile, unlink, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import type { Logger } from "pino";
import type { Metrics } from "../observe/metrics.ts";
import { errnoOf, fsError, partialPath } from "./file.ts";
import type { Quarantine } from "./quarantine.ts";

export const PARTIALS_DIR = "partials";

export const partialsDir = (spoolDir: string): string => join(resolve(spoolDir), PARTIALS_DIR);

interface Marker {
  /** The destination root, absolute. */
  readonly root: string;
  /** The archive path under it, `/`-separated; the file is written at partialPath(root/relPath) until complete. */
  readonly relPath: string;
}

/**
 * The markers. Best effort: a marker that cannot be written costs only the cleanup of that file after a kill (its
 * hidden name keeps it out of every archive tool's way), so a spool that refuses one warns once and never fails a
 * write.
 */
export class PartialJournal {
  readonly #dir: string;
  readonly #log: Logger;
  #ready: Promise<void> | undefined;
  #warned = false;

  constructor(dir: string, log: Logger) {
    this.#dir = dir;
    this.#log = log;
  }

  /** Before the file's hidden name is created. */
  async opened(root: string, relPath: string): Promise<void> {
    try {
      this.#ready ??= mkdir(this.#dir, { recursive: true }).then(() => undefined);
      await this.#ready;
      const marker: Marker = { root, relPath };
      await writeFile(this.#path(root, relPath), JSON.stringify(marker));
    } catch (err) {
      this.#ready = undefined;
      this.#warn(err);
    }
  }

  /** Once the file has its archive name, or was given up. */
  async closed(root: string, relPath: string): Promise<void> {
    try {
      await unlink(this.#path(root, relPath));
    } catch (err) {
      if (errnoOf(err) !== "ENOENT") this.#warn(err);
    }
  }

  #path(root: string, relPath: string): string {
    return join(this.#dir, `${createHash("sha256").update(`${root}\0${relPath}`).digest("hex").slice(0, 32)}.json`);
  }

  #warn(err: unknown): void {
    if (this.#warned) return;
    this.#warned = true;
    this.#log.warn(
      { err, dir: this.#dir },
      "in-progress file markers cannot be kept: a file a kill leaves half written will not be cleaned up at restart",
    );
  }
}

export interface SettlePartialsOptions {
  readonly dir: string;
  /** "remove" on kafka with acknowledgements on; "quarantine" on grpc, or with acknowledgements off. */
  readonly mode: "remove" | "quarantine";
  /** Built only when a file is to be quarantined (it reads the spool budget). */
  readonly quarantine: () => Quarantine;
  readonly metrics: Pick<Metrics, "stagedFilesRemoved">;
  readonly log: Logger;
}

/** Settles the files a previous process on this spool left half written; run before the destination opens a file. */
export async function settlePartials(o: SettlePartialsOptions): Promise<{ removed: number; quarantined: number }> {
  let names: string[];
  try {
    names = await readdir(o.dir);
  } catch (err) {
    if (errnoOf(err) === "ENOENT") return { removed: 0, quarantined: 0 };
    throw fsError(err, "read", o.dir);
  }
  let removed = 0;
  let quarantined = 0;
  let q: Quarantine | undefined;
  const quarantine = () => (q ??= o.quarantine());
  for (const name of names) {
    const markerPath = join(o.dir, name);
    let marker: Marker;
    try {
      marker = JSON.parse(await readFile(markerPath, "utf8")) as Marker;
    } catch (err) {
      o.log.warn({ err, marker: markerPath }, "unreadable in-progress file marker removed");
      await unlink(markerPath).catch(() => undefined);
      continue;
    }
    const final = join(marker.root, marker.relPath);
    const partial = partialPath(final);
    try {
      if (!(await exists(partial))) {
        // Completed, or never created.
      } else if (await exists(final)) {
        // Killed between the link to its archive name and the unlink: the file is whole under that name.
        await unlink(partial);
      } else if (o.mode === "remove") {
        await unlink(partial);
        o.metrics.stagedFilesRemoved.inc({ reason: "replayed" });
        removed++;
      } else {
        const why = "a local destination's file a kill left half written; nothing delivers its records again";
        if ((await quarantine().admitFile(partial, marker.relPath, "incomplete", why)) === "quarantined") quarantined++;
        else removed++;
      }
      await unlink(markerPath);
    } catch (err) {
      // Left where it is: the next start settles it again.
      o.log.error({ err, path: partial }, "half-written file could not be settled at startup");
    }
  }
  if (removed + quarantined > 0) o.log.info({ mode: o.mode, removed, quarantined }, "half-written local files settled");
  return { removed, quarantined };
}

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );
