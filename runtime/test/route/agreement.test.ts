// Property tests: the byte-scan extractor and the router must agree with references built on JSON.parse, for valid
// documents (routed keys at many depths, decoys, duplicates, escapes, every number form) and their broken mutations.
import assert from "node:assert/strict";
import { test } from "node:test";
import fc from "fast-check";
import { nestingDepthExceeds } from "../../src/route/depth.ts";
import { compileExtractor, FieldKind } from "../../src/route/extract.ts";
import { createRouter, TOO_DEEP } from "../../src/route/router.ts";
import { encodeSegment } from "../../src/route/segment.ts";
import { Lz4Frames } from "../../src/transport/lz4-frame.ts";
import { lz4Decoded } from "../../../e2e/support/batches.ts";

// ROUTE_FUZZ_RUNS raises the count for a longer soak; the default keeps the suite fast.
const RUNS = Number(process.env.ROUTE_FUZZ_RUNS ?? 40_000);

// ---- documents: a tree that keeps duplicate keys, serialized with random spacing and escaping ----

type Node =
  | { kind: "str"; v: string }
  | { kind: "num"; v: string }
  | { kind: "lit"; v: "true" | "false" | "null" }
  | { kind: "obj"; v: [string, Node][] }
  | { kind: "arr"; v: Node[] };

const PATHS = ["_org_id", "event_type", "tags.category", "tags", "a.b.c", "a.b", "ключ", 'q"t', "__proto__.x"];

const routedKey = fc.constantFrom("_org_id", "event_type", "tags", "category", "a", "b", "c", "ключ", 'q"t');
const otherKey = fc.oneof(
  fc.constantFrom("data", "__proto__", "x", "_org_idx", "_org_i", "", "tag", "Tags"),
  fc.string({ maxLength: 6, unit: "binary" }),
);
const key = fc.oneof({ weight: 3, arbitrary: routedKey }, { weight: 2, arbitrary: otherKey });

/** Code units that stress escaping and decoding: controls, quotes, lone surrogates, non-BMP, unicode spaces. */
const trickyUnit = fc.constantFrom(
  "\u0000",
  "\u001f",
  "\n",
  "\t",
  '"',
  "\\",
  "/",
  "\u007f",
  "\u0080",
  "é",
  "\u2028",
  "\u00a0",
  "\ufeff",
  "\u3000",
  "\ud800",
  "\udfff",
  "\ud83d\ude00",
  "\uffff",
  " ",
  ".",
  "=",
);
const text = fc.oneof(
  fc.string({ maxLength: 12 }),
  fc.string({ maxLength: 8, unit: "binary" }),
  fc.string({ maxLength: 8, unit: fc.oneof(trickyUnit, fc.string({ minLength: 1, maxLength: 1 })) }),
  fc.constantFrom("", " ", "  \t", "acme", "login", "security", ".", "..", "a/b", "\u00a0\u2028"),
);

const digitsArb = (min: number, max: number) =>
  fc.string({ minLength: min, maxLength: max, unit: fc.constantFrom(..."0123456789") });
const numberLiteral = fc.oneof(
  fc.double({ noNaN: true, noDefaultInfinity: true }).map(String),
  fc.integer().map(String),
  fc
    .tuple(
      fc.boolean(),
      fc.oneof(
        fc.constant("0"),
        fc.tuple(fc.constantFrom(..."123456789"), digitsArb(0, 25)).map(([a, b]) => a + b),
      ),
      fc.option(digitsArb(1, 20)),
      fc.option(fc.tuple(fc.constantFrom("e", "E"), fc.constantFrom("", "+", "-"), digitsArb(1, 4))),
    )
    .map(([neg, int, frac, exp]) => (neg ? "-" : "") + int + (frac ? "." + frac : "") + (exp ? exp.join("") : "")),
  fc.constantFrom("-0", "0", "1e400", "-1e400", "1E-400", "-0.0e+0", "9007199254740993", "123456789012345"),
  fc.constantFrom("1234567890123456", "-123456789012345", "-1234567890123456", "0e0", "1.50", "100"),
);

const { node } = fc.letrec<{ node: Node; obj: Node; arr: Node }>((tie) => ({
  node: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    text.map((v): Node => ({ kind: "str", v })),
    numberLiteral.map((v): Node => ({ kind: "num", v })),
    fc.constantFrom("true", "false", "null").map((v): Node => ({ kind: "lit", v })),
    tie("obj"),
    tie("arr"),
  ),
  obj: fc.array(fc.tuple(key, tie("node")), { maxLength: 6 }).map((v): Node => ({ kind: "obj", v })),
  arr: fc.array(tie("node"), { maxLength: 4 }).map((v): Node => ({ kind: "arr", v })),
}));

