// Segment encoding: a topic or field value becomes one path segment that can never name another directory.
// Letters, digits, -, _ and . pass; every other UTF-8 byte is =XX (upper-case hex), = included, so the mapping is
// injective: two values never share a segment.

const SAFE = new Uint8Array(128);
for (let c = 0; c < 128; c++) SAFE[c] = /[A-Za-z0-9._-]/.test(String.fromCharCode(c)) ? 1 : 0;

const HEX = "0123456789ABCDEF";

/** True when `value` is not already its own segment: a byte outside the safe set, empty, `.` or `..`. */
export function needsEncoding(value: string): boolean {
  const n = value.length;
  if (n === 0 || value === "." || value === "..") return true;
  for (let i = 0; i < n; i++) {
    const c = value.charCodeAt(i);
    if (c >= 128 || SAFE[c] === 0) return true;
  }
  return false;
}

/** The path segment for `value`; returns `value` itself (no allocation) when it needs no encoding. */
export function encodeSegment(value: string): string {
  if (!needsEncoding(value)) return value;
  if (value === "") return "=";
  if (value === ".") return "=2E";
  if (value === "..") return "=2E=2E";
  let out = "";
  for (const b of Buffer.from(value, "utf8")) {
    out += b < 128 && SAFE[b] === 1 ? String.fromCharCode(b) : "=" + HEX.charAt(b >> 4) + HEX.charAt(b & 15);
  }
  return out;
}
