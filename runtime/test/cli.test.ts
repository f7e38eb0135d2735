// dfe-archiver's command line, run as a user runs it: --help and --version exit 0 and print only their text (the help
// made from the parser's flags and the config schema), a usage error exits 2 with the usage, and --metrics-addr with
// port 0 binds a free port and logs it.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, it } from "node:test";
import { leafEnv } from "../src/config/docs.ts";
import { CLI_FLAGS } from "../src/config/load.ts";
import { CONFIG_LEAVES, MEMORY_LEAVES } from "../src/config/schema.ts";
import { mainTs, nodeBin, tempDir, waitFor, watchChild } from "../../e2e/support/archiver.ts";

const repo = resolve(import.meta.dirname, "../..");
const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { version: string };

const run = (args: string[], cwd = repo) =>
  spawnSync(nodeBin, [mainTs, ...args], { cwd, encoding: "utf8", env: { PATH: process.env["PATH"] ?? "" } });

describe("dfe-archiver's command line", () => {
  it("--help lists every flag and every env var with its default, on stdout, and exits 0", () => {
    for (const args of [["--help"], ["-h"], ["run", "--help"], ["run", "--config", "x.yaml", "-h"]]) {
      const r = run(args);
      assert.equal(r.status, 0, `${args.join(" ")}: ${r.stderr}`);
      assert.equal(r.stderr, "");
      assert.match(r.stdout, /^usage: dfe-archiver run \[FLAGS\]/m);
      for (const flag of Object.keys(CLI_FLAGS)) assert.match(r.stdout, new RegExp(`^  --${flag} `, "m"));
      assert.match(r.stdout, /^ {2}--metrics-addr HOST:PORT .*default: 0\.0\.0\.0:9090\./ms);
      for (const leaf of CONFIG_LEAVES)
        assert.match(
          r.stdout,
          new RegExp(`^  ${leafEnv(leaf, false)} +${leaf.key.replace(/[.[\]]/g, "\\$&")}; default:`, "m"),
        );
      for (const leaf of MEMORY_LEAVES)
        assert.match(r.stdout, new RegExp(`^  ${leafEnv(leaf, true)} +${leaf.key}; `, "m"));
      assert.match(r.stdout, /^ {2}DFE_ARCHIVER_CONFIG +--config; default: the first of config\.yaml/m);
      assert.match(r.stdout, /^ {2}LOG_LEVEL +logger\.level; default: info$/m);
    }
  });

  it("--version prints the package's version, the commit and Node's, and exits 0", () => {
    const r = run(["--version"]);
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stderr, "");
    const head = spawnSync("git", ["rev-parse", "--short=12", "HEAD"], { cwd: repo, encoding: "utf8" }).stdout.trim();
    assert.equal(r.stdout, `dfe-archiver ${pkg.version} (commit ${head}) on Node.js ${process.version}\n`);
    assert.equal(run(["run", "--version"]).stdout, r.stdout);
  });

  it("refuses an unknown flag, a stray argument or command, and none, with the usage: exit 2", () => {
    const cases: [string[], RegExp][] = [
      [["run", "--bogus"], /^dfe-archiver: Unknown option '--bogus'; the flags are --config, --log-level/],
      [["run", "extra"], /^dfe-archiver: run takes no arguments, and was given 'extra'/],
      [["--bogus"], /^dfe-archiver: unknown command '--bogus'/],
      [["archive"], /^dfe-archiver: unknown command 'archive'/],
      [[], /^dfe-archiver: no command given/],
    ];
    for (const [args, says] of cases) {
      const r = run(args);
      assert.equal(r.status, 2, `${args.join(" ")}: ${r.stderr}`);
      assert.equal(r.stdout, "");
      assert.match(r.stderr, says);
      assert.match(r.stderr, /^usage: dfe-archiver run \[FLAGS\]/m);
      assert.match(r.stderr, /Run 'dfe-archiver --help'/);
    }
  });

  it("binds a free port for --metrics-addr 127.0.0.1:0 and logs the address it got", async (t) => {
    const dir = tempDir(t);
    writeFileSync(join(dir, "config.yaml"), "{}\n");
    const out = run(["run", "--metrics-addr", "127.0.0.1:70000"], dir);
    assert.equal(out.status, 2);
    assert.match(out.stderr, /metrics\.addr: .*port from 1 to 65535 \(or 0 for any free port\).*from --metrics-addr/);

    const proc = spawn(nodeBin, [mainTs, "run", "--metrics-addr", "127.0.0.1:0"], {
      cwd: dir,
      env: { PATH: process.env["PATH"] ?? "" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const child = watchChild(t, proc);
    let addr: string | undefined;
    await waitFor(
      () => {
        for (const line of child.output().split("\n")) {
          const entry = /^\{/.test(line) ? (JSON.parse(line) as { msg?: string; addr?: string }) : {};
          if (entry.msg?.startsWith("serving /metrics")) addr = entry.addr;
        }
        return addr !== undefined;
      },
      30_000,
      () => `no "serving /metrics" line:\n${child.output()}`,
      child.done,
    );
    assert.match(addr!, /^127\.0\.0\.1:\d+$/);
    assert.notEqual(addr, "127.0.0.1:0");
    assert.equal((await fetch(`http://${addr}/livez`)).status, 200);
    proc.kill("SIGTERM");
    assert.equal(await child.exited, 0, child.output());
  });
});
