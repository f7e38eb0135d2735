// The route stage: each record's destination key, the topic and then each expression field's value as encoded path
// segments joined by "/". Per record it allocates only the matched values and the key; outcomes are tallied in
// plain counters that the pipeline drains into metrics.

import { ConfigError } from "../errors.ts";
import { compileExtractor, FieldKind, ScanResult, type Extractor } from "./extract.ts";
import { encodeSegment, needsEncoding } from "./segment.ts";

/** Returned for a record nested past maxDepth: never parsed, for the caller to dead-letter or drop and count. */
export const TOO_DEEP: unique symbol = Symbol("too_deep");

export interface RouterOptions {
  mode: "expression" | "topic";
  /** Dot-notation paths, in segment order; used in expression mode. */
  fields: string[];
  defaultSegment: string;
  /** Nesting past this is refused before any parse (the seed's 64). */
  maxDepth?: number;
}

export interface RoutingStats {
  /** Records that took the default segment, by field path; only fields with a count. */
  fallbacks: Map<string, number>;
  /** Records routed under their topic alone: invalid JSON, or an object or array at a field. */
  errors: number;
  tooDeep: number;
}

export interface Router {
  /** The destination key, with no leading or trailing slash; TOO_DEEP for a record nested past maxDepth. */
  route(topic: string | undefined, value: Uint8Array): string | typeof TOO_DEEP;
  /** The counts since the last drain, which resets them. */
  drainStats(): RoutingStats;
}

export const DEFAULT_MAX_DEPTH = 64;
/** Encoded values kept per generation; hot values survive a turnover by moving to the new generation. */
const SEGMENT_CACHE_SIZE = 4096;

/** Values are blank when empty or only whitespace (as String.prototype.trim sees it). */
function isBlank(value: string): boolean {
  if (value.length === 0) return true;
  const first = value.charCodeAt(0);
  // Visible ASCII first: the common case, decided without a regex.
  if (first > 0x20 && first < 0x7f) return false;
  return /^\s*$/.test(value);
}

class SegmentCache {
  private current = new Map<string, string>();
  private previous = new Map<string, string>();

  encode(value: string): string {
    if (!needsEncoding(value)) return value;
    let seg = this.current.get(value);
    if (seg !== undefined) return seg;
    seg = this.previous.get(value) ?? encodeSegment(value);
    if (this.current.size >= SEGMENT_CACHE_SIZE) {
      this.previous = this.current;
      this.current = new Map();
    }
    this.current.set(value, seg);
    return seg;
  }
}

class RecordRouter implements Router {
  private readonly expression: boolean;
  private readonly fields: readonly string[];
  private readonly maxDepth: number;
  private readonly defaultSeg: string;
  private readonly extractor: Extractor;
  private readonly values: (string | undefined)[];
  private readonly cache = new SegmentCache();
  private lastTopic: string | undefined = undefined;
  private lastTopicSeg = "";
  private readonly fallbacks: Float64Array;
  private errors = 0;
  private tooDeep = 0;

  constructor(opts: RouterOptions) {
    this.expression = opts.mode === "expression";
    this.fields = [...opts.fields];
    this.maxDepth = opts.maxDepth ?? DEFAULT_MAX_DEPTH;
    if (this.expression && this.fields.length === 0) {
      throw new ConfigError("routing.expression_fields", "expression mode needs at least one field");
    }
    this.defaultSeg = encodeSegment(opts.defaultSegment);
    this.extractor = compileExtractor(this.expression ? this.fields : []);
    this.values = new Array<string | undefined>(this.fields.length).fill(undefined);
    this.fallbacks = new Float64Array(this.fields.length);
  }

  route(topic: string | undefined, value: Uint8Array): string | typeof TOO_DEEP {
    const head = topic === undefined ? undefined : this.topicSegment(topic);
    if (!this.expression) return head ?? this.defaultSeg;
    const values = this.values;
    // The depth check and the extraction share one pass, with the verdicts of a depth scan run first: past maxDepth
    // the scan stops where the limit is crossed, and nothing deeper is read.
    const result = this.extractor.scan(value, values, this.maxDepth);
    if (result === ScanResult.TooDeep) {
      this.tooDeep++;
      return TOO_DEEP;
    }
    if (result === ScanResult.Invalid || this.extractor.kinds.includes(FieldKind.Container)) {
      this.errors++;
      return head ?? this.defaultSeg;
    }
    let key = head;
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      let seg: string;
      if (v === undefined || isBlank(v)) {
        this.fallbacks[i] = (this.fallbacks[i] ?? 0) + 1;
        seg = this.defaultSeg;
      } else {
        seg = this.cache.encode(v);
      }
      key = key === undefined ? seg : key + "/" + seg;
    }
    // Fields are never empty in expression mode, so the key is set.
    return key as string;
  }

  drainStats(): RoutingStats {
    const fallbacks = new Map<string, number>();
    this.fields.forEach((field, i) => {
      const n = this.fallbacks[i] ?? 0;
      if (n > 0) fallbacks.set(field, (fallbacks.get(field) ?? 0) + n);
    });
    const stats = { fallbacks, errors: this.errors, tooDeep: this.tooDeep };
    this.fallbacks.fill(0);
    this.errors = 0;
    this.tooDeep = 0;
    return stats;
  }

  private topicSegment(topic: string): string {
    if (topic !== this.lastTopic) {
      this.lastTopic = topic;
      this.lastTopicSeg = this.cache.encode(topic);
    }
    return this.lastTopicSeg;
  }
}

export function createRouter(opts: RouterOptions): Router {
  return new RecordRouter(opts);
}
