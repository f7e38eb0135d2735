// Local file system backend (file:///abs/path). A file is durable once it, and every directory from it up to the
// destination root, is synced; a root the archiver had to create is also synced into the nearest parent that was
// already there, so a node crash after the commit cannot lose the file or the path to it.
import { constants } from "node:fs";
import { link, mkdir, open, unlink, type FileHandle } from "node:fs/promises";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { Codec } from "../codec/index.ts";
import { codecLanes, type AppendTarget, type LaneFailure } from "../codec/lanes.ts";
import { ArchiverError } from "../errors.ts";
import { errnoOf, flat, fsError, partialPath, syncDir } from "./fs.ts";
import type { PartialJournal } from "./partials.ts";
import { once, type ArchiveFile, type ArchiveStore, type FileMeta, type Retry } from "./types.ts";

const invalidPath = (path: string, why: string) =>
  new ArchiverError("invalid_path", `invalid path ${JSON.stringify(path)}: ${why}`, "permanent");

function checkRelPath(relPath: string): void {
  if (relPath.startsWith("/")) throw invalidPath(relPath, "absolute");
  for (const seg of relPath.split("/")) {
    if (seg === "" || seg === "." || seg === "..") throw invalidPath(relPath, "empty, . or .. segment");
    if (seg.includes("\0")) throw invalidPath(relPath, "NUL byte");
  }
}

function rootPath(rootUrlOrPath: string): string {
  let path = rootUrlOrPath;
  if (rootUrlOrPath.startsWith("file:")) {
    try {
      path = fileURLToPath(rootUrlOrPath);
    } catch (err) {
      throw new ArchiverError("invalid_path", `invalid file URL ${rootUrlOrPath}`, "permanent", { cause: err });
    }
  }
  if (!isAbsolute(path)) throw invalidPath(rootUrlOrPath, "the destination root must be absolute");
  return resolve(path);
}

/** `from` and each parent of it, up to and including `to` (an ancestor of `from`). */
function dirsUpTo(from: string, to: string): string[] {
  const dirs = [from];
  for (let d = from; d !== to && d !== dirname(d);) {
    d = dirname(d);
    dirs.push(d);
  }
  return dirs;
}

/** mkdir -p. Its EEXIST means something not a directory is in the way, which no retry clears. */
async function mkdirs(path: string): Promise<string | undefined> {
  try {
    return await mkdir(path, { recursive: true });
  } catch (err) {
    if (errnoOf(err) !== "EEXIST") throw fsError(err, "mkdir", path);
    throw new ArchiverError("ENOTDIR", `mkdir ${path}: a file is in the way`, "permanent", { cause: err });
  }
}

class LocalFile implements ArchiveFile {
  readonly relPath: string;
  readonly #path: string;
  /**
   * Where the file is written until it completes: the archive name itself, or (publishing) a hidden name linked to
   * the archive name once synced, so a kill never leaves a torn file under an archive name.
   */
  readonly #partial: string;
  readonly #store: FileStore;
  #handle: FileHandle | undefined;
  /** Parked: the descriptor is closed, the file still in progress (see ArchiveFile.park). */
  #parked = false;
  #size = 0;
  /** How far complete got: written to; synced and closed; linked to its archive name; named (hidden name gone). */
  #stage: "writing" | "synced" | "linked" | "named" = "writing";
  #completed = false;

  constructor(store: FileStore, relPath: string, path: string, handle: FileHandle) {
    this.#store = store;
    this.relPath = flat(relPath);
    this.#path = flat(path);
    this.#partial = store.publish ? flat(partialPath(path)) : this.#path;
    this.#handle = handle;
  }

  get size(): number {
    return this.#size;
  }

