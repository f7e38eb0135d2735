import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, describe, it } from "node:test";
import { programUses, readPackageList, type Use } from "./programs.ts";

const repo = join(import.meta.dirname, "..", "..");
const listFile = join(repo, "scripts", "packages.txt");
const show = (u: Use) => `${u.file}:${u.line} ${u.program}`;

describe("the programs the project runs", () => {
  const list = readPackageList(listFile);
  const uses = programUses(repo, list);

  it("are each provided: by scripts/packages.txt, the testbed, npm ci or the machine's toolchains", () => {
    const unprovided = uses.filter((u) => u.provider === undefined).map(show);
    assert.deepEqual(
      unprovided,
      [],
      "add each to scripts/packages.txt (with its Debian package) or build it in e2e/testbed",
    );
  });

  it("include every program scripts/packages.txt lists (no entry outlives its last use)", () => {
    const run = new Set(uses.map((u) => u.program.split("/").at(-1)));
    const unused = [...list.keys()].filter((p) => !run.has(p));
    assert.deepEqual(unused, [], "remove these from scripts/packages.txt: nothing runs them");
  });
});

describe("the provisioning check on fixtures", () => {
  const root = mkdtempSync(join(tmpdir(), "programs-fixture-"));
  after(() => rmSync(root, { recursive: true, force: true }));
  const write = (file: string, text: string) => {
    mkdirSync(join(root, dirname(file)), { recursive: true });
    writeFileSync(join(root, file), text);
  };
  write("scripts/packages.txt", "# fixture\nzstd: zstd\ncoreutils: cat timeout\ndash: sh\n-: node\n");
  write(
    "runtime/test/tools.test.ts",
    [
      'import { execFileSync, spawn as run } from "node:child_process";',
      'import { need } from "../../e2e/support/testbed.ts";',
      'const TOOLS: Record<string, { command: string }> = { zstd: { command: "zstd" }, cow: { command: "cowsay" } };',
      "export const decode = (name: string) => execFileSync(TOOLS[name]!.command, []);",
      'run("figlet", ["hi"]);',
      'run("sh", ["-c", "zstd -q && lolcat x"]);',
      'execFileSync(process.argv[2] ?? "zstd");',
      'execFileSync(need("TESTBED_NOPE"));',
      'execFileSync(need("TESTBED_YES"));',
      "/x/.exec('not a spawn');",
      'function older() { const path = "/usr/games/sl"; return { path, version: "1" }; }',
      "execFileSync(older().path);",
      "",
    ].join("\n"),
  );
  write(
    "e2e/testbed/thing/up.sh",
    "#!/usr/bin/env bash\nf() { zstd -q; }\nf\ntimeout 5 toilet hi | cat\ntb_env thing TESTBED_YES /bin/true\n",
  );
  write("e2e/testbed/lib.sh", "tb_env() { :; }\n");

  it("names the file, line and program of each spawn nothing provides", () => {
    const uses = programUses(root, readPackageList(join(root, "scripts", "packages.txt")));
    assert.deepEqual(uses.filter((u) => u.provider === undefined).map(show), [
      "e2e/testbed/thing/up.sh:4 toilet",
      "runtime/test/tools.test.ts:4 cowsay",
      "runtime/test/tools.test.ts:5 figlet",
      "runtime/test/tools.test.ts:6 lolcat",
      "runtime/test/tools.test.ts:7 (cannot tell: process.argv)",
      "runtime/test/tools.test.ts:8 TESTBED_NOPE",
      "runtime/test/tools.test.ts:12 /usr/games/sl",
    ]);
    assert.deepEqual(uses.filter((u) => u.provider !== undefined).map(show), [
      "e2e/testbed/thing/up.sh:2 zstd",
      "e2e/testbed/thing/up.sh:3 f",
      "e2e/testbed/thing/up.sh:4 timeout",
      "e2e/testbed/thing/up.sh:4 cat",
      "e2e/testbed/thing/up.sh:5 tb_env",
      "runtime/test/tools.test.ts:4 zstd",
      "runtime/test/tools.test.ts:6 sh",
      "runtime/test/tools.test.ts:6 zstd",
      "runtime/test/tools.test.ts:7 zstd",
      "runtime/test/tools.test.ts:9 TESTBED_YES",
    ]);
  });

  it("refuses a list line it cannot read, naming the line", () => {
    write("bad.txt", "zstd: zstd\nkcat\n");
    assert.throws(() => readPackageList(join(root, "bad.txt")), /bad\.txt:2: expected "PACKAGE: PROGRAM\.\.\."/);
  });
});
