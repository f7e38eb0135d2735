// A codec failure is decided here, once, by what was being done: a batch the codec will not compress fails the same
// way on every retry, so it is dead-lettered; a block that will not decode means the file cannot be read back.

import { ArchiverError } from "../errors.ts";
import type { CodecName } from "./index.ts";

const reason = (cause: unknown): string => (cause instanceof Error ? cause.message : String(cause));

export function refused(codec: CodecName, cause: unknown): ArchiverError {
  return new ArchiverError("codec_refused", `${codec} refused the batch: ${reason(cause)}`, "permanent", { cause });
}

export function corrupt(codec: CodecName, cause: unknown): ArchiverError {
  return new ArchiverError("codec_corrupt", `${codec} block does not decode: ${reason(cause)}`, "permanent", { cause });
}
