import assert from "node:assert/strict";
import { test } from "node:test";
import { ConfigError } from "../../src/errors.ts";
import { compileExtractor, FieldKind, ScanResult } from "../../src/route/extract.ts";

const { Absent, Scalar, Container } = FieldKind;

/**
 * [kind, value] per path, or null when the record is refused as JSON; asserted the same from the JavaScript scan and
 * from the one compileExtractor picks (WebAssembly, for top-level plain keys).
 */
function run(paths: string[], json: string | Uint8Array): [number, string | undefined][] | null {
  const bytes = typeof json === "string" ? Buffer.from(json, "utf8") : json;
  const [picked, js] = [compileExtractor(paths), compileExtractor(paths, "js")].map((ex) => {
    const out: (string | undefined)[] = [];
    if (!ex.extract(bytes, out)) return null;
    return paths.map((_, i): [number, string | undefined] => [ex.kinds[i] as number, out[i]]);
  });
  assert.deepEqual(picked, js, "the WebAssembly and JavaScript scans disagree");
  return js ?? null;
}

test("the WebAssembly scan takes top-level plain keys; the JavaScript scan any other path", () => {
  assert.equal(compileExtractor(["_org_id", "event_type"]).engine, "wasm");
  assert.equal(compileExtractor(["_org_id", "_org_id"]).engine, "wasm");
  assert.equal(compileExtractor(["a", "b", "c", "d", "e", "f", "g"]).engine, "wasm");
  for (const paths of [
    ["tags.category"],
    ["ключ"],
    ['q"t'],
    ["a\\b"],
    ["x".repeat(61)],
    ["a", "b", "c", "d", "e", "f", "g", "h"],
  ]) {
    assert.equal(compileExtractor(paths).engine, "js", paths.join(","));
  }
  assert.equal(compileExtractor(["_org_id"], "js").engine, "js");
});

test("a record the WebAssembly scan leaves to JavaScript (an escaped top-level key) gets the same answer", () => {
  const ex = compileExtractor(["_org_id", "n"]);
  assert.equal(ex.engine, "wasm");
  const out: (string | undefined)[] = [];
  assert.ok(ex.extract(Buffer.from('{"\\u005forg_id":"x\\n","n":1}'), out));
  assert.deepEqual(out, ["x\n", "1"]);
  assert.ok(ex.extract(Buffer.from('{"_org_id":"y","\\u005forg_id":{}}'), out));
  assert.deepEqual([...ex.kinds], [Container, Absent]);
  // The next record, plain again, is the WebAssembly scan's, with nothing carried over.
  assert.ok(ex.extract(Buffer.from('{"n":2}'), out));
  assert.deepEqual(out, [undefined, "2"]);
  assert.equal(ex.extract(Buffer.from('{"\\u005forg_id":"x"'), out), false);
});

test("records far larger than the WebAssembly scan's first memory are read whole, spans in the caller's buffer", () => {
  const ex = compileExtractor(["_org_id", "last"]);
  const big = Buffer.from(
    `pad{"_org_id":"acme","filler":"${"y".repeat(3 << 20)}","last":"z\\u00e9"}` + `{"_org_id":"next"}`,
  );
  const end = big.indexOf('}{"_org_id":"next"}') + 1;
  assert.equal(ex.scanSpans(big, 3, end, 64), ScanResult.Ok);
  assert.equal(big.toString("utf8", ex.starts[0], ex.ends[0]), '"acme"');
  assert.deepEqual([ex.value(big, 0), ex.value(big, 1)], ["acme", "zé"]);
  assert.equal(ex.scanSpans(big, end, big.length, 64), ScanResult.Ok);
  assert.deepEqual([ex.value(big, 0), ex.kinds[1]], ["next", Absent]);
});

test("the seed's examples: top-level and dot-notation fields", () => {
  assert.deepEqual(run(["_org_id", "event_type"], '{"_org_id": "acme", "event_type": "login", "data": {"x": 1}}'), [
    [Scalar, "acme"],
    [Scalar, "login"],
  ]);
  assert.deepEqual(run(["tags.category"], '{"tags": {"category": "security"}}'), [[Scalar, "security"]]);
});

test("decoys of the same name at another level do not match", () => {
  const paths = ["_org_id", "tags.category"];
  assert.deepEqual(run(paths, '{"data":{"_org_id":"evil","tags":{"category":"evil"}},"_org_id":"acme"}'), [
    [Scalar, "acme"],
    [Absent, undefined],
  ]);
  assert.deepEqual(run(paths, '{"category":"top","x":{"tags":{"category":"deep"}},"tags":{"y":{"category":"no"}}}'), [
    [Absent, undefined],
    [Absent, undefined],
  ]);
  assert.deepEqual(run(paths, '[{"_org_id":"in array"}]'), [
    [Absent, undefined],
    [Absent, undefined],
  ]);
});

