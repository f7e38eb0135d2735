// Field extraction for expression routing: one validating pass over the record's bytes that decodes only the values
// at the routed paths. It accepts exactly what JSON.parse(buf.toString("utf8")) accepts and yields what that parse
// plus a path lookup would, without building the document: skipped keys and values are checked, never decoded.
// The scan is a loop over an explicit container stack, so depth costs memory, never call stack. Its shape (string
// loops inline, escapes handled in place, one table load to turn away most keys) was chosen by measurement in
// bench/route.bench.ts; small rearrangements cost V8 inlining and 10-25% there.

import { ConfigError } from "../errors.ts";
import { nestingDepthExceeds } from "./depth.ts";
import { WASM_MAX_KEY_BYTES, WASM_MAX_KEYS, WasmScanner, WasmVerdict } from "./scan-wasm.ts";

/** What the last scan found at a path: `out[i]` holds a value only for Scalar. */
export const FieldKind = {
  /** Missing, null, or reached through a non-object. */
  Absent: 0,
  /** A string, number or boolean; `out[i]` is its string form. */
  Scalar: 1,
  /** An object or array: present, but no segment can be made of it. */
  Container: 2,
} as const;
export type FieldKind = (typeof FieldKind)[keyof typeof FieldKind];

export const ScanResult = { Ok: 0, Invalid: 1, TooDeep: 2 } as const;
export type ScanResult = (typeof ScanResult)[keyof typeof ScanResult];

export interface Extractor {
  /** Which scan reads the records: WebAssembly for top-level plain keys, else JavaScript. */
  readonly engine: "wasm" | "js";
  readonly paths: readonly string[];
  /** Per path, the FieldKind found by the last scan that returned Ok; reused, not copied. */
  readonly kinds: Uint8Array;
  /**
   * False when JSON.parse would throw on the record. Otherwise `out[i]` is the value at `paths[i]` as
   * String(JSON.parse(...)) gives it, or undefined (see `kinds` to tell an object or array from a missing field).
   * `out` is left unspecified on false.
   */
  extract(buf: Uint8Array, out: (string | undefined)[]): boolean;
  /** As `extract`, but TooDeep exactly when nestingDepthExceeds(buf, maxDepth): the deep part is never scanned. */
  scan(buf: Uint8Array, out: (string | undefined)[], maxDepth: number): ScanResult;
  /**
   * As `scan`, over the record in buf[start, end), decoding nothing: a Scalar path's text is left at
   * buf[starts[i], ends[i]) (a string with its quotes), for `value` to decode. A router that has met the same text
   * before needs no string made.
   */
  scanSpans(buf: Uint8Array, start: number, end: number, maxDepth: number): ScanResult;
  readonly starts: Int32Array;
  readonly ends: Int32Array;
  /** Path i's value as `extract` gives it, from the span the last Ok `scanSpans` of `buf` left. */
  value(buf: Uint8Array, i: number): string;
}

interface PathNode {
  readonly key: string;
  /**
   * The key's bytes when it is printable ASCII with no quote or backslash: a record key with exactly these bytes is
   * this key, with no decoding. Null for any other key, which is compared decoded.
   */
  readonly keyBytes: Uint8Array | null;
  /** Indices of the paths ending at this node. */
  readonly terminals: number[];
  /** Indices of every path at or below this node: reset when its key repeats, since the last duplicate wins. */
  readonly subtree: number[];
  readonly children: PathNode[];
  /** Whether some child has no keyBytes, so a key unlike every plain child may still decode to it. */
  hasOddChild: boolean;
  /**
   * Set at (length mod 16) * 256 + first byte for each plain child: one load turns away most keys of an object
   * that has routed children, which matters most at the top level, where every key is tried.
   */
  readonly maybe: Uint8Array;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OBJECT = 1;
const ARRAY = 2;

/** The character a one-letter escape stands for; 0 where the letter is no escape (u is handled apart). */
const SIMPLE_ESCAPE = new Uint16Array(128);
for (const [letter, char] of [
  ['"', '"'],
  ["\\", "\\"],
  ["/", "/"],
  ["b", "\b"],
  ["f", "\f"],
  ["n", "\n"],
  ["r", "\r"],
  ["t", "\t"],
] as const) {
  SIMPLE_ESCAPE[letter.charCodeAt(0)] = char.charCodeAt(0);
}

/** Hex digit value, 255 for a non-digit. */
const HEX_VALUE = new Uint8Array(256).fill(255);
for (let d = 0; d < 16; d++) {
  HEX_VALUE["0123456789abcdef".charCodeAt(d)] = d;
  HEX_VALUE["0123456789ABCDEF".charCodeAt(d)] = d;
}

function isDigit(c: number | undefined): boolean {
  return c !== undefined && c >= 0x30 && c <= 0x39;
}

/** The index of the first non-space byte at or after p. Callers test `buf[p] <= 0x20` first: records are mostly compact. */
function skipSpace(buf: Uint8Array, p: number, n: number): number {
  while (p < n) {
    const c = buf[p];
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) break;
    p++;
  }
  return p;
}

