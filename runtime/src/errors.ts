// Every error the archiver raises says, once and where it is first seen, whether retrying can clear it.
// Retryable costs lag; permanent costs a dead letter or a counted drop. Decided by code, never by message text.

export type ErrorKind = "retryable" | "permanent";

export class ArchiverError extends Error {
  readonly code: string;
  readonly kind: ErrorKind;

  constructor(code: string, message: string, kind: ErrorKind, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.kind = kind;
  }

  get retryable(): boolean {
    return this.kind === "retryable";
  }
}

/** A configuration the archiver refuses to boot with. The message names the key and the fix. */
export class ConfigError extends ArchiverError {
  readonly key: string;

  constructor(key: string, message: string) {
    super("config_invalid", `${key}: ${message}`, "permanent");
    this.key = key;
  }
}

/** True when `err` is known to clear on retry; unknown errors are treated as retryable, since dropping costs records. */
export function isRetryable(err: unknown): boolean {
  return !(err instanceof ArchiverError) || err.retryable;
}