test("paths descend through objects only; an object or array value is a Container", () => {
  const paths = ["tags", "tags.category"];
  assert.deepEqual(run(paths, '{"tags":[{"category":"x"}]}'), [
    [Container, undefined],
    [Absent, undefined],
  ]);
  assert.deepEqual(run(paths, '{"tags":{"category":{"a":1}}}'), [
    [Container, undefined],
    [Container, undefined],
  ]);
  assert.deepEqual(run(paths, '{"tags":"flat"}'), [
    [Scalar, "flat"],
    [Absent, undefined],
  ]);
});

test("duplicate keys: the last wins, whichever of scalar and object comes later", () => {
  const paths = ["tags", "tags.category"];
  assert.deepEqual(run(paths, '{"tags":{"category":"x"},"tags":5}'), [
    [Scalar, "5"],
    [Absent, undefined],
  ]);
  assert.deepEqual(run(paths, '{"tags":5,"tags":{"category":"x"}}'), [
    [Container, undefined],
    [Scalar, "x"],
  ]);
  assert.deepEqual(run(paths, '{"tags":{"category":"x"},"tags":{"other":1}}'), [
    [Container, undefined],
    [Absent, undefined],
  ]);
  assert.deepEqual(run(["a"], '{"a":"1","a":null}'), [[Absent, undefined]]);
  assert.deepEqual(run(["a"], '{"a":"1","a":"2"}'), [[Scalar, "2"]]);
});

test("top-level non-objects are valid JSON with every path missing", () => {
  for (const doc of ['"acme"', "42", "[1,2]", "null", " true "])
    assert.deepEqual(run(["_org_id"], doc), [[Absent, undefined]]);
});

test("strings are unescaped as JSON.parse does, surrogates included", () => {
  assert.deepEqual(run(["a"], '{"a":"\\u0041\\ud83d\\ude00\\n\\t\\"\\\\\\/\\b\\f\\r"}'), [
    [Scalar, 'A😀\n\t"\\/\b\f\r'],
  ]);
  assert.deepEqual(run(["a"], '{"a":"x\\ud800y"}'), [[Scalar, "x\ud800y"]]);
  assert.deepEqual(run(["a"], '{"a":"日本\\u00e9é"}'), [[Scalar, "日本éé"]]);
  assert.deepEqual(run(["a"], '{"a":"\u2028\u007f"}'), [[Scalar, "\u2028\u007f"]]);
});

test("invalid UTF-8 inside a string becomes U+FFFD, as in JSON.parse of the decoded text", () => {
  const bytes = Buffer.concat([
    Buffer.from('{"a":"x'),
    Buffer.from([0xc3, 0xff, 0xed, 0xa0, 0x80]),
    Buffer.from('y"}'),
  ]);
  const expected = JSON.parse(bytes.toString("utf8")).a;
  assert.ok(expected.includes("\ufffd"));
  assert.deepEqual(run(["a"], bytes), [[Scalar, expected]]);
});

test("keys written with escapes or non-ASCII match their decoded form", () => {
  assert.deepEqual(run(["_org_id"], '{"_org\\u005fid":"acme"}'), [[Scalar, "acme"]]);
  assert.deepEqual(run(["ключ"], '{"ключ":"v1"}'), [[Scalar, "v1"]]);
  assert.deepEqual(run(["ключ"], '{"\\u043a\\u043b\\u044e\\u0447":"v2"}'), [[Scalar, "v2"]]);
  assert.deepEqual(run(['q"t'], '{"q\\"t":"v3"}'), [[Scalar, "v3"]]);
});

test("numbers come out as String(JSON.parse(literal))", () => {
  const cases: [string, string][] = [
    ["0", "0"],
    ["-0", "0"],
    ["-0.0e+0", "0"],
    ["1.50", "1.5"],
    ["1E2", "100"],
    ["1e400", "Infinity"],
    ["-1e400", "-Infinity"],
    ["1e-400", "0"],
    ["123456789012345", "123456789012345"],
    ["12345678901234567890", "12345678901234567000"],
    ["9007199254740993", "9007199254740992"],
    ["-42", "-42"],
    ["0.1", "0.1"],
    ["1e21", "1e+21"],
  ];
  for (const [literal, expected] of cases) {
    assert.equal(String(JSON.parse(literal)), expected);
    assert.deepEqual(run(["n"], `{"n":${literal}}`), [[Scalar, expected]], literal);
  }
});

test("booleans are their names; null is Absent", () => {
  assert.deepEqual(run(["t", "f", "z"], '{"t":true,"f":false,"z":null}'), [
    [Scalar, "true"],
    [Scalar, "false"],
    [Absent, undefined],
  ]);
});

test("refused exactly where JSON.parse throws", () => {
  const refused = [
    "",
    "   ",
    "\ufeff{}",
    "{} x",
    "{},",
    '{"a":1,}',
    "[1,]",
    "{,}",
    '{"a" 1}',
    '{"a":"\\x"}',
    '{"a":"\\u12G4"}',
    '{"a":"\u0001"}',
    '{"a":"\n"}',
    '{"a":01}',
    '{"a":1.}',
    '{"a":.5}',
    '{"a":-}',
    '{"a":1e}',
    '{"a":+1}',
    '{"a":tru}',
    '{"a":nul}',
    '{"a":"x}',
    "{'a':1}",
    '{"a":1}}',
    "[1}",
    '{"a":NaN}',
  ];
  for (const doc of refused) {
    assert.throws(() => JSON.parse(doc), SyntaxError, doc);
    assert.equal(run(["a"], doc), null, JSON.stringify(doc));
  }
  const bom = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"a":1}')]);
  assert.equal(run(["a"], bom), null);
  assert.equal(run(["a"], Buffer.from([0x7b, 0xff, 0x7d])), null);
});

