// A store's answer as an ArchiverError, decided once, here, by the store's error code: permanent only for the
// backend's own list of refusals of the object itself. The store's error is not kept as the cause, since SDK errors
// carry requests (headers, signed URLs) that a log of the error would print; its code, status and a redacted
// message are copied instead.
import type { Logger } from "pino";
import { ArchiverError } from "../../errors.ts";
import { UPLOAD_ABORTED } from "./types.ts";

/** What a backend reads off its SDK's error. */
export interface StoreFault {
  /** The store's error code (NoSuchBucket, ContainerNotFound), a network errno (ECONNREFUSED), else http_<status>. */
  readonly code: string;
  readonly status: number | undefined;
  readonly message: string;
}

/** Replaces every secret the backend was given, and every URL's query (a SAS or a session id), in a text. */
export type Redact = (text: string) => string;

export function redactor(secrets: readonly (string | undefined)[]): Redact {
  const known = secrets.filter((s): s is string => s !== undefined && s !== "");
  return (text) => {
    let out = text.replace(/(\bhttps?:\/\/[^\s?#"']*)\?[^\s#"']*/g, "$1?<redacted>");
    for (const s of known) out = out.split(s).join("<redacted>");
    return out;
  };
}

/** The code, HTTP status and message of an error no backend recognised (a plain Error, say). */
export function genericFault(err: unknown): StoreFault {
  const code = typeof err === "object" && err !== null && "code" in err ? err.code : undefined;
  return {
    code: typeof code === "string" && code !== "" ? code : "store_error",
    status: undefined,
    message: err instanceof Error ? err.message : String(err),
  };
}

export interface FaultReader {
  fault(err: unknown): StoreFault;
  permanent(fault: StoreFault): boolean;
}

/**
 * The ArchiverError for a failed step `op` of the upload of `where` (scheme://bucket/key). An ArchiverError (the
 * staged copy's) passes as it is; a caller's abort is UPLOAD_ABORTED, whatever the SDK made of it.
 */
export function uploadError(
  err: unknown,
  op: string,
  where: string,
  signal: AbortSignal | undefined,
  reader: FaultReader,
  redact: Redact,
): ArchiverError {
  if (err instanceof ArchiverError) return err;
  if (signal?.aborted) return new ArchiverError(UPLOAD_ABORTED, `${op} ${where}: aborted`, "retryable");
  const fault = reader.fault(err);
  const status = fault.status === undefined ? "" : ` (HTTP ${fault.status})`;
  return new ArchiverError(
    fault.code,
    redact(`${op} ${where}: ${fault.code}${status}: ${fault.message}`),
    reader.permanent(fault) ? "permanent" : "retryable",
  );
}

/** Time a failed attempt gives its abort: a store that is down must not hold the retry behind it. */
export const ABORT_TIMEOUT_MS = 10_000;

/** Runs the abort of a failed attempt; its own failure is logged, never thrown over the attempt's. */
export async function abortQuietly(
  abort: (signal: AbortSignal) => Promise<unknown>,
  where: string,
  what: string,
  log: Logger,
  reader: FaultReader,
  redact: Redact,
): Promise<void> {
  try {
    await abort(AbortSignal.timeout(ABORT_TIMEOUT_MS));
  } catch (err) {
    const fault = reader.fault(err);
    log.warn(
      { object: where, code: fault.code, status: fault.status, reason: redact(fault.message) },
      `aborting the failed upload failed; ${what}`,
    );
  }
}
