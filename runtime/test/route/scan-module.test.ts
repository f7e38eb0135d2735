import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { SCAN_MODULE_FILE, scanModuleText } from "../../../scripts/scan-module.ts";

test("scan-module.ts is what scan.wat assembles to (else: node_modules/.bin/node scripts/generate.ts)", async () => {
  assert.equal(readFileSync(SCAN_MODULE_FILE, "utf8"), await scanModuleText());
});