/** Places `leaf` at `keys` inside an object: into an existing object of that key, or as a new entry (often a duplicate). */
function implant(n: Node, keys: string[], leaf: Node, choice: number): Node {
  const [k, ...rest] = keys;
  if (n.kind !== "obj" || k === undefined) return n;
  const entries = n.v.slice();
  const existing = entries.findLastIndex(([ek, ev]) => ek === k && ev.kind === "obj");
  const into = entries[existing];
  if (rest.length > 0 && into !== undefined && choice % 2 === 0) {
    entries[existing] = [k, implant(into[1], rest, leaf, choice >>> 1)];
  } else {
    const value = rest.reduceRight((acc: Node, rk): Node => ({ kind: "obj", v: [[rk, acc]] }), leaf);
    entries.splice(choice % (entries.length + 1), 0, [k, value]);
  }
  return { kind: "obj", v: entries };
}

const implanted = fc
  .tuple(
    node.map((n): Node => (n.kind === "obj" ? n : { kind: "obj", v: [["data", n]] })),
    fc.array(fc.tuple(fc.constantFrom(...PATHS), node, fc.nat()), { maxLength: 4 }),
  )
  .map(([base, implants]) =>
    implants.reduce((n, [path, leaf, choice]) => implant(n, path.split("."), leaf, choice), base),
  );

const topLevel = fc.oneof({ weight: 4, arbitrary: implanted }, { weight: 1, arbitrary: node });

/** Small deterministic generator so one fc-chosen seed decides every spacing and escaping choice. */
function prng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 4294967296;
  };
}

const SHORT_ESCAPES: Record<string, string> = {
  '"': '\\"',
  "\\": "\\\\",
  "\b": "\\b",
  "\f": "\\f",
  "\n": "\\n",
  "\r": "\\r",
  "\t": "\\t",
};

function hex4(code: number, rnd: () => number): string {
  const h = code.toString(16).padStart(4, "0");
  return "\\u" + (rnd() < 0.5 ? h : h.toUpperCase());
}

function quote(s: string, rnd: () => number): string {
  let out = '"';
  for (let i = 0; i < s.length; i++) {
    const ch = s.charAt(i);
    const code = s.charCodeAt(i);
    const lone =
      code >= 0xd800 &&
      code <= 0xdfff &&
      !(code <= 0xdbff && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) &&
      !(code >= 0xdc00 && (s.charCodeAt(i - 1) & 0xfc00) === 0xd800);
    const short = SHORT_ESCAPES[ch];
    if (code < 0x20 || ch === '"' || ch === "\\" || lone)
      out += short !== undefined && rnd() < 0.7 ? short : hex4(code, rnd);
    else if (ch === "/" && rnd() < 0.3) out += "\\/";
    else if (rnd() < 0.1) out += hex4(code, rnd);
    else out += ch;
  }
  return out + '"';
}

function serialize(root: Node, seed: number): string {
  const rnd = prng(seed);
  const ws = () => (rnd() < 0.2 ? [" ", "\t", "\n", "\r", "  "][Math.floor(rnd() * 5)] : "");
  const write = (n: Node): string => {
    switch (n.kind) {
      case "str":
        return quote(n.v, rnd);
      case "num":
      case "lit":
        return n.v;
      case "obj":
        return (
          "{" +
          ws() +
          n.v.map(([k, v]) => quote(k, rnd) + ws() + ":" + ws() + write(v)).join(ws() + "," + ws()) +
          ws() +
          "}"
        );
      case "arr":
        return "[" + ws() + n.v.map(write).join(ws() + "," + ws()) + ws() + "]";
    }
  };
  return ws() + write(root) + ws();
}

// ---- mutations: most break the document, some leave it valid; the reference decides which ----

const INTERESTING = [...'{}[],:"\\ 0123456789-+.eEtrufalsn/bx\t\n\r']
  .map((c) => c.charCodeAt(0))
  // Control bytes JSON does not count as space (0x08, 0x0b, 0x0c), and bytes that start, continue or break UTF-8.
  .concat([0x00, 0x01, 0x08, 0x0b, 0x0c, 0x1f, 0x7f, 0x80, 0x85, 0xa0, 0xbf, 0xc0, 0xc3, 0xe2, 0xed, 0xef, 0xf0, 0xff]);

type Mutation = [op: number, at: number, byte: number];
const mutation = fc.tuple(fc.nat(8), fc.nat(), fc.constantFrom(...INTERESTING));

