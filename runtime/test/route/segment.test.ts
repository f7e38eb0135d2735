import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { encodeSegment, needsEncoding } from "../../src/route/segment.ts";

/** Inverse of the encoding, to check it is lossless (so two values never share a segment). */
function decodeSegment(seg: string): Buffer {
  if (seg === "=") return Buffer.alloc(0);
  const bytes: number[] = [];
  for (let i = 0; i < seg.length; i++) {
    if (seg[i] === "=") {
      bytes.push(parseInt(seg.slice(i + 1, i + 3), 16));
      i += 2;
    } else {
      bytes.push(seg.charCodeAt(i));
    }
  }
  return Buffer.from(bytes);
}

test("safe values pass through unchanged", () => {
  for (const v of ["acme", "cisco_ios.log", "A-Z_a-z.0-9", "...", ".a", "a..", "x".repeat(300)]) {
    assert.equal(encodeSegment(v), v);
    assert.equal(needsEncoding(v), false);
  }
});

test("hostile values cannot name another directory", () => {
  const cases: [string, string][] = [
    ["a/b", "a=2Fb"],
    ["../", "..=2F"],
    ["../../etc/passwd", "..=2F..=2Fetc=2Fpasswd"],
    ["/", "=2F"],
    ["/abs", "=2Fabs"],
    ["=", "=3D"],
    ["a=2Fb", "a=3D2Fb"],
    ["", "="],
    [".", "=2E"],
    ["..", "=2E=2E"],
    ["a b", "a=20b"],
    ["\\", "=5C"],
    ["\n", "=0A"],
    ["\u0000", "=00"],
    ["é", "=C3=A9"],
    ["日本", "=E6=97=A5=E6=9C=AC"],
    ["😀", "=F0=9F=98=80"],
    ["\u00ff", "=C3=BF"],
  ];
  for (const [value, expected] of cases) {
    assert.equal(encodeSegment(value), expected, JSON.stringify(value));
    assert.equal(needsEncoding(value), true, JSON.stringify(value));
  }
});

test("a lone surrogate encodes as the UTF-8 replacement character", () => {
  assert.equal(encodeSegment("a\ud800"), "a=EF=BF=BD");
});

test("300-byte values are encoded whole", () => {
  assert.equal(encodeSegment("/".repeat(300)), "=2F".repeat(300));
  const mixed = "ab/".repeat(100);
  assert.equal(encodeSegment(mixed), "ab=2F".repeat(100));
});

test("every byte 0-255 of the UTF-8 form: the safe set passes, every other byte is =XX upper-case", () => {
  const hex = (b: number) => "=" + b.toString(16).toUpperCase().padStart(2, "0");
  for (let b = 0; b < 128; b++) {
    const ch = String.fromCharCode(b);
    const expected = /[A-Za-z0-9_-]/.test(ch) ? ch : ch === "." ? "=2E" : hex(b);
    assert.equal(encodeSegment(ch), expected, `byte ${b}`);
  }
  // Above 0x7F a byte only occurs within a sequence; these code points put every byte UTF-8 can hold (0x80-0xBF,
  // 0xC2-0xF4) in the encoded form. C0, C1 and F5-FF never occur in UTF-8, so no string carries them.
  const points: number[] = [];
  for (let lead = 0xc2; lead <= 0xdf; lead++) points.push((lead & 0x1f) << 6);
  for (let lead = 0xe0; lead <= 0xef; lead++) points.push(Math.max((lead & 0x0f) << 12, 0x800));
  for (let lead = 0xf0; lead <= 0xf4; lead++) points.push(Math.max((lead & 0x07) << 18, 0x10000));
  for (let cont = 0x80; cont <= 0xbf; cont++) points.push(0x1000 | (cont & 0x3f));
  const value = points.map((cp) => String.fromCodePoint(cp)).join("");
  const bytes = Buffer.from(value, "utf8");
  for (let b = 0x80; b <= 0xf4; b++) if (b !== 0xc0 && b !== 0xc1) assert.ok(bytes.includes(b), `byte ${b} covered`);
  assert.equal(encodeSegment(value), [...bytes].map(hex).join(""));
});

test("encoding is lossless, slash-free and never yields . or .. (property)", () => {
  fc.assert(
    fc.property(fc.string({ unit: "binary", maxLength: 40 }), (v) => {
      const seg = encodeSegment(v);
      assert.match(seg, /^[A-Za-z0-9._=-]+$/);
      assert.ok(seg !== "." && seg !== "..");
      assert.deepEqual(decodeSegment(seg), Buffer.from(v, "utf8"));
    }),
    { numRuns: 5000 },
  );
});
