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
} from "../../src/config/docs.ts";
import { CONFIG_LEAVES, MEMORY_LEAVES } from "../../src/config/schema.ts";
import { assertPageCurrent, ROOT } from "../../../e2e/support/docs.ts";
import { CONFIG_PAGE, FIELDS_PAGE, GENERATED_PAGES, type GeneratedPage } from "../../../scripts/doc-pages.ts";
import { tempDir } from "./helpers.ts";

describe("docs/configuration.md config table", () => {
  it("matches the schema", () => {
    assertPageCurrent(CONFIG_PAGE);
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
  const stale = ({ block }: GeneratedPage) => `# x\n\n${block.start}\nstale\n${block.end}\ntail\n`;
  /** A root holding each page as `page` gives it (undefined: no such file). */
  const root = (page: (p: GeneratedPage) => string | undefined) =>
    tempDir(
      Object.fromEntries(
        GENERATED_PAGES.flatMap((p) => {
          const text = page(p);
          return text === undefined ? [] : [[p.file, text]];
        }),
      ),
    );
  const run = (dir: string) =>
    spawnSync(process.execPath, [join(ROOT, "scripts", "generate.ts"), dir], { encoding: "utf8" });
  const read = (dir: string, p: GeneratedPage) => readFileSync(join(dir, p.file), "utf8");

  it("rewrites each page's block in a copy, then finds them current", () => {
    const dir = root(stale);
    const first = run(dir);
    assert.equal(first.status, 0, first.stderr);
    for (const p of GENERATED_PAGES) {
      assert.ok(first.stdout.includes(`${join(dir, p.file)} ${p.block.name} rewritten`), first.stdout);
      const text = read(dir, p);
      assert.equal(readBlock(text, p.block), p.block.render(), p.file);
      assert.ok(text.startsWith(`# x\n\n${p.block.start}\n`) && text.endsWith(`${p.block.end}\ntail\n`), p.file);
    }
    const second = run(dir);
    assert.equal(second.status, 0, second.stderr);
    for (const p of GENERATED_PAGES) assert.ok(second.stdout.includes(`${join(dir, p.file)} already current`));
  });

  it("fails, naming each page and its markers, when the pages have none", () => {
    const dir = root(() => "# no markers\n");
    const r = run(dir);
    assert.equal(r.status, 1);
    for (const p of GENERATED_PAGES) {
      assert.ok(r.stderr.includes(`${join(dir, p.file)} has no ${p.block.start}`), r.stderr);
      assert.equal(read(dir, p), "# no markers\n");
    }
  });

  it("writes no page when one lacks its block or is missing, naming that one", () => {
    for (const lacking of [() => "# no markers\n", () => undefined]) {
      const dir = root((p) => (p === FIELDS_PAGE ? lacking() : stale(p)));
      const r = run(dir);
      assert.equal(r.status, 1);
      assert.ok(r.stderr.includes(`${join(dir, FIELDS_PAGE.file)} has no ${FIELDS_PAGE.block.start}`), r.stderr);
      assert.ok(!r.stderr.includes(TABLE_START), r.stderr);
      assert.equal(read(dir, CONFIG_PAGE), stale(CONFIG_PAGE));
    }
  });
});