function mutate(bytes: Buffer, [op, at, byte]: Mutation): Buffer {
  const n = bytes.length;
  const i = n === 0 ? 0 : at % (n + 1);
  const nth = (pred: (b: number) => boolean) => {
    const hits = [...bytes.keys()].filter((k) => pred(bytes[k] as number));
    return hits.length === 0 ? -1 : (hits[at % hits.length] as number);
  };
  const insert = (pos: number, add: number[]) =>
    Buffer.concat([bytes.subarray(0, pos), Buffer.from(add), bytes.subarray(pos)]);
  switch (op) {
    case 0:
      return bytes.subarray(0, i);
    case 1:
      return Buffer.concat([bytes.subarray(0, i), bytes.subarray(i + 1)]);
    case 2:
      return insert(i, [byte]);
    case 3: {
      const copy = Buffer.from(bytes);
      if (i < n) copy[i] = byte;
      return copy;
    }
    case 4: {
      const closer = nth((b) => b === 0x7d || b === 0x5d);
      return closer < 0 ? insert(n, [0x2c]) : insert(closer, [0x2c]);
    }
    case 5:
      return Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), bytes]);
    case 6: {
      // A byte just inside a string: invalid UTF-8, a bad escape, or a raw control character.
      const q = nth((b) => b === 0x22);
      return q < 0 ? insert(i, [byte]) : insert(q + 1, byte === 0x5c ? [0x5c, 0x78] : [byte]);
    }
    case 7:
      return insert(n, [byte]);
    default: {
      const end = i + (at % 7);
      return insert(at % (n + 1), [...bytes.subarray(i, end)]);
    }
  }
}

// ---- references ----

type Found = [kind: number, value: string | undefined];

function lookup(doc: unknown, path: string): Found {
  let v = doc;
  for (const k of path.split(".")) {
    if (typeof v !== "object" || v === null || Array.isArray(v) || !Object.hasOwn(v, k))
      return [FieldKind.Absent, undefined];
    v = (v as Record<string, unknown>)[k];
  }
  if (v === null) return [FieldKind.Absent, undefined];
  if (typeof v === "object") return [FieldKind.Container, undefined];
  return [FieldKind.Scalar, String(v)];
}

function parseRef(bytes: Uint8Array): { doc: unknown } | null {
  try {
    return { doc: JSON.parse(Buffer.from(bytes).toString("utf8")) };
  } catch {
    return null;
  }
}

/** Depth of the tree as written: JSON.parse keeps only the last duplicate, the bytes keep every one. */
function depthOf(n: Node): number {
  if (n.kind === "obj") return 1 + Math.max(0, ...n.v.map(([, v]) => depthOf(v)));
  if (n.kind === "arr") return 1 + Math.max(0, ...n.v.map(depthOf));
  return 0;
}

// ---- the properties ----

const documents = fc.record({
  tree: topLevel,
  seed: fc.integer(),
  mutations: fc.array(fc.array(mutation, { minLength: 1, maxLength: 3 }), { maxLength: 3 }),
});

function variants(tree: Node, seed: number, mutations: Mutation[][]): Buffer[] {
  const valid = Buffer.from(serialize(tree, seed), "utf8");
  return [valid, ...mutations.map((ms) => ms.reduce(mutate, valid))];
}

/** Top-level plain keys only: the paths the WebAssembly scan takes. */
const TOP_PATHS = ["_org_id", "event_type", "tags", "a", "b"];

const decoder = new Lz4Frames();

/** The records as an lz4 decoder leaves them, end to end in its memory: where the WebAssembly scan reads them. */
const decoded = (records: Buffer[]): Uint8Array[] => lz4Decoded(records, decoder);

const asGiven = (records: Buffer[]): Uint8Array[] => records;

for (const [engine, paths, place] of [
  ["js", PATHS, asGiven],
  ["wasm", TOP_PATHS, asGiven],
  ["wasm", TOP_PATHS, decoded],
] as const) {
  const where = place === decoded ? ", records read where an lz4 decoder left them" : "";
  test(`extractor (${engine}) agrees with JSON.parse + path lookup on valid documents and their mutations${where}`, () => {
    agreesWithJsonParse(engine, paths, place);
  });
}

