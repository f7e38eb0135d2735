import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, describe, it } from "node:test";
import { importCycles, importGraph, importsAcross } from "./imports.ts";

const repo = join(import.meta.dirname, "..", "..", "..");
const show = (cycles: string[][]) => cycles.map((c) => c.join(" -> "));

describe("the source trees' imports", () => {
  const runtime = importGraph(join(repo, "runtime", "src"));

  it("form no circle under runtime/src (a helper two modules share goes in a module below both)", () => {
    assert.ok(runtime.size > 50, `read only ${runtime.size} files under runtime/src`);
    assert.deepEqual(show(importCycles(runtime)), []);
  });

  it("never lead from route/ into transport/ (records reach the route through runtime/src/records.ts alone)", () => {
    assert.deepEqual(importsAcross(runtime, "route", "transport"), []);
  });

  it("form no circle under operator/src", () => {
    assert.deepEqual(show(importCycles(importGraph(join(repo, "operator", "src")))), []);
  });
});

describe("the import checks on fixtures", () => {
  const root = mkdtempSync(join(tmpdir(), "imports-fixture-"));
  after(() => rmSync(root, { recursive: true, force: true }));
  const write = (file: string, text: string) => {
    mkdirSync(join(root, dirname(file)), { recursive: true });
    writeFileSync(join(root, file), text);
  };
  write("store/file.ts", 'import type { J } from "./partials.ts";\nimport { x } from "node:fs";\n');
  write("store/partials.ts", 'export { q } from "./quarantine.ts";\n');
  write("store/quarantine.ts", 'const m = await import("./manifest.ts");\n');
  write("store/manifest.ts", 'type F = import("./file.ts").F;\nimport "../outside/a.ts";\n');
  write("store/fs.ts", 'import { e } from "../errors.ts";\n');
  write("errors.ts", "export const e = 1;\n");
  write("self.ts", 'import "./self.ts";\n');
  write("route/block.ts", 'import { b } from "../transport/record-batch.ts";\nimport "../errors.ts";\n');
  write("transport/record-batch.ts", 'import "../route/none.ts";\n');

  it("find each circle through every kind of import, once, in import order", () => {
    assert.deepEqual(show(importCycles(importGraph(root))), [
      "self.ts -> self.ts",
      "store/file.ts -> store/partials.ts -> store/quarantine.ts -> store/manifest.ts -> store/file.ts",
    ]);
  });

  it("name each import from one folder into another", () => {
    const graph = importGraph(root);
    assert.deepEqual(importsAcross(graph, "route", "transport"), ["route/block.ts -> transport/record-batch.ts"]);
    assert.deepEqual(importsAcross(graph, "transport", "route"), []);
  });
});
