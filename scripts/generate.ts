// Regenerates the checked-in text that has a source of truth elsewhere: README.md's config table, from the schema.
// Usage: node_modules/.bin/node scripts/generate.ts [README path]   (default: README.md at the repo root)
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { TABLE_END, TABLE_START, spliceConfigTable } from "../runtime/src/config/docs.ts";

const readmePath = resolve(process.argv[2] ?? resolve(import.meta.dirname, "..", "README.md"));
if (!existsSync(readmePath)) {
  process.stderr.write(`generate: ${readmePath} does not exist\n`);
  process.exit(1);
}
const before = readFileSync(readmePath, "utf8");
const after = spliceConfigTable(before);
if (after === undefined) {
  process.stderr.write(`generate: ${readmePath} has no ${TABLE_START} ... ${TABLE_END} block for the config table\n`);
  process.exit(1);
}
if (after !== before) writeFileSync(readmePath, after);
process.stdout.write(`generate: ${readmePath} config table ${after === before ? "already current" : "rewritten"}\n`);
