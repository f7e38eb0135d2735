import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { WASM_MODULES, wasmModuleText } from "../../scripts/wasm-modules.ts";

for (const m of WASM_MODULES) {
  test(`${m.file} is what its .wat assembles to (else: node_modules/.bin/node scripts/generate.ts)`, async () => {
    assert.equal(readFileSync(m.file, "utf8"), await wasmModuleText(m));
  });
}
