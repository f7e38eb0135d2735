// The staging store of an object-store destination. A file is written to <spool_dir>/uploads/<relPath>, and once it
// completes it is uploaded whole in the background, at most writer_parallelism uploads at once. Where a restart
// uploads what a previous process staged (grpc, or kafka without acknowledgements), a complete file is first synced
// and gets its manifest beside it; where a restart removes it unread (kafka with acknowledgements: its records are
// read again from the committed offset), neither is done, since nothing would ever read them. `complete` resolves
// only once the store confirmed the object, so its offsets are released then and never earlier. A failed upload keeps
// the staged copy and is retried from it, a fresh upload per attempt, with backoff and jitter; only a refusal for the
// object itself, or a staged copy that cannot be read back, ends it.
import { setMaxListeners } from "node:events";
import { stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import type { Logger } from "pino";
import type { Codec } from "../codec/index.ts";
import { ArchiverError, ConfigError, isRetryable } from "../errors.ts";
import type { Metrics } from "../observe/metrics.ts";
import { SinkTally, type SinkOutcomes } from "../regulate/circuit.ts";
import { backoffDelay, UPLOAD_BACKOFF, type Backoff } from "./backoff.ts";
import { createFileStore } from "./file.ts";
import { errnoOf } from "./fs.ts";
import { checkKey, STAGED_UNREADABLE, type ObjectBackend, type UploadMeta } from "./object/types.ts";
import {
  MANIFEST_SUFFIX,
  relUnder,
  removeStaged,
  stagedRelPath,
  uploadsDir,
  writeManifest,
  type ManifestJson,
  type StagedManifest,
} from "./manifest.ts";
import { Quarantine } from "./quarantine.ts";
import { once, type ArchiveFile, type ArchiveStore, type FileMeta, type Retry } from "./types.ts";

export type StagingMetrics = Pick<
  Metrics,
  | "stagedBytes"
  | "uploadsPending"
  | "stagedFilesRecovered"
  | "stagedFilesQuarantined"
  | "stagedFilesRemoved"
  | "archiveErrors"
>;

export interface StagingStoreOptions {
  readonly backend: ObjectBackend;
  readonly spoolDir: string;
  /**
   * A restart uploads what this process staged (recoverStaging's "upload" mode): each complete file is synced and
   * gets its manifest. Off where a restart removes staged files (its "remove" mode), which spares a completed file's
   * four syncs (file, manifest, their directories) and the manifest's writes.
   */
  readonly recoverable: boolean;
  /** buffer.writer_parallelism: uploads at once. */
  readonly writerParallelism: number;
  /** buffer.staged_bytes_cap: `pressure()` reads staged bytes against it. */
  readonly stagedBytesCap: number;
  /** buffer.quarantine_bytes_cap, for staged copies that cannot be read back. */
  readonly quarantineBytesCap: number;
  readonly metrics: StagingMetrics;
  readonly log: Logger;
  /** Default 0.5 s to 60 s. */
  readonly retry?: Backoff;
  /** Waits `ms`, rejecting once `signal` aborts: the backoff between attempts and the shutdown grace. */
  readonly sleep?: (ms: number, signal: AbortSignal) => Promise<void>;
  /** In [0, 1): the backoff's jitter. Default Math.random. */
  readonly random?: () => number;
}

export interface StagingStore extends ArchiveStore {
  readonly kind: "object";
  /** Bytes on the spool not yet uploaded: open files, files waiting to upload, files refused and not yet discarded. */
  stagedBytes(): number;
  /** Completed files the store has not yet confirmed. */
  uploadsPending(): number;
  /** Staged bytes over buffer.staged_bytes_cap: a pressure source for the self-regulation latch. */
  pressure(): number;
  /**
   * Upload attempts that reached the store and those that failed, for the sink circuit. A refusal of the object
   * itself counts as reached (the store is up and answering); a staged copy that cannot be read back is neither.
   */
  readonly attempts: SinkOutcomes;
  /**
   * Uploads a complete file a previous process staged (from recoverStaging). Settles as `complete` does, and counts
   * staged_files_recovered_total once the store confirms it.
   */
  enqueueRecovered(manifest: StagedManifest): Promise<void>;
  /** A file the store refused for good, kept for read-back into the DLQ: its staged copy and block lengths. */
  readBack(relPath: string): StagedManifest | undefined;
  /** Removes a refused file's staged copy and manifest, once its records are dealt with. */
  discard(relPath: string): Promise<void>;
  /**
   * Shutdown: waits up to `graceMs` for pending uploads, then stops. A file still uploading keeps its staged copy and
   * manifest, and its `complete` rejects, retryable, with code `upload_pending_at_shutdown`: its offsets stay held.
   */
  drainUploads(graceMs: number): Promise<void>;
  /**
   * A drain or a hand-over has begun, and its grace is all the time uploads have left: uploads backing off try again
   * at once, and until the returned release is called (a drain never calls it) they back off HURRIED_BACKOFF at most.
   * The store may be back while a long backoff after an outage still runs: woken once, uploads that failed again
   * backed off up to 16 s afresh and slept past a drain's 20 s grace with the store up for the last 12 s of it.
   */
  hurry(): () => void;
  /** Stops at once, as `drainUploads(0)`; later opens are refused. */
  close(): Promise<void>;
}

/** The grace shutdown gives pending uploads before a file still uploading keeps its staged copy and offsets. */
export const UPLOAD_DRAIN_MS = 20_000;
/** The backoff between upload attempts while hurried (see StagingStore.hurry). */
export const HURRIED_BACKOFF: Backoff = { minMs: 250, maxMs: 1000 };

const UNREADABLE_ERRNO = new Set(["ENOENT", "ENOTDIR", "EACCES", "EPERM"]);

interface Job {
  readonly m: StagedManifest;
  readonly recovered: boolean;
  readonly done: PromiseWithResolvers<undefined>;
  settled: boolean;
  warned: boolean;
}

/** At most `n` holders at once, first come first served; waiters are refused once `signal` aborts. */
class Slots {
  #free: number;
  readonly #signal: AbortSignal;
  readonly #waiters: { grant: () => void; refuse: (reason: unknown) => void }[] = [];

  constructor(n: number, signal: AbortSignal) {
    this.#free = n;
    this.#signal = signal;
    signal.addEventListener("abort", () => {
      for (const w of this.#waiters.splice(0)) w.refuse(signal.reason);
    });
  }

  acquire(): Promise<void> {
    if (this.#signal.aborted) return Promise.reject(this.#signal.reason as Error);
    if (this.#free > 0) {
      this.#free--;
      return Promise.resolve();
    }
    return new Promise((grant, refuse) => this.#waiters.push({ grant, refuse }));
  }

  release(): void {
    const next = this.#waiters.shift();
    if (next === undefined) this.#free++;
    else next.grant();
  }
}

class StagedFile implements ArchiveFile {
  readonly relPath: string;
  readonly #key: string;
  readonly #stagedPath: string;
  readonly #local: ArchiveFile;
  readonly #store: Staging;

  constructor(store: Staging, relPath: string, key: string, stagedPath: string, local: ArchiveFile) {
    this.#store = store;
    this.relPath = relPath;
    this.#key = key;
    this.#stagedPath = stagedPath;
    this.#local = local;
  }

  get size(): number {
    return this.#local.size;
  }

  async append(frame: Buffer): Promise<void> {
    await this.#staging(() => this.#local.append(frame));
  }

  appendCompressed(codec: Codec, raw: readonly Buffer[]): Promise<number> {
    return this.#staging(() => this.#local.appendCompressed(codec, raw));
  }

  /** Counts what a write of the local file staged, whether or not it succeeded. */
  async #staging<R>(write: () => Promise<R>): Promise<R> {
    const before = this.#local.size;
    try {
      return await write();
    } finally {
      this.#store.staged(this.#local.size - before);
    }
  }

  async truncate(size: number): Promise<void> {
    await this.#staging(() => this.#local.truncate(size));
  }

  park(): Promise<void> {
    return this.#local.park();
  }

  async complete(meta: FileMeta, retry: Retry = once): Promise<void> {
    const json: ManifestJson = {
      version: 1,
      key: this.#key,
      size: this.#local.size,
      blockLengths: [...meta.blockLengths],
      blockRecords: [...meta.blockRecords],
      records: meta.records,
      codec: meta.codec,
      openedAt: meta.openedAt,
      closedAt: meta.closedAt,
    };
    try {
      await this.#local.complete(meta, retry);
      // Written afresh each attempt (a temp file, then a rename), so a full spool is waited out with the copy kept.
      if (this.#store.recoverable) await retry(() => writeManifest(this.#stagedPath, json));
    } catch (err) {
      // No process would ever upload a file that did not complete: its offsets are Errored and read again.
      await this.#store.unstage(this.#stagedPath, json.size);
      throw err;
    }
    return this.#store.enqueue({ ...json, relPath: this.relPath, stagedPath: this.#stagedPath }, false);
  }

  async abandon(): Promise<void> {
    const size = this.#local.size;
    await this.#local.abandon();
    await this.#store.unstage(this.#stagedPath, size);
  }
}

class Staging implements StagingStore {
  readonly kind = "object";
  readonly #o: StagingStoreOptions;
  readonly #m: StagingMetrics;
  readonly #log: Logger;
  readonly #uploads: string;
  readonly #files: ArchiveStore;
  readonly #quarantine: Quarantine;
  readonly #retry: Backoff;
  readonly #sleep: (ms: number, signal: AbortSignal) => Promise<void>;
  readonly #random: () => number;
  /** Aborted at shutdown: in-flight uploads, backoff waits and slot waiters all end on it. */
  readonly #stop = new AbortController();
  /** Aborted (and replaced) by hurry(): uploads backing off try again at once. */
  #hurry = new AbortController();
  /** Hurries not yet released: while any is, uploads back off HURRIED_BACKOFF at most. */
  #hurried = 0;
  readonly #slots: Slots;
  readonly #jobs = new Set<Job>();
  readonly attempts = new SinkTally();
  readonly recoverable: boolean;
  /** Files the store refused for good, by store path, until discarded. */
  readonly #kept = new Map<string, StagedManifest>();
  #stagedBytes = 0;
  /**
   * Opens (mkdir, then create) and removals (unlink, then prune empty directories) run one at a time, so a prune
   * never takes away the directory an open just made.
   */
  #dirTail: Promise<unknown> = Promise.resolve();

  constructor(opts: StagingStoreOptions) {
    this.#o = opts;
    this.recoverable = opts.recoverable;
    this.#m = opts.metrics;
    this.#log = opts.log;
    this.#uploads = uploadsDir(resolve(opts.spoolDir));
    this.#files = createFileStore(this.#uploads, { sync: opts.recoverable });
    this.#quarantine = new Quarantine({
      uploadsDir: this.#uploads,
      capBytes: opts.quarantineBytesCap,
      metrics: opts.metrics,
      log: opts.log,
    });
    this.#retry = opts.retry ?? UPLOAD_BACKOFF;
    this.#sleep = opts.sleep ?? ((ms, signal) => delay(ms, undefined, { signal }));
    this.#random = opts.random ?? Math.random;
    // A listener per upload and backoff wait, and thousands of files may wait through a store outage.
    setMaxListeners(0, this.#stop.signal);
    this.#slots = new Slots(opts.writerParallelism, this.#stop.signal);
    this.#gauges();
  }

  async open(relPath: string): Promise<ArchiveFile> {
    if (this.#stop.signal.aborted) {
      throw new ArchiverError("store_closed", `open ${relPath}: the staging store is shut down`, "retryable");
    }
    // The store's own refusals come first, so a key it would refuse never has a byte staged.
    const key = this.#o.backend.key(relPath);
    checkKey(key);
    const stagedRel = stagedRelPath(relPath);
    const local = await this.#dirOp(() => this.#files.open(stagedRel));
    return new StagedFile(this, relPath, key, join(this.#uploads, stagedRel), local);
  }

  stagedBytes(): number {
    return this.#stagedBytes;
  }

  uploadsPending(): number {
    return this.#jobs.size;
  }

  pressure(): number {
    return this.#stagedBytes / this.#o.stagedBytesCap;
  }

  enqueueRecovered(manifest: StagedManifest): Promise<void> {
    this.staged(manifest.size);
    return this.enqueue(manifest, true);
  }

  readBack(relPath: string): StagedManifest | undefined {
    return this.#kept.get(relPath);
  }

  async discard(relPath: string): Promise<void> {
    const m = this.#kept.get(relPath);
    if (m === undefined) return;
    await this.#dirOp(() => removeStaged(m.stagedPath, this.#uploads));
    this.#kept.delete(relPath);
    this.staged(-m.size);
  }

  hurry(): () => void {
    this.#hurried++;
    this.#hurry.abort();
    this.#hurry = new AbortController();
    let held = true;
    return () => {
      if (held) this.#hurried--;
      held = false;
    };
  }

  async drainUploads(graceMs: number): Promise<void> {
    if (this.#jobs.size > 0) {
      const grace = new AbortController();
      const settled = Promise.allSettled([...this.#jobs].map((j) => j.done.promise));
      await Promise.race([settled, this.#sleep(graceMs, grace.signal).catch(() => undefined)]);
      grace.abort();
    }
    this.#shutdown();
  }

  async close(): Promise<void> {
    this.#shutdown();
  }

  /** Counts bytes added to (or, negative, taken off) the spool. */
  staged(delta: number): void {
    if (delta === 0) return;
    this.#stagedBytes += delta;
    this.#gauges();
  }

  /** Removes a staged file that will never upload, and takes its bytes off the count. */
  async unstage(stagedPath: string, size: number): Promise<void> {
    try {
      await this.#dirOp(() => removeStaged(stagedPath, this.#uploads));
      this.staged(-size);
    } catch (err) {
      // Left for the next start, which removes or quarantines it.
      this.#log.warn({ err, path: stagedPath }, "staged file could not be removed");
    }
  }

  enqueue(m: StagedManifest, recovered: boolean): Promise<void> {
    const job: Job = { m, recovered, done: Promise.withResolvers<undefined>(), settled: false, warned: false };
    this.#jobs.add(job);
    this.#gauges();
    if (this.#stop.signal.aborted) this.#settle(job, pendingAtShutdown(m));
    else void this.#run(job);
    return job.done.promise;
  }

  async #run(job: Job): Promise<void> {
    const { m } = job;
    const signal = this.#stop.signal;
    const meta: UploadMeta = { records: m.records, codec: m.codec, openedAt: m.openedAt, closedAt: m.closedAt };
    try {
      for (let failures = 1; ; failures++) {
        await this.#slots.acquire();
        let failure: unknown;
        let unreadable: string | undefined;
        try {
          unreadable = await this.#whyUnreadable(m);
          if (unreadable === undefined) {
            await this.#o.backend.upload({ stagedPath: m.stagedPath, size: m.size, key: m.key, meta, signal });
          }
        } catch (err) {
          failure = err;
        } finally {
          this.#slots.release();
        }
        // Settled meanwhile: shut down, and the staged copy stays for the next start.
        if (job.settled) return;
        if (failure === undefined && unreadable === undefined) {
          this.attempts.ok();
          return await this.#uploaded(job);
        }
        this.#m.archiveErrors.inc();
        unreadable ??= await this.#whyUnreadable(m, failure);
        if (unreadable !== undefined) return await this.#unreadable(job, unreadable, failure);
        if (!isRetryable(failure)) {
          this.attempts.ok();
          return this.#refused(job, failure);
        }
        this.attempts.fail();
        this.#retrying(job, failure, failures);
        // Cut short by hurry(): a file still staged at the drain's end keeps its offsets, and its records are read again.
        const hurry = this.#hurry.signal;
        const backoff = this.#hurried > 0 ? HURRIED_BACKOFF : this.#retry;
        await this.#sleep(backoffDelay(failures, backoff, this.#random), AbortSignal.any([signal, hurry])).catch(
          (err: unknown) => {
            if (signal.aborted || !hurry.aborted) throw err;
          },
        );
      }
    } catch (err) {
      // Shutdown's abort (the job is already settled), or a step of the bookkeeping that failed.
      this.#settle(job, err);
    }
  }

  /**
   * Why the staged copy cannot be read back (missing, unreadable by permission, shorter than the bytes staged), or
   * undefined when a retry may still read it: the backend's STAGED_UNREADABLE `err`, else the copy as it is now.
   */
  async #whyUnreadable(m: StagedManifest, err?: unknown): Promise<string | undefined> {
    if (err instanceof ArchiverError && err.code === STAGED_UNREADABLE) return err.message;
    try {
      const { size } = await stat(m.stagedPath);
      return size < m.size ? `it holds ${size} of the ${m.size} bytes staged` : undefined;
    } catch (statErr) {
      const statCode = errnoOf(statErr);
      // Any other error reading it (EIO) may clear: the upload is retried.
      return statCode !== undefined && UNREADABLE_ERRNO.has(statCode) ? `it cannot be opened (${statCode})` : undefined;
    }
  }

  async #uploaded(job: Job): Promise<void> {
    const { m } = job;
    try {
      await this.#dirOp(() => removeStaged(m.stagedPath, this.#uploads));
    } catch (err) {
      // The object is in the store; a copy left behind is removed or uploaded again (the same object) at restart.
      this.#log.warn({ err, path: m.stagedPath, key: m.key }, "uploaded file's staged copy could not be removed");
    }
    this.staged(-m.size);
    if (job.recovered) this.#m.stagedFilesRecovered.inc();
    this.#settle(job);
  }

  async #unreadable(job: Job, why: string, cause: unknown): Promise<void> {
    const { m } = job;
    const rel = relUnder(this.#uploads, m.stagedPath);
    try {
      await this.#dirOp(() => this.#quarantine.admit([rel, rel + MANIFEST_SUFFIX], "unreadable", why));
    } catch (err) {
      this.#log.error({ err, path: m.stagedPath }, "unreadable staged file could not be moved to quarantine");
    }
    this.staged(-m.size);
    const error = new ArchiverError(
      STAGED_UNREADABLE,
      `staged copy ${m.stagedPath} of ${m.key} cannot be read back: ${why}`,
      "permanent",
      { cause },
    );
    this.#settle(job, error);
  }

  #refused(job: Job, err: unknown): void {
    const { m } = job;
    this.#kept.set(m.relPath, m);
    this.#log.warn({ err, key: m.key, path: m.stagedPath }, "the store refused the object for good");
    this.#settle(job, err);
  }

  #retrying(job: Job, err: unknown, attempt: number): void {
    const fields = { err, key: job.m.key, attempt };
    if (job.warned) {
      this.#log.debug(fields, "upload failed again; retrying");
      return;
    }
    job.warned = true;
    this.#log.warn(fields, "upload failed; the staged file is kept and retried with backoff");
  }

  #settle(job: Job, err?: unknown): void {
    if (job.settled) return;
    job.settled = true;
    this.#jobs.delete(job);
    this.#gauges();
    if (err === undefined) job.done.resolve(undefined);
    else job.done.reject(err);
  }

  #shutdown(): void {
    if (this.#stop.signal.aborted) return;
    const pending = this.#jobs.size;
    this.#stop.abort(new ArchiverError("upload_pending_at_shutdown", "the staging store shut down", "retryable"));
    for (const job of [...this.#jobs]) this.#settle(job, pendingAtShutdown(job.m));
    if (pending > 0) {
      this.#log.warn({ pending }, "shutdown: uploads still pending keep their staged copies and their offsets held");
    }
  }

  #dirOp<R>(op: () => Promise<R>): Promise<R> {
    const run = this.#dirTail.then(op);
    this.#dirTail = run.catch(() => undefined);
    return run;
  }

  #gauges(): void {
    this.#m.stagedBytes.set(this.#stagedBytes);
    this.#m.uploadsPending.set(this.#jobs.size);
  }
}

const pendingAtShutdown = (m: StagedManifest) =>
  new ArchiverError(
    "upload_pending_at_shutdown",
    `${m.key} was still uploading at shutdown: its staged copy ${m.stagedPath} is kept`,
    "retryable",
  );

/** The staging store of an object-store destination. Run recoverStaging on the spool before the first open. */
export function createStagingStore(opts: StagingStoreOptions): StagingStore {
  if (!Number.isInteger(opts.writerParallelism) || opts.writerParallelism < 1) {
    throw new ConfigError(
      "buffer.writer_parallelism",
      `must be a whole number of at least 1, got ${opts.writerParallelism}`,
    );
  }
  if (!(opts.stagedBytesCap > 0)) {
    throw new ConfigError("buffer.staged_bytes_cap", `must be above 0, got ${opts.stagedBytesCap}`);
  }
  return new Staging(opts);
}
