import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  CONFIG_TABLE,
  TABLE_END,
  TABLE_START,
  readBlock,
  renderConfigTable,
  spliceBlock,
  type GeneratedBlock,
} from "../../src/config/docs.ts";
import { METRICS_TABLE } from "../../src/observe/docs.ts";
import { CR_FIELDS } from "../../../operator/src/api/docs.ts";
import { CONFIG_LEAVES, MEMORY_LEAVES } from "../../src/config/schema.ts";
import { assertReadmeBlockCurrent, ROOT } from "../../../e2e/support/readme.ts";
import { tempDir } from "./helpers.ts";

describe("README config table", () => {
  it("matches the schema", () => {
    assertReadmeBlockCurrent(CONFIG_TABLE);
  });

  it("has one row per key, env-only memory keys included, with every cell filled", () => {
    const rows = renderConfigTable().split("\n").slice(2);
    assert.equal(rows.length, CONFIG_LEAVES.length + MEMORY_LEAVES.length);
    const byKey = new Map(rows.map((r) => [/^\| `([^`]+)`/.exec(r)?.[1], r]));
    for (const l of [...CONFIG_LEAVES, ...MEMORY_LEAVES]) {
      const row = byKey.get(l.key);
      assert.ok(row, l.key);
      // Five cells, none empty; a pipe inside a cell is escaped.
      const cells = row.split(/(?<!\\)\|/).slice(1, -1);
      assert.equal(cells.length, 5, row);
      for (const c of cells) assert.notEqual(c.trim(), "", row);
    }
    assert.match(byKey.get("transport") ?? "", /\| `kafka` \\\| `grpc` \| `kafka` \| `DFE_ARCHIVER_TRANSPORT` \|/);
    assert.match(byKey.get("archive.multipart_chunk_size") ?? "", /integer \(≥ 5242880\) \| `8388608`/);
    assert.match(byKey.get("archive.roll_interval_secs") ?? "", /300 while offsets are held .* else 3600/);
    assert.match(byKey.get("kafka.sasl_password") ?? "", /string, secret/);
    assert.match(byKey.get("kafka.client_id") ?? "", /`DFE_ARCHIVER_KAFKA__CLIENT_ID`/);
    assert.match(byKey.get("logger.level") ?? "", /`LOG_LEVEL` \/ `--log-level`/);
  });

  it("splices the table between the markers and leaves the rest alone", () => {
    const readme = `# Title\n\nintro\n\n${TABLE_START}\nold table\n${TABLE_END}\n\nafter\n`;
    const out = spliceBlock(readme, CONFIG_TABLE);
    assert.equal(out, `# Title\n\nintro\n\n${TABLE_START}\n${renderConfigTable()}\n${TABLE_END}\n\nafter\n`);
    assert.equal(spliceBlock(out ?? "", CONFIG_TABLE), out, "idempotent");
    assert.equal(spliceBlock("# no markers\n", CONFIG_TABLE), undefined);
  });
});

describe("scripts/generate.ts", () => {
  const BLOCKS = [CONFIG_TABLE, CR_FIELDS, METRICS_TABLE];
  const stale = (blocks: GeneratedBlock[]) => blocks.map((b) => `${b.start}\nstale\n${b.end}\n`).join("\n");
  const run = (readme: string) =>
    spawnSync(process.execPath, [join(ROOT, "scripts", "generate.ts"), readme], { encoding: "utf8" });

  it("rewrites a README copy's blocks, then finds them current", () => {
    const dir = tempDir({ "README.md": `# x\n\n${stale(BLOCKS)}tail\n` });
    const path = join(dir, "README.md");
    const first = run(path);
    assert.equal(first.status, 0, first.stderr);
    assert.match(first.stdout, /config table, ArchivePipeline fields, metrics table rewritten/);
    const text = readFileSync(path, "utf8");
    for (const b of BLOCKS) assert.equal(readBlock(text, b), b.render(), b.name);
    assert.ok(text.startsWith(`# x\n\n${TABLE_START}\n`) && text.endsWith(`${METRICS_TABLE.end}\ntail\n`));
    const second = run(path);
    assert.equal(second.status, 0, second.stderr);
    assert.match(second.stdout, /README.md already current/);
  });

  it("fails, naming the markers, when a README has none", () => {
    const dir = tempDir({ "README.md": "# no markers\n" });
    const r = run(join(dir, "README.md"));
    assert.equal(r.status, 1);
    for (const b of BLOCKS) assert.ok(r.stderr.includes(b.start), r.stderr);
    assert.equal(readFileSync(join(dir, "README.md"), "utf8"), "# no markers\n");
  });

  it("leaves a README missing one block's markers as it was, naming that block", () => {
    const text = `# x\n\n${stale([CONFIG_TABLE, METRICS_TABLE])}`;
    const dir = tempDir({ "README.md": text });
    const r = run(join(dir, "README.md"));
    assert.equal(r.status, 1);
    assert.ok(r.stderr.includes(CR_FIELDS.start) && !r.stderr.includes(TABLE_START), r.stderr);
    assert.equal(readFileSync(join(dir, "README.md"), "utf8"), text);
  });
});
