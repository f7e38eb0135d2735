// Snappy framing format (application/x-snappy-framed). The snappy package's frame-format Compressor does its work
// synchronously on the calling thread, so it runs on a small pool of worker threads: the event loop only copies the
// flush across. Measured against framing built here around the package's async raw `compress` per 64 KiB chunk,
// the pool was as fast or faster and kept the loop freer, because the CRC32C that framing needs would run in JS on
// the main thread.

import { availableParallelism } from "node:os";
import { extname } from "node:path";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { ArchiverError } from "../errors.ts";
import type { Codec } from "./index.ts";
import { corrupt, refused } from "./refusal.ts";

export type SnappyOp = "compress" | "decompress";
export interface SnappyRequest {
  readonly id: number;
  readonly op: SnappyOp;
  readonly input: Uint8Array;
}
export type SnappyReply =
  { readonly id: number; readonly output: Uint8Array } | { readonly id: number; readonly error: string };

// The stream identifier chunk alone is a valid, empty framed stream; the package writes nothing for an empty input.
const STREAM_IDENTIFIER = Buffer.from([0xff, 0x06, 0x00, 0x00, 0x73, 0x4e, 0x61, 0x50, 0x70, 0x59]);

// The worker's own extension, so the pool starts from the .ts sources and from the built .js alike.
const WORKER_URL = new URL(`./snappy-worker${extname(fileURLToPath(import.meta.url))}`, import.meta.url);

interface Job {
  readonly op: SnappyOp;
  resolve(output: Buffer): void;
  reject(err: Error): void;
}

class Lane {
  readonly worker: Worker;
  readonly jobs = new Map<number, Job>();

  constructor(onGone: (lane: Lane, why: string) => void) {
    this.worker = new Worker(WORKER_URL);
    let why = "exited";
    this.worker.on("message", (reply: SnappyReply) => this.#settle(reply));
    this.worker.on("error", (err) => (why = err.message));
    this.worker.on("exit", (code) => onGone(this, `${why} (exit code ${code})`));
  }

  run(id: number, job: Job, input: Uint8Array): void {
    this.jobs.set(id, job);
    // An idle pool must not keep the process alive; a pending job must.
    if (this.jobs.size === 1) this.worker.ref();
    // A copy of just the flush's bytes, moved rather than cloned: posting `input` itself would clone its whole
    // backing ArrayBuffer, and transferring it would detach memory the caller still owns.
    const copy = new Uint8Array(input);
    this.worker.postMessage({ id, op: job.op, input: copy } satisfies SnappyRequest, [copy.buffer]);
  }

  #settle(reply: SnappyReply): void {
    const job = this.jobs.get(reply.id);
    if (job === undefined) return;
    this.jobs.delete(reply.id);
    if (this.jobs.size === 0) this.worker.unref();
    if ("output" in reply)
      job.resolve(Buffer.from(reply.output.buffer, reply.output.byteOffset, reply.output.byteLength));
    else job.reject(job.op === "compress" ? refused("snappy", reply.error) : corrupt("snappy", reply.error));
  }
}

class SnappyPool {
  // As many lanes as libuv's default thread pool, which the other codecs compress on.
  readonly #size = Math.max(1, Math.min(4, availableParallelism()));
  readonly #lanes: Lane[] = [];
  #nextId = 0;

  run(op: SnappyOp, input: Uint8Array): Promise<Buffer> {
    const lane = this.#pick();
    const id = this.#nextId++;
    return new Promise((resolve, reject) => lane.run(id, { op, resolve, reject }, input));
  }

  // An idle lane, else a new one while the pool has room, else the least loaded.
  #pick(): Lane {
    let best: Lane | undefined;
    for (const lane of this.#lanes) {
      if (lane.jobs.size === 0) return lane;
      if (best === undefined || lane.jobs.size < best.jobs.size) best = lane;
    }
    if (best !== undefined && this.#lanes.length >= this.#size) return best;
    const lane = new Lane((gone, why) => this.#drop(gone, why));
    this.#lanes.push(lane);
    return lane;
  }

  // A bad input comes back as an error reply, so a worker that dies died of something else: its jobs are retryable,
  // and the next job starts a fresh worker.
  #drop(lane: Lane, why: string): void {
    const at = this.#lanes.indexOf(lane);
    if (at !== -1) this.#lanes.splice(at, 1);
    for (const job of lane.jobs.values()) {
      job.reject(new ArchiverError("codec_failed", `snappy worker ${why}`, "retryable"));
    }
    lane.jobs.clear();
  }
}

let pool: SnappyPool | undefined;

export class SnappyCodec implements Codec {
  readonly name = "snappy";
  readonly suffix = ".sz";
  readonly level = undefined;

  compress(input: Buffer): Promise<Buffer> {
    if (input.length === 0) return Promise.resolve(Buffer.from(STREAM_IDENTIFIER));
    return (pool ??= new SnappyPool()).run("compress", input);
  }

  decompress(block: Buffer): Promise<Buffer> {
    return (pool ??= new SnappyPool()).run("decompress", block);
  }
}
