// Nesting-depth scan, run before any parse: a record nested past the limit is refused without being parsed.
// A flat loop with a counter, so its own cost is the same for 10 levels or 10 million.

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/**
 * True as soon as `{`/`[` nesting in buf[start, end) outside strings goes past `limit`. Brackets inside strings do not count and `\"`
 * does not end a string. Malformed input is not judged here, only counted: the parse that follows refuses it.
 */
export function nestingDepthExceeds(buf: Uint8Array, limit: number, start = 0, end = buf.length): boolean {
  const n = end;
  let depth = 0;
  let i = start;
  while (i < n) {
    const c = buf[i++];
    if (c === QUOTE) {
      while (i < n) {
        const s = buf[i++];
        if (s === QUOTE) break;
        if (s === BACKSLASH) i++;
      }
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > limit) return true;
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
    }
  }
  return false;
}
