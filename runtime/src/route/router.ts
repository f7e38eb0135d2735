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

/**
 * A number the caller keeps with a key (a group's index), under a stamp of its own: what it kept is its own while
 * `stamp` is still the stamp it wrote. Two marks may stand for one key string.
 */
export interface KeyMark {
  stamp: number;
  value: number;
}

export interface Router {
  /**
   * The destination key of the record in value[start, end) (all of it by default), with no leading or trailing
   * slash; TOO_DEEP for a record nested past maxDepth. Records with the same topic and the same text at the fields
   * get the same string, not an equal one.
   */
  route(topic: string | undefined, value: Uint8Array, start?: number, end?: number): string | typeof TOO_DEEP;
  /**
   * The mark of the key the last route() returned, when it was a key made before from the same text: a caller
   * finds what it keeps per key there rather than in a map by the key (a map lookup a record, on the lanes).
   */
  readonly last: KeyMark | undefined;
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

/** A key made before, by the text of the fields it was made from. */
interface KnownKey extends KeyMark {
  readonly topic: string | undefined;
  readonly hash: number;
  /** The fields' text, each followed by FIELD_END; an absent field is ABSENT alone. */
  readonly text: Uint8Array;
  readonly key: string;
  /** Bit i set: field i took the default segment. */
  readonly fallbacks: number;
  readonly next: KnownKey | undefined;
}

// Neither byte can be in a field's text: JSON forbids raw control characters in strings, numbers and literals.
const ABSENT = 0x00;
const FIELD_END = 0x01;
const KNOWN_KEYS = 16_384;
/** Slots of the table of known keys, by hash: twice the keys it holds, so chains stay short. */
const KNOWN_SLOTS = 2 * KNOWN_KEYS;
/** Fields past this many are not remembered by text (the fallback mask is an int). */
const KNOWN_FIELDS = 30;

/**
 * Keys by the text of their fields: a record whose fields read as an earlier record's takes that record's key as it
 * is, with no string decoded, joined or hashed. Decoding each field and joining the key cost the route lane more
 * than the parse of the rest of the record; and the same string each time is what the caller's map hashes once.
 */
class KnownKeys {
  /** Chains by the hash's low bits: an array read, where a Map by the hash was a lookup a record. */
  #slots = new Array<KnownKey | undefined>(KNOWN_SLOTS).fill(undefined);
  #count = 0;

  /** The key of these fields' text, or undefined the first time. */
  find(topic: string | undefined, buf: Uint8Array, x: Extractor, hash: number): KnownKey | undefined {
    for (let k = this.#slots[hash & (KNOWN_SLOTS - 1)]; k !== undefined; k = k.next) {
      if (k.hash === hash && k.topic === topic && sameText(k.text, buf, x)) return k;
    }
    return undefined;
  }

  remember(
    topic: string | undefined,
    buf: Uint8Array,
    x: Extractor,
    hash: number,
    key: string,
    fallbacks: number,
  ): KnownKey {
    // A full table starts again: on more destinations than it holds, the keys still in use come back on their own.
    if (this.#count >= KNOWN_KEYS) {
      this.#slots.fill(undefined);
      this.#count = 0;
    }
    let size = 0;
    for (let i = 0; i < x.kinds.length; i++) {
      size += x.kinds[i] === FieldKind.Scalar ? (x.ends[i] ?? 0) - (x.starts[i] ?? 0) + 1 : 1;
    }
    const text = new Uint8Array(size);
    let at = 0;
    for (let i = 0; i < x.kinds.length; i++) {
      if (x.kinds[i] !== FieldKind.Scalar) {
        text[at++] = ABSENT;
        continue;
      }
      const start = x.starts[i] ?? 0;
      const end = x.ends[i] ?? 0;
      text.set(buf.subarray(start, end), at);
      at += end - start;
      text[at++] = FIELD_END;
    }
    const slot = hash & (KNOWN_SLOTS - 1);
    const known: KnownKey = { stamp: -1, value: 0, topic, hash, text, key, fallbacks, next: this.#slots[slot] };
    this.#slots[slot] = known;
    this.#count++;
    return known;
  }
}

/** FNV-1a over the fields' text as KnownKey.text lays it out. */
function textHash(buf: Uint8Array, x: Extractor): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < x.kinds.length; i++) {
    if (x.kinds[i] === FieldKind.Scalar) {
      const end = x.ends[i] ?? 0;
      for (let p = x.starts[i] ?? 0; p < end; p++) h = Math.imul(h ^ (buf[p] as number), 0x01000193);
      h = Math.imul(h ^ FIELD_END, 0x01000193);
    } else h = Math.imul(h ^ ABSENT, 0x01000193);
  }
  return h;
}