function asBuffer(buf: Uint8Array): Buffer {
  return buf instanceof Buffer ? buf : Buffer.from(buf.buffer, buf.byteOffset, buf.byteLength);
}

/** The string between `start` and `end` (exclusive, quotes outside), unescaped as JSON.parse would. */
function decodeString(buf: Uint8Array, start: number, end: number, escaped: boolean): string {
  const b = asBuffer(buf);
  if (!escaped) return b.toString("utf8", start, end);
  // Raw runs are decoded whole: invalid UTF-8 there becomes U+FFFD exactly as in the whole-record decode, since an
  // ASCII byte always ends a malformed sequence. \u escapes are code units, so pairs and lone surrogates both hold.
  let out = "";
  let run = start;
  let p = start;
  while (p < end) {
    if (b[p] !== BACKSLASH) {
      p++;
      continue;
    }
    if (p > run) out += b.toString("utf8", run, p);
    const e = b[p + 1] as number;
    if (e === 0x75) {
      out += String.fromCharCode(
        ((HEX_VALUE[b[p + 2] as number] as number) << 12) |
          ((HEX_VALUE[b[p + 3] as number] as number) << 8) |
          ((HEX_VALUE[b[p + 4] as number] as number) << 4) |
          (HEX_VALUE[b[p + 5] as number] as number),
      );
      p += 6;
    } else {
      out += String.fromCharCode(SIMPLE_ESCAPE[e] as number);
      p += 2;
    }
    run = p;
  }
  if (end > run) out += b.toString("utf8", run, end);
  return out;
}

/** The text of a scalar at buf[start, end) (a string with its quotes) as String(JSON.parse(...)) gives it. */
function spanValue(buf: Uint8Array, start: number, end: number, escaped: boolean): string {
  const c = buf[start];
  if (c === QUOTE) return decodeString(buf, start + 1, end - 1, escaped);
  if (c === 0x2d || isDigit(c)) return numberText(buf, start, end);
  return c === 0x74 ? "true" : "false";
}

/**
 * A validating pass's verdict, as scanSpans returns it: a refusal before the depth limit may hide a deeper part
 * further on, so the plain depth scan decides, as it would have run first. Nesting cannot exceed the byte count, so
 * short records skip it.
 */
function depthVerdict(r: ScanResult, buf: Uint8Array, start: number, end: number, maxDepth: number): ScanResult {
  if (r === ScanResult.Invalid && maxDepth < end - start && nestingDepthExceeds(buf, maxDepth, start, end)) {
    return ScanResult.TooDeep;
  }
  return r;
}

function setScalar(node: PathNode, x: FieldExtractor, start: number, end: number): void {
  for (const i of node.terminals) {
    x.kinds[i] = FieldKind.Scalar;
    x.starts[i] = start;
    x.ends[i] = end;
  }
}

function bytesEqual(buf: Uint8Array, start: number, key: Uint8Array): boolean {
  for (let i = 0; i < key.length; i++) if (buf[start + i] !== key[i]) return false;
  return true;
}