test("a quote, backslash or control byte is found at every place in a long string, records side by side", () => {
  // Strings are read four bytes at a time: each stop byte at each offset, and at each alignment in the buffer, with
  // the records around it in the same buffer (a lane's batch) and nothing read past the record's end.
  const ex = compileExtractor(["a"]);
  const body = "abcdefghijklmnopqrstuvwxyzé0123456789";
  for (const stop of ['"', "\\", "\\n", "\\u0041", "\u0001", "\u001f", "\n", "\\x", '\\"']) {
    for (let at = 0; at <= body.length; at++) {
      for (let shift = 0; shift < 4; shift++) {
        const doc = `{"a":"${body.slice(0, at)}${stop}${body.slice(at)}"}`;
        let expected: string | null;
        try {
          expected = String((JSON.parse(doc) as { a: unknown }).a);
        } catch {
          expected = null;
        }
        const before = Buffer.from(`${"x".repeat(shift)}{"b":"\\"}`);
        const buf = Buffer.concat([before, Buffer.from(doc), Buffer.from('"}')]);
        const got = ex.scanSpans(buf, before.length, before.length + Buffer.byteLength(doc), 64);
        const label = JSON.stringify({ doc, shift });
        if (expected === null) assert.equal(got, ScanResult.Invalid, label);
        else {
          assert.equal(got, ScanResult.Ok, label);
          assert.equal(ex.value(buf, 0), expected, label);
        }
      }
    }
  }
  // Cut inside the string: the quote just past the record's end belongs to the next record.
  const cut = Buffer.from('{"a":"abcdefghijklmnop"}');
  for (let end = 6; end < cut.length - 2; end++) {
    assert.equal(ex.scanSpans(cut, 0, end, 64), ScanResult.Invalid, `cut at ${end}`);
  }
});

test("deep documents are walked with a heap stack, not recursion", () => {
  const levels = 100_000;
  const deep = '{"_org_id":"acme","d":' + "[".repeat(levels) + "]".repeat(levels) + "}";
  assert.deepEqual(run(["_org_id"], deep), [[Scalar, "acme"]]);
  const decoy = '{"a":'.repeat(levels) + '{"_org_id":"x"}' + "}".repeat(levels);
  assert.deepEqual(run(["_org_id"], '{"n":' + decoy + ',"_org_id":"top"}'), [[Scalar, "top"]]);
  assert.deepEqual(run(["_org_id"], decoy), [[Absent, undefined]]);
  assert.equal(run(["_org_id"], '{"n":' + decoy + ',"_org_id":"top"'), null);
});

test("scan reports TooDeep exactly when the depth scan would, before any validity verdict", () => {
  const ex = compileExtractor(["_org_id"]);
  const out: (string | undefined)[] = [];
  const deep = (n: number) => Buffer.from('{"_org_id":"acme","d":' + "[".repeat(n) + "]".repeat(n) + "}");
  assert.equal(ex.scan(deep(63), out, 64), ScanResult.Ok);
  assert.equal(out[0], "acme");
  assert.equal(ex.scan(deep(64), out, 64), ScanResult.TooDeep);
  // Broken before the deep part: the depth scan still sees 65 levels, so TooDeep wins.
  assert.equal(ex.scan(Buffer.from('{"a":01,' + "[".repeat(64)), out, 64), ScanResult.TooDeep);
  assert.equal(ex.scan(Buffer.from('{"a":01,' + "[".repeat(63)), out, 64), ScanResult.Invalid);
  // Brackets inside strings count for neither.
  assert.equal(ex.scan(Buffer.from(JSON.stringify({ s: "[".repeat(100) })), out, 1), ScanResult.Ok);
});

test("a plain Uint8Array works as well as a Buffer", () => {
  const bytes = new Uint8Array(Buffer.from('xx{"a":"é","n":12}'));
  assert.deepEqual(run(["a", "n"], bytes.subarray(2)), [
    [Scalar, "é"],
    [Scalar, "12"],
  ]);
});

test("the extractor is reusable: no value leaks from one record into the next", () => {
  const ex = compileExtractor(["a", "b.c"]);
  const out: (string | undefined)[] = [];
  assert.ok(ex.extract(Buffer.from('{"a":"1","b":{"c":"2"}}'), out));
  assert.deepEqual(out, ["1", "2"]);
  assert.ok(ex.extract(Buffer.from('{"z":0}'), out));
  assert.deepEqual(out, [undefined, undefined]);
  assert.deepEqual([...ex.kinds], [Absent, Absent]);
});

test("a path with an empty segment is refused as configuration", () => {
  for (const path of ["", "a..b", ".a", "a."]) assert.throws(() => compileExtractor([path]), ConfigError, path);
});
