// Exponential backoff with full jitter between a floor and a ceiling: retries spread out after an outage ends, so
// every waiting file does not hit the store in the same instant.

export interface Backoff {
  /** The shortest wait between attempts. */
  readonly minMs: number;
  /** The longest wait between attempts. */
  readonly maxMs: number;
}

/** Object-store uploads: from 0.5 s up to 60 s between attempts. */
export const UPLOAD_BACKOFF: Backoff = { minMs: 500, maxMs: 60_000 };

/**
 * The wait after `failures` failed attempts (1 after the first): uniform over [minMs, ceiling], the ceiling
 * doubling from 2 × minMs with each failure until it reaches maxMs.
 */
export function backoffDelay(failures: number, backoff: Backoff, random: () => number = Math.random): number {
  const ceiling = Math.min(backoff.maxMs, backoff.minMs * 2 ** failures);
  return backoff.minMs + random() * (ceiling - backoff.minMs);
}
