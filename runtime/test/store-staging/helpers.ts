// Shared by the staging tests: temp spools, a capturing logger, metric reads, fake object backends (the staging
// store is under test, not the backend), and a retry as the pipeline runs a file's completion with.
import { mkdir, mkdtemp, open, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after } from "node:test";
import pino, { type Logger } from "pino";
import { ArchiverError, isRetryable } from "../../src/errors.ts";
import { createMetrics, type Metrics } from "../../src/observe/metrics.ts";
import type { ObjectBackend, UploadMeta } from "../../src/store/object/types.ts";
import type { Retry } from "../../src/store/types.ts";

const made: string[] = [];
after(async () => {
  for (const d of made) await rm(d, { recursive: true, force: true });
});

export async function tempDir(): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "dfe-staging-"));
  made.push(dir);
  return dir;
}

export interface LogLine {
  level: number;
  msg: string;
  [field: string]: unknown;
}

/** A debug-level logger that keeps every line. pino levels: 20 debug, 30 info, 40 warn, 50 error. */
export function captureLog(): { log: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const log = pino({ level: "debug" }, { write: (s: string) => void lines.push(JSON.parse(s) as LogLine) });
  return { log, lines };
}

export const newMetrics = (): Metrics => createMetrics({ defaultMetrics: false });

/** The value of a counter or gauge, for the label set given (the unlabelled series by default). */
export async function metric(
  m: { get(): Promise<{ values: { value: number; labels: object }[] }> },
  labels: Record<string, string> = {},
): Promise<number> {
  const { values } = await m.get();
  const want = JSON.stringify(labels);
  return values.find((v) => JSON.stringify(v.labels) === want)?.value ?? 0;
}

export interface UploadCall {
  stagedPath: string;
  size: number;
  key: string;
  meta: UploadMeta;
  signal: AbortSignal | undefined;
}

type Behaviour = (call: UploadCall, n: number) => Promise<void> | void;

/** An object backend whose upload does `behave` (the n-th call, from 1), then copies the staged bytes to `objects`. */
export class FakeBackend implements ObjectBackend {
  readonly scheme = "s3";
  readonly bucket = "bucket";
  readonly calls: UploadCall[] = [];
  readonly objects: string;
  readonly #behave: Behaviour;
  #running = 0;
  maxRunning = 0;

  constructor(objects: string, behave: Behaviour = () => undefined) {
    this.objects = objects;
    this.#behave = behave;
  }

  key(relPath: string): string {
    return `archive/${relPath}`;
  }

  async upload(opts: {
    stagedPath: string;
    size: number;
    key: string;
    meta: UploadMeta;
    signal?: AbortSignal;
  }): Promise<void> {
    const call: UploadCall = { ...opts, signal: opts.signal };
    this.calls.push(call);
    this.#running++;
    this.maxRunning = Math.max(this.maxRunning, this.#running);
    try {
      await this.#behave(call, this.calls.length);
      const bytes = Buffer.alloc(opts.size);
      const file = await open(opts.stagedPath, "r");
      try {
        const { bytesRead } = await file.read(bytes, 0, opts.size, 0);
        if (bytesRead !== opts.size) throw new ArchiverError("short_read", "staged copy ended early", "retryable");
      } finally {
        await file.close();
      }
      const to = join(this.objects, opts.key);
      await mkdir(dirname(to), { recursive: true });
      await writeFile(to, bytes);
    } finally {
      this.#running--;
    }
  }
}

/** Fails the first `n` calls, retryable. */
export const failing =
  (n: number): Behaviour =>
  (_call, i) => {
    if (i <= n) throw new ArchiverError("store_unavailable", `attempt ${i} failed`, "retryable");
  };

/** Refuses every call for good, as a store refuses an object too large. */
export const refusing: Behaviour = () => {
  throw new ArchiverError("EntityTooLarge", "the store refused the object", "permanent");
};

/** Never finishes on its own: rejects once the call's signal aborts. */
export const hanging: Behaviour = (call) =>
  new Promise((_resolve, reject) => {
    call.signal?.addEventListener("abort", () => reject(call.signal?.reason as Error));
  });

/** Holds every call until `release` lets one through (in order; a release ahead of a call lets the next one pass). */
export function gate(): { behave: Behaviour; release(): void; started: number; waitStarted(n: number): Promise<void> } {
  const held: (() => void)[] = [];
  const watchers: { n: number; resolve: () => void }[] = [];
  let credits = 0;
  const g = {
    started: 0,
    behave: () =>
      new Promise<void>((resolve) => {
        g.started++;
        for (const w of watchers.filter((x) => x.n <= g.started)) w.resolve();
        if (credits > 0) {
          credits--;
          resolve();
        } else held.push(resolve);
      }),
    release() {
      const next = held.shift();
      if (next === undefined) credits++;
      else next();
    },
    waitStarted(n: number): Promise<void> {
      if (g.started >= n) return Promise.resolve();
      return new Promise((resolve) => watchers.push({ n, resolve }));
    },
  };
  return g;
}

/** Lets pending promise callbacks and I/O callbacks run. */
export const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 20));

/** Waits until `cond` holds; fails after about two seconds. */
export async function until(cond: () => boolean): Promise<void> {
  for (let i = 0; !cond(); i++) {
    if (i > 100) throw new Error("condition never held");
    await settle();
  }
}

/** A retry as the pipeline's: runs an attempt up to `times` times while it fails retryable, recording each failure. */
export function retrying(
  times: number,
  failed: unknown[],
  between: () => Promise<void> = async () => undefined,
): Retry {
  return async (attempt) => {
    for (let tries = 1; ; tries++) {
      try {
        return await attempt();
      } catch (err) {
        failed.push(err);
        if (tries === times || !isRetryable(err)) throw err;
        await between();
      }
    }
  };
}