function agreesWithJsonParse(
  engine: "js" | "wasm",
  paths: readonly string[],
  place: (records: Buffer[]) => Uint8Array[],
): void {
  const extractor = compileExtractor(paths, engine === "js" ? "js" : undefined);
  assert.equal(extractor.engine, engine);
  const out: (string | undefined)[] = [];
  const seen = { valid: 0, invalid: 0, scalar: new Array<number>(paths.length).fill(0), container: 0 };
  const check = (bytes: Uint8Array) => {
    const ref = parseRef(bytes);
    const ok = extractor.extract(bytes, out);
    assert.equal(ok, ref !== null, `validity of ${JSON.stringify(Buffer.from(bytes).toString("latin1"))}`);
    if (ref === null) {
      seen.invalid++;
      return;
    }
    seen.valid++;
    paths.forEach((path, i) => {
      const [kind, value] = lookup(ref.doc, path);
      assert.deepEqual(
        [extractor.kinds[i], out[i]],
        [kind, value],
        `${path} in ${Buffer.from(bytes).toString("latin1")}`,
      );
      if (kind === FieldKind.Scalar) seen.scalar[i] = (seen.scalar[i] ?? 0) + 1;
      if (kind === FieldKind.Container) seen.container++;
    });
  };
  fc.assert(
    fc.property(documents, ({ tree, seed, mutations }) => {
      for (const bytes of place(variants(tree, seed, mutations))) check(bytes);
    }),
    { numRuns: RUNS },
  );
  // Token soup and raw bytes reach grammar corners the tree never writes ("1.", "-", "01", "[1,]", "tru").
  const soup = fc.oneof(
    fc.string({
      maxLength: 16,
      unit: fc.constantFrom(...'{}[],:"\\ 0123456789-+.eEtrufalsn\u0001\u000b\u000c\u00a0\ufeffé\t\n'),
    }),
    fc.uint8Array({ maxLength: 16 }),
  );
  fc.assert(
    fc.property(soup, (s) => place([Buffer.from(s)]).forEach(check)),
    { numRuns: RUNS / 2 },
  );
  // The generators must reach every case, or the agreement above proves little.
  assert.ok(seen.valid > RUNS / 2 && seen.invalid > RUNS / 2, JSON.stringify(seen));
  assert.ok(seen.container > 100, JSON.stringify(seen));
  seen.scalar.forEach((n, i) => assert.ok(n > 50, `${paths[i]} found only ${n} times`));
}

test("depth scan agrees with the parsed tree's depth on valid documents", () => {
  fc.assert(
    fc.property(topLevel, fc.integer(), fc.nat(6), (tree, seed, limit) => {
      const bytes = Buffer.from(serialize(tree, seed), "utf8");
      assert.equal(nestingDepthExceeds(bytes, limit), depthOf(tree) > limit);
    }),
    { numRuns: RUNS / 5 },
  );
});

for (const fields of [
  ["_org_id", "tags.category", "event_type"],
  ["_org_id", "event_type"],
]) {
  test(`router agrees with a reference router on ${fields.join(", ")}`, () => routerAgrees(fields));
}

/** Against a reference router built on the depth scan, JSON.parse and encodeSegment. */
function routerAgrees(fields: string[]): void {
  const blank = (v: string) => v.trim() === "";
  fc.assert(
    fc.property(
      documents,
      fc.option(fc.oneof(fc.constantFrom("events", "a/b", ".."), text)),
      fc.integer({ min: 1, max: 6 }),
      fc.constantFrom("expression", "topic"),
      ({ tree, seed, mutations }, topic, maxDepth, mode) => {
        const t = topic ?? undefined;
        const router = createRouter({ mode, fields, defaultSegment: "default", maxDepth });
        for (const bytes of variants(tree, seed, mutations)) {
          const head = t === undefined ? "default" : encodeSegment(t);
          let expected: string | typeof TOO_DEEP;
          let errors = 0;
          let tooDeep = 0;
          const fallbacks = new Map<string, number>();
          const ref = parseRef(bytes);
          const found = ref === null ? [] : fields.map((f) => lookup(ref.doc, f));
          if (mode === "topic") {
            expected = head;
          } else if (nestingDepthExceeds(bytes, maxDepth)) {
            expected = TOO_DEEP;
            tooDeep = 1;
          } else if (ref === null || found.some(([kind]) => kind === FieldKind.Container)) {
            expected = head;
            errors = 1;
          } else {
            const segs = found.map(([, value], i) => {
              if (value !== undefined && !blank(value)) return encodeSegment(value);
              fallbacks.set(fields[i] as string, 1);
              return "default";
            });
            expected = [...(t === undefined ? [] : [head]), ...segs].join("/");
          }
          assert.equal(router.route(t, bytes), expected);
          assert.deepEqual(router.drainStats(), { fallbacks, errors, tooDeep });
        }
      },
    ),
    { numRuns: RUNS / 5 },
  );
}
