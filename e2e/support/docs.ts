// The staleness check every generated documentation block shares: present between its markers in its page and equal
// to what its renderer gives now, or a failure naming the command that fixes it.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { readBlock } from "../../runtime/src/config/docs.ts";
import type { GeneratedPage } from "../../scripts/doc-pages.ts";

export const ROOT = resolve(import.meta.dirname, "../..");
export const FIX = "run `node_modules/.bin/node scripts/generate.ts`";

export function assertPageCurrent({ file, block }: GeneratedPage): void {
  const path = join(ROOT, file);
  assert.ok(existsSync(path), `${file} is missing; add it with the ${block.name} markers, then ${FIX}`);
  const text = readBlock(readFileSync(path, "utf8"), block);
  assert.ok(text !== undefined, `${file} has no ${block.start} ... ${block.end} block; add it, then ${FIX}`);
  assert.equal(text, block.render(), `${file}'s ${block.name} block is stale: ${FIX}`);
}
