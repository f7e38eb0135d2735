// A local destination's in-progress files. Each is written under a hidden name (.<name>.partial) until it is synced,
// and this journal notes each such file under <spool_dir>/partials, so the next start on the same spool finds the
// files a kill left half written without walking the archive, and never touches a file another replica sharing the
// volume is still writing. At startup, as for staged files: on kafka with acknowledgements on each is removed,
// because its records are read again from the committed offset; where nothing delivers them again (grpc, or
// acknowledgements off) it is moved to quarantine for an operator.
// The journal is a log, appended to: a file of markers, one line each, not a marker file each. A thousand
// destinations open a thousand files at once at a start or a roll; a marker file each, created in one directory (whose
// lock each create takes in turn) and unlinked at each complete, held the first writes back 0.3-0.4 s and cost the
// event loop about 0.13 s of the 2M-record bench.
import { close, open, write } from "node:fs";
import { mkdir, readdir, readFile, unlink, access, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import type { Logger } from "pino";
import type { Metrics } from "../observe/metrics.ts";
import { errnoOf, fsError, partialPath } from "./fs.ts";
import type { Quarantine } from "./quarantine.ts";

export const PARTIALS_DIR = "partials";

export const partialsDir = (spoolDir: string): string => join(resolve(spoolDir), PARTIALS_DIR);

interface Marker {
  /** The destination root, absolute. */
  readonly root: string;
  /** The archive path under it, `/`-separated; the file is written at partialPath(root/relPath) until complete. */
  readonly relPath: string;
}

/** A log's lines: `o <marker>` once a file is opened, `c <marker>` once it has its archive name or was given up. */
const OPENED = "o ";
const CLOSED = "c ";
type LineKind = typeof OPENED | typeof CLOSED;
const LOG_SUFFIX = ".log";
/** One marker a file, as an earlier version of the journal kept them; still read at a start. */
const MARKER_SUFFIX = ".json";
const isJournalFile = (name: string): boolean => name.endsWith(LOG_SUFFIX) || name.endsWith(MARKER_SUFFIX);
/** A log past this size is replaced by a new one that starts with the files still open (see #rotate). */
const ROTATE_BYTES = 1 << 20;

const markerKey = (m: Marker): string => `${m.root}\0${m.relPath}`;
const journalLine = (kind: LineKind, m: Marker): string => `${kind}${JSON.stringify(m)}\n`;

const openFd = promisify(open);
const closeFd = promisify(close);
const writeFd = promisify(write);

let logSeq = 0;
/** A new log's name: sorts after every log made before it on this spool (time, then this process's count). */
const logName = (): string =>
  `${Date.now().toString().padStart(15, "0")}-${process.pid}-${(logSeq++).toString().padStart(6, "0")}${LOG_SUFFIX}`;

/** Writes all of `bytes` at the end of `fd` (opened to append), through short writes. */
async function appendAll(fd: number, bytes: Buffer): Promise<void> {
  for (let at = 0; at < bytes.length;) at += (await writeFd(fd, bytes, at, bytes.length - at)).bytesWritten;
}

/**
 * The journal. Lines noted in one turn go to the log in one write, and each note resolves once its line is written
 * (not synced: a kill leaves what was written to the kernel). Best effort: a log that cannot be written costs only the
 * cleanup of those files after a kill (their hidden names keep them out of every archive tool's way), so a spool that
 * refuses it warns once and never fails a write.
 */
export class PartialJournal {
  readonly #dir: string;
  readonly #log: Logger;
  readonly #rotateBytes: number;
  /** The files the written lines hold open, by markerKey: what a new log starts with. */
  readonly #open = new Map<string, Marker>();
  #fd: number | undefined;
  #file: string | undefined;
  #bytes = 0;
  #lines: { kind: LineKind; marker: Marker }[] = [];
  #noted: (() => void)[] = [];
  #writing = false;
  #warned = false;

  constructor(dir: string, log: Logger, opts: { rotateBytes?: number } = {}) {
    this.#dir = dir;
    this.#log = log;
    this.#rotateBytes = opts.rotateBytes ?? ROTATE_BYTES;
  }

  /** Before the file's hidden name is created. */
  opened(root: string, relPath: string): Promise<void> {
    return this.#note(OPENED, { root, relPath });
  }

  /** Once the file has its archive name, or was given up. */
  closed(root: string, relPath: string): Promise<void> {
    return this.#note(CLOSED, { root, relPath });
  }

  #note(kind: LineKind, marker: Marker): Promise<void> {
    this.#lines.push({ kind, marker });
    const noted = new Promise<void>((r) => this.#noted.push(r));
    // Behind the turn's other notes, so they share a write.
    if (!this.#writing) {
      this.#writing = true;
      setImmediate(() => void this.#writeNoted());
    }
    return noted;
  }

  async #writeNoted(): Promise<void> {
    while (this.#lines.length > 0) {
      const lines = this.#lines;
      const noted = this.#noted;
      this.#lines = [];
      this.#noted = [];
      try {
        if (this.#fd === undefined || this.#bytes >= this.#rotateBytes) await this.#rotate();
        const bytes = Buffer.from(lines.map((l) => journalLine(l.kind, l.marker)).join(""));
        await appendAll(this.#fd as number, bytes);
        this.#bytes += bytes.length;
      } catch (err) {
        this.#warn(err);
        // The next notes start a new log, whole again from #open, and it replaces this one.
        this.#bytes = Infinity;
      }
      // After the write, so a new log's first lines (#rotate) never repeat the lines written after them.
      for (const { kind, marker } of lines) {
        if (kind === OPENED) this.#open.set(markerKey(marker), marker);
        else this.#open.delete(markerKey(marker));
      }
      // Every file closed (a drain's end, a reload): the log goes, and with it this journal's descriptor.
      if (this.#open.size === 0 && this.#lines.length === 0 && this.#file !== undefined) {
        const file = this.#file;
        await this.#closeLog();
        await unlink(file).catch((err: unknown) => this.#warn(err));
      }
      for (const r of noted) r();
    }
    this.#writing = false;
  }

  /**
   * Starts a new log with the files still open, then removes the one before: what a start reads never grows past
   * about a rotation's size plus a line per open file. A kill between the two leaves both, which read as one.
   */
  async #rotate(): Promise<void> {
    await mkdir(this.#dir, { recursive: true });
    const file = join(this.#dir, logName());
    const fd = await openFd(file, "a");
    const head = [...this.#open.values()].map((m) => journalLine(OPENED, m)).join("");
    try {
      await appendAll(fd, Buffer.from(head));
    } catch (err) {
      await closeFd(fd).catch(() => undefined);
      await unlink(file).catch(() => undefined);
      throw err;
    }
    const before = this.#file;
    await this.#closeLog();
    this.#fd = fd;
    this.#file = file;
    // Counted from after the head: with a head past the rotation size (a hundred thousand files in progress), a count
    // that included it rotated again at every write.
    this.#bytes = 0;
    if (before !== undefined) await unlink(before).catch((err: unknown) => this.#warn(err));
  }

  async #closeLog(): Promise<void> {
    const fd = this.#fd;
    this.#fd = undefined;
    this.#file = undefined;
    if (fd !== undefined) await closeFd(fd).catch(() => undefined);
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

/**
 * The files the journal in `dir` holds open: its logs read in order (a file closed in a later log than it was opened
 * in is closed), and the marker files (one JSON marker each) an earlier version of the journal wrote. A journal file
 * that cannot be read is left out, and in place, for the next start; `unread` names it.
 */
async function openMarkers(
  dir: string,
  names: readonly string[],
  log: Logger,
): Promise<{ open: Map<string, Marker>; unread: Set<string> }> {
  const open = new Map<string, Marker>();
  const unread = new Set<string>();
  for (const name of [...names].sort()) {
    const path = join(dir, name);
    if (!isJournalFile(name)) continue;
    let text: string;
    try {
      text = await readFile(path, "utf8");
    } catch (err) {
      log.error({ err, journal: path }, "in-progress file journal unreadable: left for the next start");
      unread.add(name);
      continue;
    }
    if (name.endsWith(MARKER_SUFFIX)) {
      const marker = parseMarker(text);
      if (marker === undefined) log.warn({ marker: path }, "unreadable in-progress file marker removed");
      else open.set(markerKey(marker), marker);
      continue;
    }
    for (const line of text.split("\n")) {
      if (line === "") continue;
      const kind = line.slice(0, 2);
      const marker = parseMarker(line.slice(2));
      if (marker === undefined || (kind !== OPENED && kind !== CLOSED)) {
        log.warn({ journal: path, line: line.slice(0, 200) }, "unreadable in-progress file journal line skipped");
      } else if (kind === OPENED) open.set(markerKey(marker), marker);
      else open.delete(markerKey(marker));
    }
  }
  return { open, unread };
}

function parseMarker(text: string): Marker | undefined {
  try {
    const m = JSON.parse(text) as Partial<Marker> | null;
    if (typeof m?.root === "string" && typeof m.relPath === "string") return { root: m.root, relPath: m.relPath };
  } catch {
    // unreadable: the caller says so
  }
  return undefined;
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
  const unsettled: Marker[] = [];
  const { open, unread } = await openMarkers(o.dir, names, o.log);
  for (const marker of open.values()) {
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
    } catch (err) {
      // Kept in the journal: the next start settles it again.
      o.log.error({ err, path: partial }, "half-written file could not be settled at startup");
      unsettled.push(marker);
    }
  }
  // What is left to settle goes to a log of its own before the ones read are removed. A spool too full for that log
  // (the usual reason a file could not be settled: its quarantine copy did not fit) keeps the logs read instead: the
  // next start reads them again, and the archiver starts meanwhile rather than exit on a full disk.
  let carried = true;
  if (unsettled.length > 0) {
    const log = join(o.dir, logName());
    const lines = unsettled.map((m) => journalLine(OPENED, m)).join("");
    await writeFile(log, lines).catch(async (err: unknown) => {
      carried = false;
      await unlink(log).catch(() => undefined);
      o.log.error({ err, journal: log }, "half-written files left unsettled cannot be carried: journal kept as it is");
    });
  }
  for (const name of carried ? names : []) {
    if (unread.has(name) || !isJournalFile(name)) continue;
    await unlink(join(o.dir, name)).catch(() => undefined);
  }
  if (removed + quarantined > 0) o.log.info({ mode: o.mode, removed, quarantined }, "half-written local files settled");
  return { removed, quarantined };
}

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );
