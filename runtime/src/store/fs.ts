// The file system helpers every store module shares: errno to ArchiverError (retryable or permanent, decided here
// once), directory fsync, the hidden name of a file in progress. It imports nothing of the store, so the store's
// modules all import it and none of them each other in a circle.
import fs from "node:fs";
import { basename, dirname, join } from "node:path";
import { ArchiverError, type ErrorKind } from "../errors.ts";

// Decided by errno once, here. A code not listed is retryable: retrying costs lag, dropping costs records.
const ERRNO_KIND: ReadonlyMap<string, ErrorKind> = new Map<string, ErrorKind>([
  ["ENOSPC", "retryable"],
  ["EIO", "retryable"],
  ["EAGAIN", "retryable"],
  ["EMFILE", "retryable"],
  ["ENFILE", "retryable"],
  ["EDQUOT", "retryable"],
  ["EBUSY", "retryable"],
  ["EACCES", "permanent"],
  ["EPERM", "permanent"],
  ["EROFS", "permanent"],
  ["ENAMETOOLONG", "permanent"],
  ["EISDIR", "permanent"],
  ["ENOTDIR", "permanent"],
  ["EINVAL", "permanent"],
  // A file the archiver created and is writing is gone (removed behind its back): no retry brings its frames back.
  ["ENOENT", "permanent"],
]);

/** The errno code of a file system error. */
export function errnoOf(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "code" in err && typeof err.code === "string"
    ? err.code
    : undefined;
}

/** Wraps a file system error as an ArchiverError whose code is the errno code (`fs_error` when it has none). */
export function fsError(err: unknown, op: string, path: string): ArchiverError {
  if (err instanceof ArchiverError) return err;
  const code = errnoOf(err);
  const reason = err instanceof Error ? err.message : String(err);
  const kind = (code === undefined ? undefined : ERRNO_KIND.get(code)) ?? "retryable";
  return new ArchiverError(code ?? "fs_error", `${op} ${path}: ${reason}`, kind, { cause: err });
}

/** The hidden name a file has until it completes; archive tools matching `*.zst` and the like pass it over. */
export function partialPath(path: string): string {
  return join(dirname(path), `.${basename(path)}.partial`);
}

/**
 * `s` made one flat string in place, for a name kept as long as its file. Built by concatenation, a path is a tree of
 * its pieces (a rope) until something reads it whole: 17,000 open files' hidden names were 224,000 pieces, 13 MiB of a
 * 100,000-destination heap. Reading it as a number is what flattens it, in V8; the value is left as it was.
 */
export function flat(s: string): string {
  Number(s);
  return s;
}

/**
 * fsync of a directory: makes the entries created in it durable. On descriptors, not a FileHandle: a drain syncs
 * thousands of directories at once, and 5,101 took 90-98 ms this way against 130-165 ms through FileHandles.
 */
export function syncDir(dir: string): Promise<void> {
  return new Promise((resolve, reject) =>
    fs.open(dir, "r", (err, fd) => {
      if (err !== null) return reject(err);
      // The sync's error is the one to report; the descriptor is closed either way.
      fs.fsync(fd, (syncErr) =>
        fs.close(fd, (closeErr) => ((syncErr ?? closeErr) ? reject(syncErr ?? closeErr) : resolve())),
      );
    }),
  );
}
