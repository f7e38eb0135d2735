// The staged copy as an upload reads it: opened and measured before the store is asked for anything, then read a
// part at a time, or whole when it is one part's size or less. Upload memory is the parts in flight, so it stays near
// PARTS_IN_FLIGHT x the part size whatever the file's size.
import { open, type FileHandle } from "node:fs/promises";
import { ArchiverError } from "../../errors.ts";
import { STAGED_UNREADABLE } from "./types.ts";

/** Parts of one upload sent at once, each holding a buffer of its own. */
export const PARTS_IN_FLIGHT = 4;

export interface Part {
  /** 1-based, in file order. */
  readonly number: number;
  readonly data: Buffer;
}

// A staged copy that is gone or that permission keeps us from is unreadable for good; any other error (EIO,
// EMFILE, ...) can clear, so it is retried.
const UNREADABLE_ERRNO = new Set(["ENOENT", "EACCES", "EPERM", "EISDIR", "ENOTDIR"]);

function stagedError(err: unknown, path: string): ArchiverError {
  if (err instanceof ArchiverError) return err;
  const code = typeof err === "object" && err !== null && "code" in err ? String(err.code) : "fs_error";
  const reason = err instanceof Error ? err.message : String(err);
  if (UNREADABLE_ERRNO.has(code))
    return new ArchiverError(STAGED_UNREADABLE, `staged copy ${path} cannot be read (${code})`, "permanent", {
      cause: err,
    });
  return new ArchiverError(code, `reading staged copy ${path}: ${reason}`, "retryable", { cause: err });
}

const short = (path: string, size: number, got: number) =>
  new ArchiverError(
    STAGED_UNREADABLE,
    `staged copy ${path} holds ${got} bytes, fewer than the ${size} staged`,
    "permanent",
  );

export class StagedFile {
  readonly path: string;
  /** The bytes to upload: the staged size, never more even when the file has grown. */
  readonly size: number;
  readonly #handle: FileHandle;

  private constructor(path: string, size: number, handle: FileHandle) {
    this.path = path;
    this.size = size;
    this.#handle = handle;
  }

  /** Opens the staged copy and checks it holds `size` bytes; throws STAGED_UNREADABLE when it cannot. */
  static async open(path: string, size: number): Promise<StagedFile> {
    let handle: FileHandle;
    try {
      handle = await open(path, "r");
    } catch (err) {
      throw stagedError(err, path);
    }
    try {
      const { size: onDisk } = await handle.stat();
      if (onDisk < size) throw short(path, size, onDisk);
      return new StagedFile(path, size, handle);
    } catch (err) {
      await handle.close().catch(() => undefined);
      throw stagedError(err, path);
    }
  }

  close(): Promise<void> {
    return this.#handle.close().catch(() => undefined);
  }

  /** Fills `buf` with the `len` bytes at `offset`; a file that ends early is STAGED_UNREADABLE (it shrank). */
  async #read(buf: Buffer, len: number, offset: number): Promise<void> {
    try {
      for (let got = 0; got < len;) {
        const { bytesRead } = await this.#handle.read(buf, got, len - got, offset + got);
        if (bytesRead === 0) throw short(this.path, this.size, offset + got);
        got += bytesRead;
      }
    } catch (err) {
      throw stagedError(err, this.path);
    }
  }

  /** The whole file in one fresh buffer: for a file small enough to go in a single request. */
  async whole(): Promise<Buffer> {
    const buf = Buffer.allocUnsafe(this.size);
    await this.#read(buf, this.size, 0);
    return buf;
  }

  /** The file in chunks of `chunkSize`, each a fresh buffer: for a consumer that keeps a chunk past its write. */
  async *chunks(chunkSize: number): AsyncGenerator<Buffer> {
    for (let offset = 0; offset < this.size; offset += chunkSize) {
      const len = Math.min(chunkSize, this.size - offset);
      const buf = Buffer.allocUnsafe(len);
      await this.#read(buf, len, offset);
      yield buf;
    }
  }

  /**
   * Reads the file in parts of `partSize` and sends each with `send`, at most PARTS_IN_FLIGHT at once; a part is
   * read while the ones before it upload. `send` gets a signal that aborts when the caller's does or another part
   * fails; the first failure is thrown once every part in flight has settled, so none outlives the attempt.
   * An empty file is one empty part when `emptyPart` is set (S3 completes no upload without a part), else none.
   */
  async sendParts(
    opts: { partSize: number; emptyPart: boolean; signal: AbortSignal | undefined },
    send: (part: Part, signal: AbortSignal) => Promise<void>,
  ): Promise<void> {
    const { partSize, signal } = opts;
    const count = this.size === 0 ? (opts.emptyPart ? 1 : 0) : Math.ceil(this.size / partSize);
    const stop = new AbortController();
    const onAbort = () => stop.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    // Buffers are reused once their part is sent: allocated up to PARTS_IN_FLIGHT, never more.
    const free: Buffer[] = [];
    const inFlight = new Set<Promise<void>>();
    let failure: { err: unknown } | undefined;
    const fail = (err: unknown) => {
      failure ??= { err };
      stop.abort(err);
    };
    try {
      for (let n = 1; n <= count; n++) {
        while (inFlight.size >= PARTS_IN_FLIGHT && failure === undefined) await Promise.race(inFlight);
        if (failure !== undefined) break;
        stop.signal.throwIfAborted();
        const offset = (n - 1) * partSize;
        const len = Math.min(partSize, this.size - offset);
        const buf = free.pop() ?? Buffer.allocUnsafeSlow(Math.min(partSize, this.size));
        await this.#read(buf, len, offset);
        const sent: Promise<void> = send({ number: n, data: buf.subarray(0, len) }, stop.signal).then(
          () => {
            inFlight.delete(sent);
            free.push(buf);
          },
          (err: unknown) => {
            inFlight.delete(sent);
            fail(err);
          },
        );
        inFlight.add(sent);
      }
    } catch (err) {
      fail(err);
    } finally {
      await Promise.all(inFlight);
      signal?.removeEventListener("abort", onAbort);
    }
    if (failure !== undefined) throw failure.err;
  }
}
