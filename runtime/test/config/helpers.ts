// Shared by the config tests: temp directories laid out as a cwd, and capture of a refusal.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after } from "node:test";
import { ConfigError } from "../../src/errors.ts";
import { parseConfigText } from "../../src/config/load.ts";
import { ConfigFaultsError } from "../../src/config/validate.ts";

const made: string[] = [];
after(() => {
  for (const d of made) rmSync(d, { recursive: true, force: true });
});

/** A fresh directory holding `files` (relative path -> text), removed when the test file ends. */
export function tempDir(files: Record<string, string> = {}): string {
  const dir = mkdtempSync(join(tmpdir(), "dfe-config-"));
  made.push(dir);
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(dirname(join(dir, rel)), { recursive: true });
    writeFileSync(join(dir, rel), text);
  }
  return dir;
}

/** The ConfigError `fn` throws; fails the test when it returns. */
export function refusal(fn: () => unknown): ConfigError {
  try {
    fn();
  } catch (err) {
    assert.ok(err instanceof ConfigError, `expected a ConfigError, got ${String(err)}`);
    return err;
  }
  assert.fail("expected a ConfigError, but the config was accepted");
}

/** The single fault a config text (and env) is refused with: its key and message. */
export function onlyFault(yaml: string, env: NodeJS.ProcessEnv = {}): { key: string; message: string } {
  const err = refusal(() => parseConfigText(yaml, { env, sourceName: "test.yaml" }));
  assert.ok(err instanceof ConfigFaultsError);
  assert.equal(err.faults.length, 1, `expected one fault, got:\n${err.message}`);
  return err.faults[0] as { key: string; message: string };
}