function newNode(key: string): PathNode {
  const plain = /^[\x20-\x7e]*$/.test(key) && !/["\\]/.test(key);
  const keyBytes = plain ? new Uint8Array(Buffer.from(key, "latin1")) : null;
  return { key, keyBytes, terminals: [], subtree: [], children: [], hasOddChild: false, maybe: new Uint8Array(4096) };
}

/** What both scans share: the findings of the last scan, and reading values out of them. */
abstract class SpanExtractor implements Extractor {
  abstract readonly engine: "wasm" | "js";
  readonly paths: readonly string[];
  readonly kinds: Uint8Array;
  readonly starts: Int32Array;
  readonly ends: Int32Array;
  /** Per path, whether its string value holds an escape. */
  protected readonly escaped: Uint8Array;

  constructor(paths: readonly string[]) {
    this.paths = [...paths];
    this.kinds = new Uint8Array(paths.length);
    this.starts = new Int32Array(paths.length);
    this.ends = new Int32Array(paths.length);
    this.escaped = new Uint8Array(paths.length);
  }

  abstract scanSpans(buf: Uint8Array, start: number, end: number, maxDepth: number): ScanResult;

  extract(buf: Uint8Array, out: (string | undefined)[]): boolean {
    return this.scan(buf, out, Infinity) === ScanResult.Ok;
  }

  scan(buf: Uint8Array, out: (string | undefined)[], maxDepth: number): ScanResult {
    const r = this.scanSpans(buf, 0, buf.length, maxDepth);
    if (r === ScanResult.Ok) {
      for (let i = 0; i < this.paths.length; i++) {
        out[i] = this.kinds[i] === FieldKind.Scalar ? this.value(buf, i) : undefined;
      }
    }
    return r;
  }

  value(buf: Uint8Array, i: number): string {
    return spanValue(buf, this.starts[i] ?? 0, this.ends[i] ?? 0, this.escaped[i] === 1);
  }

  /** Whether path i's string value (as the last scan found it) holds an escape. */
  escapedAt(i: number): boolean {
    return this.escaped[i] === 1;
  }
}

class FieldExtractor extends SpanExtractor {
  readonly engine = "js";
  private readonly root: PathNode;
  /** The routed node of each active object, by depth. */
  private readonly activeNodes: PathNode[];
  /** Container type per open depth; grown on demand, kept across records. */
  private stack = new Uint8Array(64);
  /** Counts escapes met by `string`; a scan compares it before and after, so plain strings store nothing. */
  private escapes = 0;
  /** The routed child the last key named, set by `key`. */
  private matched: PathNode | null = null;
  /** `string` reads four bytes at once through a view of the buffer last scanned (a lane's batch: one per batch). */
  private viewOf: Uint8Array | undefined;
  private view: DataView = new DataView(new ArrayBuffer(0));

  constructor(paths: readonly string[]) {
    super(paths);
    this.root = newNode("");
    let longest = 0;
    paths.forEach((path, index) => {
      const keys = path.split(".");
      if (keys.some((k) => k === "")) {
        throw new ConfigError("routing.expression_fields", `"${path}" has an empty segment; use dot.separated.keys`);
      }
      longest = Math.max(longest, keys.length);
      let node = this.root;
      node.subtree.push(index);
      for (const key of keys) {
        let child = node.children.find((c) => c.key === key);
        if (child === undefined) {
          child = newNode(key);
          node.children.push(child);
          if (child.keyBytes === null) node.hasOddChild = true;
          else node.maybe[((child.keyBytes.length & 15) << 8) | (child.keyBytes[0] as number)] = 1;
        }
        child.subtree.push(index);
        node = child;
      }
      node.terminals.push(index);
    });
    this.activeNodes = new Array<PathNode>(longest + 1).fill(this.root);
  }

  scanSpans(buf: Uint8Array, start: number, end: number, maxDepth: number): ScanResult {
    return depthVerdict(this.parse(buf, start, end, maxDepth), buf, start, end, maxDepth);
  }

  /**
   * The validating pass. Until it fails, every byte read is a valid JSON prefix, where its depth equals the plain
   * depth scan's count; so TooDeep here is exact, and Invalid is left to `scan` to re-check.
   */
  private parse(buf: Uint8Array, begin: number, n: number, maxDepth: number): ScanResult {
    const kinds = this.kinds;
    let p = skipSpace(buf, begin, n);
    let depth = 0;
    // Active objects are the chain of depths 1..active whose keys lead along routed paths.
    let active = 0;
    // The routed node the next value belongs to; the root for the document itself.
    let pending: PathNode | null = this.root;
    for (;;) {
      // A value starts at p.
      const node = pending;
      pending = null;
      if (node !== null) {
        for (const i of node.subtree) kinds[i] = FieldKind.Absent;
      }
      if (p >= n) return ScanResult.Invalid;
      const c = buf[p];
      if (c === 0x7b || c === 0x5b) {
        if (++depth > maxDepth) return ScanResult.TooDeep;
        if (depth >= this.stack.length) this.growStack();
        this.stack[depth] = c === 0x7b ? OBJECT : ARRAY;
        if (node !== null) {
          for (const i of node.terminals) kinds[i] = FieldKind.Container;
          if (c === 0x7b && node.children.length > 0) {
            active = depth;
            this.activeNodes[depth] = node;
          }
        }
        if ((buf[++p] as number) <= 0x20) p = skipSpace(buf, p, n);
        if (buf[p] === (c === 0x7b ? 0x7d : 0x5d)) {
          if (depth === active) active--;
          depth--;
          p++;
        } else if (c === 0x7b) {
          p = this.key(buf, p, n, depth === active ? this.activeNodes[depth] : undefined);
          if (p < 0) return ScanResult.Invalid;
          pending = this.matched;
          continue;
        } else {
          continue;
        }
      } else if (c === QUOTE) {
        const start = p + 1;
        const escapes = this.escapes;
        p = this.string(buf, start, n);
        if (p < 0) return ScanResult.Invalid;
        if (node !== null && node.terminals.length > 0) {
          setScalar(node, this, start - 1, p);
          for (const i of node.terminals) this.escaped[i] = this.escapes !== escapes ? 1 : 0;
        }
      } else if (c === 0x2d || isDigit(c)) {
        const start = p;
        p = number(buf, p, n);
        if (p < 0) return ScanResult.Invalid;
        if (node !== null && node.terminals.length > 0) setScalar(node, this, start, p);
      } else {
        const word = c === 0x74 ? "true" : c === 0x66 ? "false" : c === 0x6e ? "null" : undefined;
        if (word === undefined || p + word.length > n) return ScanResult.Invalid;
        for (let k = 1; k < word.length; k++) if (buf[p + k] !== word.charCodeAt(k)) return ScanResult.Invalid;
        p += word.length;
        if (node !== null && c !== 0x6e) setScalar(node, this, p - word.length, p);
      }
      // After a value: separators and closers until the next value starts, or the document ends.
      for (;;) {
        if ((buf[p] as number) <= 0x20) p = skipSpace(buf, p, n);
        if (depth === 0) return p === n ? ScanResult.Ok : ScanResult.Invalid;
        if (p >= n) return ScanResult.Invalid;
        const d = buf[p];
        const open = this.stack[depth];
        if (d === 0x2c) {
          if ((buf[++p] as number) <= 0x20) p = skipSpace(buf, p, n);
          if (open === OBJECT) {
            p = this.key(buf, p, n, depth === active ? this.activeNodes[depth] : undefined);
            if (p < 0) return ScanResult.Invalid;
            pending = this.matched;
          }
          break;
        }
        if ((d === 0x7d && open === OBJECT) || (d === 0x5d && open === ARRAY)) {
          if (depth === active) active--;
          depth--;
          p++;
          continue;
        }
        return ScanResult.Invalid;
      }
    }
  }

  /**
   * Reads `"key"` and its colon at p; returns where the value starts, or -1. Sets `matched` to the child of `parent`
   * (the active object's node, if this object is active) that the key names.
   */
  private key(buf: Uint8Array, p: number, n: number, parent: PathNode | undefined): number {
    this.matched = null;
    if (p >= n || buf[p] !== QUOTE) return -1;
    const start = p + 1;
    const escapes = this.escapes;
    const end = this.string(buf, start, n);
    if (end < 0) return -1;
    if (parent !== undefined) {
      const escaped = this.escapes !== escapes;
      const head = (((end - 1 - start) & 15) << 8) | (buf[start] as number);
      if (parent.maybe[head] === 1 || escaped || parent.hasOddChild) {
        this.matched = this.match(parent, buf, start, end - 1, escaped);
      }
    }
    p = end;
    if ((buf[p] as number) <= 0x20) p = skipSpace(buf, p, n);
    if (p >= n || buf[p] !== 0x3a) return -1;
    return (buf[++p] as number) <= 0x20 ? skipSpace(buf, p, n) : p;
  }

  private match(parent: PathNode, buf: Uint8Array, start: number, end: number, escaped: boolean): PathNode | null {
    const len = end - start;
    for (const child of parent.children) {
      const kb = child.keyBytes;
      if (kb !== null && kb.length === len && bytesEqual(buf, start, kb)) return child;
    }
    // A plain child has no backslash, so bytes unlike it with no escape decode unlike it too; the rest (escapes, odd
    // keys) are rare, and compared as JSON.parse would decode them.
    if (!escaped && !parent.hasOddChild) return null;
    const key = decodeString(buf, start, end, escaped);
    for (const child of parent.children) if (child.key === key) return child;
    return null;
  }

  /** Scans a string body from `p` (after the opening quote); returns the index after the closing quote, or -1. */
  private string(buf: Uint8Array, p: number, n: number): number {
    if (buf !== this.viewOf) {
      this.viewOf = buf;
      this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    }
    const view = this.view;
    for (;;) {
      // Eight, then four bytes at a time while none is a quote, a backslash or under 0x20 (the bit tricks for "a byte
      // is zero" and "a byte is under n"; bytes from 0x80 up never match), then straight to the first that is: a
      // borrow only flags bytes above a true match, so the lowest flag is exact (landing short of it would only
      // rescan). String bodies are most of a record's bytes: four at a time took the scan of the bench's 680-byte
      // records from 1.1 to 0.8 us, eight a 400-byte body from 0.76 to 0.56 ns a byte, and the jump, which spares the
      // byte-wise walk to the closing quote of every short key and value, the bench's records from 2.2 to 1.6 us.
      let flags = 0;
      while (p + 8 <= n) {
        flags = stopBytes(view.getUint32(p, true));
        if (flags !== 0) break;
        flags = stopBytes(view.getUint32(p + 4, true));
        p += 4;
        if (flags !== 0) break;
        p += 4;
      }
      if (flags === 0 && p + 4 <= n) {
        flags = stopBytes(view.getUint32(p, true));
        if (flags === 0) p += 4;
      }
      if (flags !== 0) p += (31 - Math.clz32(flags & -flags)) >> 3;
      if (p >= n) return -1;
      const c = buf[p++] as number;
      if (c === QUOTE) return p;
      if (c >= 0x20 && c !== BACKSLASH) continue;
      if (c < 0x20 || p >= n) return -1;
      this.escapes++;
      const e = buf[p++] as number;
      if (e === 0x75) {
        if (p + 4 > n) return -1;
        // A non-digit is 255 and digits are below 16, so the union is 255 exactly when one is not a digit.
        const digits =
          (HEX_VALUE[buf[p] as number] as number) |
          (HEX_VALUE[buf[p + 1] as number] as number) |
          (HEX_VALUE[buf[p + 2] as number] as number) |
          (HEX_VALUE[buf[p + 3] as number] as number);
        if (digits === 255) return -1;
        p += 4;
      } else if (e >= 128 || SIMPLE_ESCAPE[e] === 0) {
        return -1;
      }
    }
  }

  private growStack(): void {
    const bigger = new Uint8Array(this.stack.length * 2);
    bigger.set(this.stack);
    this.stack = bigger;
  }
}

/**
 * Of the four bytes in `x` (little-endian), the high bit set for each that is a quote, a backslash or under 0x20, and
 * maybe for bytes above such a one (a borrow), never below: 0 when none is.
 */
function stopBytes(x: number): number {
  return ((x - 0x20202020) | ((x ^ 0x22222222) - 0x01010101) | ((x ^ 0x5c5c5c5c) - 0x01010101)) & ~x & 0x80808080;
}

/**
 * Scans a number at p, in a record ending at n; returns the index after it, or -1 when it breaks JSON's grammar.
 * Bytes past n are the next record's, never this number's digits.
 */
function number(buf: Uint8Array, p: number, n: number): number {
  if (p < n && buf[p] === 0x2d) p++;
  if (p < n && buf[p] === 0x30) p++;
  else if (p < n && isDigit(buf[p])) p = digits(buf, p, n);
  else return -1;
  if (p < n && buf[p] === 0x2e) {
    if (++p >= n || !isDigit(buf[p])) return -1;
    p = digits(buf, p, n);
  }
  if (p < n && (buf[p] === 0x65 || buf[p] === 0x45)) {
    p++;
    if (p < n && (buf[p] === 0x2b || buf[p] === 0x2d)) p++;
    if (p >= n || !isDigit(buf[p])) return -1;
    p = digits(buf, p, n);
  }
  return p;
}

function digits(buf: Uint8Array, p: number, n: number): number {
  while (p < n && isDigit(buf[p])) p++;
  return p;
}

/** String(JSON.parse(literal)): a short plain integer is already that, other forms go through Number. */
function numberText(buf: Uint8Array, start: number, end: number): string {
  const text = asBuffer(buf).toString("latin1", start, end);
  let plain = end - start <= 15 && !(buf[start] === 0x2d && buf[start + 1] === 0x30);
  for (let i = start; plain && i < end; i++) plain = buf[i] !== 0x2e && buf[i] !== 0x65 && buf[i] !== 0x45;
  return plain ? text : String(Number(text));
}

/**
 * The WebAssembly scan (scan-wasm.ts) behind the Extractor interface, for paths that are all top-level plain keys.
 * A record it leaves to JavaScript (a top-level key written with an escape, nesting past 65,535) is scanned by the
 * JavaScript extractor instead, and its findings copied over.
 */
class WasmExtractor extends SpanExtractor {
  readonly engine = "wasm";
  readonly #scanner: WasmScanner;
  /** Per path, its key's index in the scanner (a path named twice has one key). */
  readonly #keyOf: Int32Array;
  readonly #js: FieldExtractor;

  constructor(paths: readonly string[], keys: readonly string[], scanner: WasmScanner) {
    super(paths);
    this.#keyOf = Int32Array.from(paths, (p) => keys.indexOf(p));
    this.#scanner = scanner;
    this.#js = new FieldExtractor(paths);
  }

  scanSpans(buf: Uint8Array, start: number, end: number, maxDepth: number): ScanResult {
    const s = this.#scanner;
    const verdict = s.scan(buf, start, end, maxDepth);
    if (verdict === WasmVerdict.Unhandled) {
      const js = this.#js;
      const r = js.scanSpans(buf, start, end, maxDepth);
      for (let i = 0; i < this.paths.length; i++) {
        this.kinds[i] = js.kinds[i] ?? FieldKind.Absent;
        this.starts[i] = js.starts[i] ?? 0;
        this.ends[i] = js.ends[i] ?? 0;
        this.escaped[i] = js.escapedAt(i) ? 1 : 0;
      }
      return r;
    }
    if (verdict === WasmVerdict.Ok) {
      for (let i = 0; i < this.paths.length; i++) {
        const k = this.#keyOf[i] ?? 0;
        const kind = s.kind(k);
        this.kinds[i] = kind;
        if (kind !== FieldKind.Scalar) continue;
        this.starts[i] = s.start(k, start);
        this.ends[i] = s.end(k, start);
        this.escaped[i] = s.escaped(k) ? 1 : 0;
      }
    }
    return depthVerdict(verdict as ScanResult, buf, start, end, maxDepth);
  }
}

/** The keys of `paths` when every one is a top-level plain key the WebAssembly scan holds; else undefined. */
function wasmKeys(paths: readonly string[]): string[] | undefined {
  const keys = [...new Set(paths)];
  const plain = (k: string) => /^[\x20-\x7e]*$/.test(k) && !/["\\.]/.test(k) && k.length <= WASM_MAX_KEY_BYTES;
  return keys.length > 0 && keys.length <= WASM_MAX_KEYS && keys.every(plain) ? keys : undefined;
}

/**
 * Compiles dot-notation paths (`_org_id`, `tags.category`) into one reusable extractor: the WebAssembly scan where
 * every path is a top-level plain key, else (or with `engine` "js") the JavaScript one.
 */
export function compileExtractor(paths: readonly string[], engine?: "js"): Extractor {
  const keys = engine === "js" ? undefined : wasmKeys(paths);
  // Without WebAssembly SIMD (never on Node 24) the JavaScript scan gives the same answers, slower.
  const scanner = keys === undefined ? undefined : WasmScanner.open(keys.map((k) => Buffer.from(k, "latin1")));
  return keys !== undefined && scanner !== undefined
    ? new WasmExtractor(paths, keys, scanner)
    : new FieldExtractor(paths);
}
