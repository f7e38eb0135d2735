// The staleness check every generated README block shares: present between its markers and equal to what its
// renderer gives now, or a failure naming the command that fixes it.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { readBlock, type GeneratedBlock } from "../../runtime/src/config/docs.ts";

export const ROOT = resolve(import.meta.dirname, "../..");
export const FIX = "run `node_modules/.bin/node scripts/generate.ts`";

export function assertReadmeBlockCurrent(block: GeneratedBlock): void {
  const path = join(ROOT, "README.md");
  assert.ok(existsSync(path), `README.md is missing; add it with the ${block.name} markers, then ${FIX}`);
  const text = readBlock(readFileSync(path, "utf8"), block);
  assert.ok(text !== undefined, `README.md has no ${block.start} ... ${block.end} block; add it, then ${FIX}`);
  assert.equal(text, block.render(), `README.md's ${block.name} block is stale: ${FIX}`);
}
