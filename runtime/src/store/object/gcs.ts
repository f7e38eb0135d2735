// Google Cloud Storage: one request per attempt for a file of one chunk or less, else one resumable upload, sent in
// chunks of the chunk size, one request at a time as the protocol needs. Credentials, first that is set:
// archive.gcs.service_account_key (inline JSON), archive.gcs.credentials_path, GOOGLE_APPLICATION_CREDENTIALS, else
// the library's default (instance metadata). With archive.gcs.endpoint (an emulator) the library sends no credentials.
import { pipeline } from "node:stream/promises";
import { Storage, type StorageOptions } from "@google-cloud/storage";
import type { Logger } from "pino";
import type { ResolvedConfig } from "../../config/resolve.ts";
import { ConfigError } from "../../errors.ts";
import { abortQuietly, genericFault, redactor, uploadError, type FaultReader, type Redact } from "./fail.ts";
import { StagedFile } from "./staged.ts";
import { checkKey, joinKey, objectMetadata, type ObjectBackend, type UploadMeta } from "./types.ts";

/** Every chunk but the last must be a multiple of this, by the resumable protocol. */
const CHUNK_QUANTUM = 256 * 1024;

const status = (v: unknown): number | undefined => (typeof v === "number" && v >= 100 && v < 600 ? v : undefined);

/** The first error reason in a JSON API error body (`invalid`, `notFound`, ...). */
function reasonOf(err: object): string | undefined {
  const errors = "errors" in err && Array.isArray(err.errors) ? (err.errors as unknown[]) : [];
  const first = errors[0];
  return typeof first === "object" && first !== null && "reason" in first && typeof first.reason === "string"
    ? first.reason
    : undefined;
}

// The library's errors carry the HTTP status in `code` (a number) or `status`, a network errno in `code`.
export const gcsFaults: FaultReader = {
  fault(err) {
    const fault = genericFault(err);
    if (typeof err !== "object" || err === null) return fault;
    const code = "code" in err ? err.code : undefined;
    const httpStatus = status(code) ?? ("status" in err ? status(err.status) : undefined);
    if (httpStatus === undefined) return fault;
    const reason = reasonOf(err);
    return {
      ...fault,
      code: reason === undefined || reason === "" ? `http_${httpStatus}` : reason,
      status: httpStatus,
    };
  },
  // 413: the object is past the size limit. 400 `invalid`: a refused object name; the bucket name, the only other
  // name in the request, is checked when the backend opens, and nothing else in the request comes from the data.
  permanent: (fault) => fault.status === 413 || (fault.status === 400 && fault.code === "invalid"),
};

// GCS bucket names: 3-63 characters (up to 222 with dots) of a-z 0-9 . _ -, starting and ending alphanumeric.
const BUCKET = /^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$/;

/** The library's options for a gs:// destination, with the first credential that is set, and its secrets. */
export function gcsStorageOptions(
  cfg: ResolvedConfig,
  env: NodeJS.ProcessEnv,
): { options: StorageOptions; secrets: string[] } {
  const g = cfg.archive.gcs;
  const options: StorageOptions = {};
  const secrets: string[] = [];
  if (g.endpoint !== undefined) options.apiEndpoint = g.endpoint;
  if (g.project_id !== undefined) options.projectId = g.project_id;
  if (g.service_account_key !== undefined) {
    const key = JSON.parse(g.service_account_key) as Record<string, unknown>;
    options.credentials = key;
    secrets.push(g.service_account_key);
    if (typeof key.private_key === "string") secrets.push(key.private_key);
    if (options.projectId === undefined && typeof key.project_id === "string") options.projectId = key.project_id;
  } else if (g.credentials_path !== undefined) options.keyFilename = g.credentials_path;
  else if (env.GOOGLE_APPLICATION_CREDENTIALS) options.keyFilename = env.GOOGLE_APPLICATION_CREDENTIALS;
  return { options, secrets };
}

