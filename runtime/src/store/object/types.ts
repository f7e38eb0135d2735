// An object store seen from the staging store: a destination's bucket and prefix, and the upload of one staged
// file, whole: in one request when it is one part's size or less, else as one multipart (S3, MinIO), resumable (GCS)
// or block (Azure) upload.
import { ArchiverError } from "../../errors.ts";

/** What the object records about its file, as object metadata. Times are epoch milliseconds. */
export interface UploadMeta {
  records: number;
  codec: string;
  openedAt: number;
  closedAt: number;
}

export interface ObjectBackend {
  readonly scheme: "s3" | "minio" | "gs" | "az";
  /** bucket or container */
  readonly bucket: string;
  /**
   * The object key for an archive path relative to the destination (the destination URL's prefix applied, no
   * leading slash). It does not judge the key: checkKey does, before anything is staged.
   */
  key(relPath: string): string;
  /**
   * Uploads the staged file's first `size` bytes whole as ONE upload: a single request carrying the whole file when
   * it is at most one part (the chunk size), else parts of the chunk size read from the file while earlier parts
   * upload, at most PARTS_IN_FLIGHT at once. A failed attempt aborts its upload (an abort that fails is logged,
   * never thrown over the original error) and throws an ArchiverError that is permanent only for a
   * refusal of the object itself, or with code STAGED_UNREADABLE when the staged copy cannot be read back. Each
   * call is a fresh upload, signed afresh.
   */
  upload(opts: {
    stagedPath: string;
    size: number;
    key: string;
    meta: UploadMeta;
    signal?: AbortSignal;
  }): Promise<void>;
}

/** The longest key every backend takes: S3's and GCS's limit in UTF-8 bytes; Azure's is 1024 characters. */
export const MAX_KEY_BYTES = 1024;

/**
 * Code of an upload that failed because the staged copy cannot be read back -- missing, unreadable by permission,
 * shorter than the bytes staged. Permanent, since no retry can read it: the staging store quarantines the file.
 */
export const STAGED_UNREADABLE = "staged_unreadable";

/** Code of an upload stopped by its caller's AbortSignal; retryable, the staged file is untouched. */
export const UPLOAD_ABORTED = "upload_aborted";

const shown = (key: string) => JSON.stringify(key.length > 80 ? `${key.slice(0, 80)}...` : key);

// Control characters: GCS refuses CR and LF, and S3's XML listings cannot carry most of the rest.
// eslint-disable-next-line no-control-regex
const CONTROL = /[\u0000-\u001f\u007f]/;

/**
 * Refuses, for good, a key no backend would store as the object it names: over MAX_KEY_BYTES (`key_too_long`),
 * or empty, absolute, not valid UTF-8, holding a control character or an empty, `.` or `..` segment
 * (`invalid_path`). Called before anything is staged, and again by each upload.
 */
export function checkKey(key: string): void {
  const bytes = Buffer.byteLength(key, "utf8");
  if (bytes > MAX_KEY_BYTES)
    throw new ArchiverError(
      "key_too_long",
      `object key ${shown(key)} is ${bytes} bytes, over the ${MAX_KEY_BYTES}-byte limit`,
      "permanent",
    );
  const invalid = (why: string) =>
    new ArchiverError("invalid_path", `invalid object key ${shown(key)}: ${why}`, "permanent");
  if (key === "") throw invalid("empty");
  if (!key.isWellFormed()) throw invalid("not valid UTF-8 (a lone surrogate)");
  if (CONTROL.test(key)) throw invalid("a control character");
  if (key.startsWith("/")) throw invalid("absolute");
  for (const seg of key.split("/"))
    if (seg === "" || seg === "." || seg === "..") throw invalid("empty, . or .. segment");
}

/** The key of `relPath` under a destination's prefix ("" for the bucket's root). */
export function joinKey(prefix: string, relPath: string): string {
  return prefix === "" ? relPath : `${prefix}/${relPath}`;
}

/** The object metadata every backend records, its names joined with `sep` (Azure's names must be identifiers). */
export function objectMetadata(meta: UploadMeta, sep: "-" | "_"): Record<string, string> {
  return {
    records: String(meta.records),
    codec: meta.codec,
    [`opened${sep}at`]: new Date(meta.openedAt).toISOString(),
    [`closed${sep}at`]: new Date(meta.closedAt).toISOString(),
  };
}
