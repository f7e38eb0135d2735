import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { assertPageCurrent } from "../../../e2e/support/docs.ts";
import { FIELDS_PAGE } from "../../../scripts/doc-pages.ts";
import { crdObject } from "../../src/api/crd.ts";
import { renderFieldTables } from "../../src/api/docs.ts";
import { camelKey } from "../../src/api/keys.ts";
import { OPERATOR_OWNED_KEYS, SECRET_ENV, SECRET_KEYS } from "../../src/api/spec.ts";
import { schemaNodes, type Node } from "./helpers.ts";

const root = (crdObject() as { spec: { versions: { schema: { openAPIV3Schema: Node } }[] } }).spec.versions[0]!.schema
  .openAPIV3Schema;

/** The rendered rows by field path, each as its cells; and the headings. */
function parse(): { rows: Map<string, string[]>; headings: string[] } {
  const rows = new Map<string, string[]>();
  const headings: string[] = [];
  for (const line of renderFieldTables().split("\n")) {
    if (line.startsWith("### ")) headings.push(line.slice(4));
    const path = /^\| `([^`]+)` \|/.exec(line)?.[1];
    if (path === undefined) continue;
    assert.ok(!rows.has(path), `${path} twice`);
    rows.set(
      path,
      line
        .split(/(?<!\\)\|/)
        .slice(1, -1)
        .map((c) => c.trim()),
    );
  }
  return { rows, headings };
}

describe("docs/archivepipeline.md ArchivePipeline fields", () => {
  it("match the CRD", () => {
    assertPageCurrent(FIELDS_PAGE);
  });

  it("have a row for every field of the spec and the status, a Secret reference as one", () => {
    const secrets = SECRET_KEYS.map((k) => `spec.${camelKey(k)}`);
    const expected = [...schemaNodes(root, "")]
      .map(([p]) => p.slice(1))
      .filter((p) => /^(spec|status)\./.test(p) && !p.endsWith("[]") && !p.endsWith(".*"))
      .filter((p) => !secrets.some((s) => p.startsWith(`${s}.`)));
    const { rows, headings } = parse();
    // A section (spec.kafka, status.conditions) is a heading over its fields' table, not a row.
    const sections = new Set(headings.map((h) => h.slice(1, -1)));
    assert.deepEqual([...rows.keys()].sort(), expected.filter((p) => !sections.has(p)).sort());
    assert.ok(sections.has("spec.kafka") && sections.has("status.pods") && rows.has("spec.kafka.tls"));
    for (const key of OPERATOR_OWNED_KEYS) assert.ok(!rows.has(`spec.${camelKey(key)}`), key);
    for (const key of SECRET_KEYS) {
      const cells = rows.get(`spec.${camelKey(key)}`)!;
      assert.equal(cells[1], "Secret reference", key);
      assert.ok(cells[3]?.includes(SECRET_ENV[key]), key);
    }
  });

  it("move each default out of the description into its column, and fill every cell", () => {
    const { rows } = parse();
    for (const [path, cells] of rows) {
      assert.equal(cells.length, path.startsWith("spec.") ? 4 : 3, path);
      for (const c of cells) assert.notEqual(c, "", path);
      assert.doesNotMatch(cells.at(-1) ?? "", /Default:/, path);
    }
    const cell = (path: string, i: number) => rows.get(path)?.[i];
    assert.equal(cell("spec.transport", 2), "`kafka`");
    assert.equal(cell("spec.archive.multipartChunkSize", 1), "integer (≥ 5242880)");
    assert.equal(cell("spec.archive.multipartChunkSize", 2), "`8388608`");
    assert.match(cell("spec.archive.rollIntervalSecs", 2) ?? "", /^300 while offsets are held .* else 3600$/);
    assert.equal(cell("spec.kafka.brokers", 2), '`["localhost:9092"]`');
    assert.equal(cell("spec.archive.s3.region", 2), "unset");
    assert.equal(cell("spec.kafka.tls", 2), "-");
  });

  it("cover the operator's own fields and the status", () => {
    const { rows, headings } = parse();
    const cell = (path: string, i: number) => rows.get(path)?.[i];
    assert.equal(cell("spec.spool.sizeLimit", 1), "integer or string");
    assert.equal(cell("spec.spool.sizeLimit", 2), "`10Gi`");
    assert.equal(cell("spec.gcsKeySecret.name", 1), "string (non-empty), required");
    assert.equal(cell("spec.gcsKeySecret.key", 2), "`key.json`");
    assert.equal(cell("spec.archiveVolume.claimName", 2), "-");
    assert.equal(cell("spec.keda.maxReplicaCount", 2), "`10`");
    assert.equal(cell("spec.keda.pressure.service", 2), "the pipeline's name");
    assert.equal(cell("spec.keda.triggers[].metadata", 1), "map of string, required");
    assert.ok(rows.has("spec.resources.limits.memory"));
    assert.equal(cell("status.conditions[].status", 1), "`True` \\| `False` \\| `Unknown`, required");
    assert.equal(cell("status.conditions[].lastTransitionTime", 1), "string (date-time), required");
    assert.ok(rows.has("status.pods[].components.sink.state"));
    assert.equal(headings[0], "`spec`");
    for (const h of [
      "spec.kafka",
      "spec.archive",
      "spec.spool",
      "spec.keda",
      "status",
      "status.conditions",
      "status.pods",
    ])
      assert.ok(headings.includes(`\`${h}\``), h);
  });
});