export class GcsBackend implements ObjectBackend {
  readonly scheme = "gs";
  readonly bucket: string;
  readonly #prefix: string;
  readonly #storage: Storage;
  readonly #chunkSize: number;
  readonly #log: Logger;
  readonly #redact: Redact;

  constructor(opts: {
    storage: Storage;
    bucket: string;
    prefix: string;
    chunkSize: number;
    log: Logger;
    redact: Redact;
  }) {
    this.bucket = opts.bucket;
    this.#prefix = opts.prefix;
    this.#storage = opts.storage;
    this.#chunkSize = Math.max(CHUNK_QUANTUM, Math.floor(opts.chunkSize / CHUNK_QUANTUM) * CHUNK_QUANTUM);
    this.#log = opts.log;
    this.#redact = opts.redact;
  }

  key(relPath: string): string {
    return joinKey(this.#prefix, relPath);
  }

  async upload(opts: { stagedPath: string; size: number; key: string; meta: UploadMeta; signal?: AbortSignal }) {
    const { key, signal } = opts;
    checkKey(key);
    const where = `gs://${this.bucket}/${key}`;
    const staged = await StagedFile.open(opts.stagedPath, opts.size);
    // One chunk or less goes in one request (a multipart/related upload), read whole first so that a short read
    // fails before anything is sent: a resumable upload would take two, the session and its chunk.
    const single = opts.size <= this.#chunkSize;
    let session: string | undefined;
    try {
      const whole = single ? [await staged.whole()] : undefined;
      const sink = this.#storage
        .bucket(this.bucket)
        .file(key)
        .createWriteStream({
          resumable: !single,
          chunkSize: this.#chunkSize,
          // contentLength makes the store expect every byte: a stream cut short fails rather than commits. Either
          // way the library checks the object's CRC32C against the bytes it sent, and deletes an object that differs.
          metadata: { contentLength: opts.size, metadata: objectMetadata(opts.meta, "-") },
        })
        .on("uri", (uri: string) => {
          session = uri;
        });
      // Fresh chunks, not reused buffers: the library keeps the chunk it sent until the store confirms it. The
      // sink's backpressure holds the read-ahead to one chunk: three to four chunks are in memory at most.
      await pipeline(whole ?? staged.chunks(this.#chunkSize), sink, signal === undefined ? {} : { signal });
    } catch (err) {
      const failed = uploadError(err, "upload", where, signal, gcsFaults, this.#redact);
      const uri = session;
      // Cancelling the session (DELETE on its URI, which is its own credential) drops the bytes it holds.
      if (uri !== undefined)
        await abortQuietly(
          async (abortSignal) => {
            const res = await fetch(uri, { method: "DELETE", signal: abortSignal });
            await res.body?.cancel();
            // 499 is the protocol's answer to a cancel; a session already gone needs none.
            if (res.status !== 499 && res.status !== 404 && res.status !== 410 && !res.ok)
              throw Object.assign(new Error(`session cancel answered HTTP ${res.status}`), { code: res.status });
          },
          where,
          "the store expires the session within a week",
          this.#log,
          gcsFaults,
          this.#redact,
        );
      throw failed;
    } finally {
      await staged.close();
    }
  }
}

/** The backend of a gs:// destination. */
export function openGcs(
  cfg: ResolvedConfig,
  env: NodeJS.ProcessEnv,
  bucket: string,
  prefix: string,
  log: Logger,
): ObjectBackend {
  if (!BUCKET.test(bucket))
    throw new ConfigError(
      cfg.archive.gcs.bucket === undefined ? "archive.destination" : "archive.gcs.bucket",
      `${JSON.stringify(bucket)} is not a GCS bucket name (3-63 of a-z 0-9 . _ -, alphanumeric at both ends)`,
    );
  const { options, secrets } = gcsStorageOptions(cfg, env);
  return new GcsBackend({
    storage: new Storage(options),
    bucket,
    prefix,
    chunkSize: cfg.archive.multipart_chunk_size,
    log,
    redact: redactor(secrets),
  });
}