  /** The file's handle, opened again when parked. */
  async #live(op: string): Promise<FileHandle> {
    if (this.#handle !== undefined) return this.#handle;
    if (!this.#parked) throw this.#closed(op);
    try {
      // No O_CREAT: a file removed while parked must fail its write, not start again empty under its name.
      this.#handle = await open(this.#partial, constants.O_WRONLY | constants.O_APPEND);
    } catch (err) {
      throw fsError(err, "reopen", this.#path);
    }
    this.#parked = false;
    return this.#handle;
  }

  async park(): Promise<void> {
    const handle = this.#handle;
    if (handle === undefined) return;
    this.#handle = undefined;
    this.#parked = true;
    try {
      await handle.close();
    } catch (err) {
      this.#parked = false;
      throw fsError(err, "park", this.#path);
    }
  }

  async append(frame: Buffer): Promise<void> {
    // On a codec lane, batched with every other file's appends of this turn (see codec/lanes.ts). The file is
    // opened for append and the writer sends one append at a time, so the frame lands whole at the end.
    await this.#landed(
      codecLanes()
        .append(this.#target(), frame)
        .then(() => frame.length),
    );
  }

  appendCompressed(codec: Codec, raw: readonly Buffer[]): Promise<number> {
    return this.#landed(codec.compressAppend(this.#target(), raw));
  }

  /**
   * Where an append lands: the open descriptor, or, parked, the file's path, which the lane opens for that append
   * alone: a parked file takes its frames with no descriptor kept and nothing asked of the event loop's file system
   * calls (an open and a close a flush, through libuv's pool, cost more than the flush).
   */
  #target(): AppendTarget {
    if (this.#handle !== undefined) return this.#handle.fd;
    if (this.#parked) return this.#partial;
    throw this.#closed("append");
  }

  #closed(op: string): ArchiverError {
    return new ArchiverError("file_closed", `${op} ${this.#path}: the file is already closed`, "permanent");
  }

  /** Counts what an append on a lane put on the file; a failure names the file (a codec's refusal passes as is). */
  async #landed(appended: Promise<number>): Promise<number> {
    try {
      const length = await appended;
      this.#size += length;
      return length;
    } catch (err) {
      if (err instanceof Error) throw fsError(err, "append", this.#path);
      const failure = err as LaneFailure;
      this.#size += failure.kind === "fs" ? failure.written : 0;
      throw fsError(
        Object.assign(new Error(failure.message), { code: "code" in failure ? failure.code : undefined }),
        "append",
        this.#path,
      );
    }
  }

  async truncate(size: number): Promise<void> {
    const handle = await this.#live("truncate");
    try {
      await handle.truncate(size);
    } catch (err) {
      throw fsError(err, "truncate", this.#path);
    }
    this.#size = size;
  }

  async complete(_meta: FileMeta, retry: Retry = once): Promise<void> {
    if (this.#stage === "writing") {
      const handle = await retry(() => this.#live("complete"));
      this.#handle = undefined;
      // Never retried: after a failed fsync Linux may drop the dirty pages and report the next fsync clean, so the
      // file's data is of unknown durability; the file is given up and its records read again.
      try {
        if (this.#store.sync) await handle.sync();
      } catch (err) {
        // The sync error is the one to report; the handle is released either way.
        await handle.close().catch(() => undefined);
        throw fsError(err, "complete", this.#path);
      }
      this.#stage = "synced";
      try {
        await handle.close();
      } catch (err) {
        throw fsError(err, "complete", this.#path);
      }
    }
    await retry(() => this.#publish());
    this.#completed = true;
  }

  /**
   * Gives the synced file its archive name and syncs every directory its path depends on. Each step done is
   * remembered, so a retry after a failure (a full disk refusing the link) picks up at the step that failed.
   */
  async #publish(): Promise<void> {
    try {
      if (this.#stage === "synced" && this.#partial !== this.#path) {
        // link, not rename: it never replaces a file already under the name.
        await link(this.#partial, this.#path).catch((err: unknown) => {
          if (errnoOf(err) !== "EEXIST") throw err;
          throw new ArchiverError("EEXIST", `complete ${this.#path}: another file is under its name`, "permanent", {
            cause: err,
          });
        });
        this.#stage = "linked";
        this.#store.created(dirname(this.#path));
      }
      if (this.#stage === "linked") {
        // ENOENT: a failed attempt's unlink that did land.
        await unlink(this.#partial).catch((err: unknown) => {
          if (errnoOf(err) !== "ENOENT") throw err;
        });
        await this.#store.journal?.closed(this.#store.root, this.relPath);
      }
      this.#stage = "named";
      if (this.#store.sync) {
        // The file's directory up to the root: every entry its path depends on below the root. Worked out here, not
        // kept: ten thousand files in progress held a kilobyte of paths each.
        for (const dir of dirsUpTo(dirname(this.#path), this.#store.root)) await this.#store.syncIfDirty(dir);
        await this.#store.syncAboveRoot();
      }
    } catch (err) {
      throw fsError(err, "complete", this.#path);
    }
  }

  async abandon(): Promise<void> {
    if (this.#completed) throw new ArchiverError("file_closed", `abandon ${this.#path}: already complete`, "permanent");
    const handle = this.#handle;
    this.#handle = undefined;
    try {
      await handle?.close();
      await unlink(this.#partial);
    } catch (err) {
      if (errnoOf(err) !== "ENOENT") throw fsError(err, "abandon", this.#path);
    }
    await this.#store.journal?.closed(this.#store.root, this.relPath);
  }
}

class FileStore implements ArchiveStore {
  readonly kind = "file";
  readonly root: string;
  #rootReady: Promise<void> | undefined;
  /**
   * Directories above the root whose entries the archiver created when it made the root: the root's parent up to
   * the nearest parent that was already there. Marked dirty as the directories below are, so the completes share
   * their syncs: each syncing them until one succeeded, the thousand files a drain completes at once synced each a
   * thousand times. A directory created below the root needs no record: it lies on the path of the file it was
   * created for, and that file syncs it.
   */
  #aboveRoot: readonly string[] = [];
  /**
   * Directories below the root with an entry created since their last sync, by the sequence number of the newest
   * such entry. A sync that starts later covers it, so files rolling into one directory share its syncs and a
   * directory nothing was created in is not synced again.
   */
  readonly #dirty = new Map<string, number>();
  readonly #syncing = new Map<string, { start: number; done: Promise<void> }>();
  #seq = 0;

  readonly publish: boolean;
  /** A complete file and the directories above it are synced to disk; off only for staging nothing reads back. */
  readonly sync: boolean;
  /** Publishing only: marks each hidden file while it is written, so a restart finds what a kill left. */
  readonly journal: PartialJournal | undefined;

  constructor(root: string, publish: boolean, sync: boolean, journal: PartialJournal | undefined) {
    this.root = root;
    this.publish = publish;
    this.sync = sync;
    this.journal = publish ? journal : undefined;
  }

  async open(relPath: string): Promise<ArchiveFile> {
    checkRelPath(relPath);
    const path = join(this.root, relPath);
    await this.#ensureRoot();
    const dir = dirname(path);
    const first = await mkdirs(dir);
    if (first !== undefined) for (const d of dirsUpTo(dir, first)) this.#markDirty(dirname(d));
    let handle: FileHandle;
    await this.journal?.opened(this.root, relPath);
    try {
      // "ax": appends only, and never replaces a file already there.
      handle = await open(this.publish ? partialPath(path) : path, "ax");
    } catch (err) {
      await this.journal?.closed(this.root, relPath);
      throw fsError(err, "open", path);
    }
    if (!this.publish) this.#markDirty(dir);
    return new LocalFile(this, relPath, path, handle);
  }

  #markDirty(dir: string): void {
    this.#dirty.set(dir, ++this.#seq);
  }

  /** An entry was created in `dir`: the next complete through it syncs it. */
  created(dir: string): void {
    this.#markDirty(dir);
  }

  /** Syncs `dir` unless every entry created in it is already covered by a sync that started after it. */
  async syncIfDirty(dir: string): Promise<void> {
    for (;;) {
      const need = this.#dirty.get(dir);
      if (need === undefined) return;
      const running = this.#syncing.get(dir);
      if (running !== undefined) {
        await running.done;
        if (running.start > need) return;
        continue;
      }
      const start = ++this.#seq;
      const done = syncDir(dir).then(() => {
        if ((this.#dirty.get(dir) ?? Infinity) < start) this.#dirty.delete(dir);
      });
      this.#syncing.set(dir, { start, done });
      try {
        await done;
      } finally {
        this.#syncing.delete(dir);
      }
      return;
    }
  }

  #ensureRoot(): Promise<void> {
    this.#rootReady ??= mkdirs(this.root).then(
      (first) => {
        if (first === undefined) return;
        this.#aboveRoot = dirsUpTo(dirname(this.root), dirname(first));
        for (const dir of this.#aboveRoot) this.#markDirty(dir);
      },
      (err: unknown) => {
        this.#rootReady = undefined;
        throw err;
      },
    );
    return this.#rootReady;
  }

  async syncAboveRoot(): Promise<void> {
    for (const dir of this.#aboveRoot) await this.syncIfDirty(dir);
  }
}

/**
 * The local backend for `file:///abs/path` (or an absolute path). `publish`: write each file under a hidden name and
 * give it its archive name only once it is synced (an archive destination); without it files are written in place
 * (staging, whose manifests tell a complete file from a torn one). `sync` (default on): a complete file and its
 * directories are synced; staging that a restart removes unread turns it off. `journal`, publishing: marks each file
 * while it is written (settlePartials reads the marks at the next start).
 */
export function createFileStore(
  rootUrlOrPath: string,
  opts: { publish?: boolean; sync?: boolean; journal?: PartialJournal } = {},
): ArchiveStore {
  return new FileStore(rootPath(rootUrlOrPath), opts.publish ?? false, opts.sync ?? true, opts.journal);
}