/** Whether a field holds an object or array: a loop, where TypedArray#includes is a call out of compiled code. */
function hasContainer(kinds: Uint8Array): boolean {
  for (let i = 0; i < kinds.length; i++) if (kinds[i] === FieldKind.Container) return true;
  return false;
}

function sameText(text: Uint8Array, buf: Uint8Array, x: Extractor): boolean {
  let at = 0;
  for (let i = 0; i < x.kinds.length; i++) {
    if (x.kinds[i] !== FieldKind.Scalar) {
      if (text[at++] !== ABSENT) return false;
      continue;
    }
    const end = x.ends[i] ?? 0;
    for (let p = x.starts[i] ?? 0; p < end; p++) if (text[at++] !== buf[p]) return false;
    if (text[at++] !== FIELD_END) return false;
  }
  return at === text.length;
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
  private readonly cache = new SegmentCache();
  private readonly known = new KnownKeys();
  last: KnownKey | undefined = undefined;
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
    this.fallbacks = new Float64Array(this.fields.length);
  }

  route(topic: string | undefined, value: Uint8Array, start = 0, end = value.length): string | typeof TOO_DEEP {
    this.last = undefined;
    const head = topic === undefined ? undefined : this.topicSegment(topic);
    if (!this.expression) return head ?? this.defaultSeg;
    const x = this.extractor;
    // The depth check and the extraction share one pass, with the verdicts of a depth scan run first: past maxDepth
    // the scan stops where the limit is crossed, and nothing deeper is read.
    const result = x.scanSpans(value, start, end, this.maxDepth);
    if (result === ScanResult.TooDeep) {
      this.tooDeep++;
      return TOO_DEEP;
    }
    if (result === ScanResult.Invalid || hasContainer(x.kinds)) {
      this.errors++;
      return head ?? this.defaultSeg;
    }
    const remembered = this.fields.length <= KNOWN_FIELDS;
    const hash = remembered ? textHash(value, x) : 0;
    const known = remembered ? this.known.find(topic, value, x, hash) : undefined;
    if (known !== undefined) {
      for (let m = known.fallbacks, i = 0; m !== 0; m >>>= 1, i++) {
        if ((m & 1) === 1) this.fallbacks[i] = (this.fallbacks[i] ?? 0) + 1;
      }
      this.last = known;
      return known.key;
    }
    let key = head;
    let fallbacks = 0;
    for (let i = 0; i < this.fields.length; i++) {
      const v = x.kinds[i] === FieldKind.Scalar ? x.value(value, i) : undefined;
      let seg: string;
      if (v === undefined || isBlank(v)) {
        this.fallbacks[i] = (this.fallbacks[i] ?? 0) + 1;
        fallbacks |= 1 << i;
        seg = this.defaultSeg;
      } else {
        seg = this.cache.encode(v);
      }
      key = key === undefined ? seg : key + "/" + seg;
    }
    // Fields are never empty in expression mode, so the key is set.
    if (remembered) this.last = this.known.remember(topic, value, x, hash, key as string, fallbacks);
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
