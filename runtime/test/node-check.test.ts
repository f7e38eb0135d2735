// Both programs under a Node older than 24 refuse in one line, before any Node 24 API: the build's main.js files, as
// a user of the package's bin runs them with the Node on their PATH (the machine's own is v20).
import assert from "node:assert/strict";
import { spawnSync, type SpawnSyncReturns } from "node:child_process";
import { existsSync, readFileSync, symlinkSync } from "node:fs";
import { delimiter, join, resolve } from "node:path";
import { describe, it } from "node:test";
import { NODE_MAJOR, nodeRefusal } from "../src/node-check.ts";
import { nodeBin, tempDir } from "../../e2e/support/archiver.ts";

const repo = resolve(import.meta.dirname, "../..");
const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as {
  version: string;
  engines: { node: string };
};

/** A `node` on the PATH older than NODE_MAJOR, with its version. */
function olderNode(): { path: string; version: string } | undefined {
  for (const dir of (process.env["PATH"] ?? "").split(delimiter)) {
    const path = join(dir, "node");
    if (dir === "" || !existsSync(path)) continue;
    const version = spawnSync(path, ["--version"], { encoding: "utf8" }).stdout.trim();
    if (Number(/^v(\d+)\./.exec(version)?.[1]) < NODE_MAJOR) return { path, version };
  }
  return undefined;
}

describe("the Node version check", () => {
  it("needs the Node package.json's engines names", () => {
    assert.equal(pkg.engines.node, `>=${NODE_MAJOR}`);
  });

  it("refuses a version below it in one line that says how to run it, and lets the rest pass", () => {
    const line = nodeRefusal("dfe-archiver", "v20.19.2", "/usr/bin/node", "dist/runtime/src/main.js");
    assert.equal(
      line,
      "dfe-archiver: needs Node.js 24 or later, and this is Node.js v20.19.2 (/usr/bin/node); run it as " +
        "node_modules/.bin/node dist/runtime/src/main.js (the Node 24 that npm ci installs in a checkout), " +
        "or run its container image",
    );
    assert.notEqual(nodeRefusal("x", "v23.11.0", "n", "s"), undefined);
    assert.equal(nodeRefusal("x", "v24.0.0", "n", "s"), undefined);
    assert.equal(nodeRefusal("x", "v25.1.0", "n", "s"), undefined);
  });

  it("runs first in both built programs: an older Node gets the line and exit 1, Node 24 the program", (t) => {
    const old = olderNode();
    if (old === undefined) {
      t.skip(`no node older than ${NODE_MAJOR} on the PATH to run the build with`);
      return;
    }
    const dir = tempDir(t, "dfe-build-");
    const build = spawnSync(nodeBin, [join(repo, "scripts/build.ts"), join(dir, "dist")], { encoding: "utf8" });
    assert.equal(build.status, 0, build.stderr);
    // Laid out as the package is installed: dist/ beside package.json and node_modules.
    for (const f of ["package.json", "node_modules"]) symlinkSync(join(repo, f), join(dir, f));
    for (const [program, main] of [
      ["dfe-archiver", "dist/runtime/src/main.js"],
      ["dfe-archiver-operator", "dist/operator/src/main.js"],
    ] as const) {
      for (const args of [["--version"], ["run"], []]) {
        const r: SpawnSyncReturns<string> = spawnSync(old.path, [main, ...args], {
          cwd: dir,
          encoding: "utf8",
          env: {},
        });
        assert.equal(r.status, 1, `${program} ${args.join(" ")} on ${old.version}: ${r.stderr}`);
        assert.equal(r.stdout, "");
        assert.equal(
          r.stderr,
          `${program}: needs Node.js ${NODE_MAJOR} or later, and this is Node.js ${old.version} (${old.path}); ` +
            `run it as node_modules/.bin/node ${main} (the Node ${NODE_MAJOR} that npm ci installs in a checkout), ` +
            "or run its container image\n",
        );
      }
      const ok = spawnSync(nodeBin, [main, "--version"], { cwd: dir, encoding: "utf8" });
      assert.equal(ok.status, 0, ok.stderr);
      assert.match(ok.stdout, new RegExp(`^${program} ${pkg.version} \\(commit [0-9a-f]{12}\\) on Node\\.js v24\\.`));
    }
  });
});
