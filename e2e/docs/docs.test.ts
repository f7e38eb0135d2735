// The README and the docs/ pages as a newcomer reads them: every relative link and anchor resolves, every repository
// path they name exists, each page is linked from the README, the README stays a five-minute read, its layout names
// every directory there is, and its first pipeline is one the runtime and the operator accept.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, it } from "node:test";
import { parse } from "yaml";
import { loadConfig } from "../../runtime/src/config/load.ts";
import { validateSpec, type ArchivePipeline } from "../../operator/src/api/spec.ts";
import { tempDir } from "../support/archiver.ts";
import { ROOT } from "../support/docs.ts";

const README = "README.md";
const PAGES = [
  README,
  ...readdirSync(join(ROOT, "docs"))
    .filter((f) => f.endsWith(".md"))
    .map((f) => `docs/${f}`),
];
const MAX_README_LINES = 250;
const text = (file: string) => readFileSync(join(ROOT, file), "utf8");

/** A page split into its prose (fenced blocks blanked, so their lines keep their numbers) and its fenced blocks. */
function split(markdown: string): { prose: string[]; fences: { lang: string; body: string }[] } {
  const prose: string[] = [];
  const fences: { lang: string; body: string }[] = [];
  let open: { lang: string; lines: string[]; indent: number } | undefined;
  for (const line of markdown.split("\n")) {
    const fence = /^(\s*)```(\S*)/.exec(line);
    if (open === undefined && fence) open = { lang: fence[2] ?? "", lines: [], indent: fence[1]?.length ?? 0 };
    else if (open !== undefined && fence) {
      fences.push({ lang: open.lang, body: open.lines.map((l) => l.slice(open!.indent)).join("\n") });
      open = undefined;
    } else if (open !== undefined) open.lines.push(line);
    prose.push(open === undefined && !fence ? line : "");
  }
  assert.equal(open, undefined, "a fenced block is never closed");
  return { prose, fences };
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, each space a hyphen, repeats numbered. */
function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of split(markdown).prose) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)?.[1];
    if (heading === undefined) continue;
    const slug = heading
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\p{M}\s_-]/gu, "")
      .replace(/\s/g, "-");
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    out.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return out;
}

/** Each inline link's target with its line, code spans left out (a link inside one is text). */
function links(markdown: string): { target: string; line: number }[] {
  return split(markdown).prose.flatMap((line, i) =>
    [...line.replace(/`[^`]*`/g, "").matchAll(/\[[^\]]*\]\(([^)\s]+)\)/g)].map((m) => ({ target: m[1]!, line: i + 1 })),
  );
}

// Top-level directories whose paths a page names as repository paths.
const REPO_PATH = /^(?:runtime|operator|e2e|scripts|bench|config|charts|crds|docs|docker|proto)\/[\w./-]*$/;
// Named in a code span, but not a path in this repository: the runtime's config search, relative to its working dir.
const NOT_REPO_PATHS = new Set(["config/settings.yaml"]);

/** Every word of a page's code spans and fenced blocks that is a repository path (no glob, no placeholder). */
function repoPaths(markdown: string): { path: string; line: number }[] {
  const { prose, fences } = split(markdown);
  const words = [
    ...prose.flatMap((line, i) =>
      [...line.matchAll(/`([^`]+)`/g)].flatMap((m) => m[1]!.split(/\s+/).map((w) => ({ w, line: i + 1 }))),
    ),
    ...fences.flatMap((f) => f.body.split(/\s+/).map((w) => ({ w, line: 0 }))),
  ];
  return words.filter(({ w }) => REPO_PATH.test(w) && !NOT_REPO_PATHS.has(w)).map(({ w, line }) => ({ path: w, line }));
}

/** Those of `paths` git ignores (made by a run, as e2e/testbed/testbed.env is). */
function ignored(paths: string[]): Set<string> {
  const r = spawnSync("git", ["check-ignore", "--stdin"], { cwd: ROOT, input: paths.join("\n"), encoding: "utf8" });
  assert.ok(r.status === 0 || r.status === 1, `git check-ignore: ${r.stderr}`); // 1: none is ignored
  return new Set(r.stdout.split("\n").filter(Boolean));
}

describe("README and docs/", () => {
  it("link only to files and anchors that exist", () => {
    const broken: string[] = [];
    for (const page of PAGES) {
      for (const { target, line } of links(text(page))) {
        if (/^[a-z][a-z+.-]*:/i.test(target)) continue; // https:, mailto:: not ours to check offline
        const [path = "", anchor] = target.split("#", 2);
        const file = path === "" ? join(ROOT, page) : resolve(dirname(join(ROOT, page)), decodeURI(path));
        const where = `${page}:${line} -> ${target}`;
        if (relative(ROOT, file).startsWith("..")) broken.push(`${where}: outside the repository`);
        else if (!existsSync(file)) broken.push(`${where}: no such file`);
        else if (anchor !== undefined) {
          if (statSync(file).isDirectory() || !file.endsWith(".md")) broken.push(`${where}: an anchor in a non-page`);
          else if (!anchors(readFileSync(file, "utf8")).has(anchor))
            broken.push(`${where}: no heading has this anchor`);
        }
      }
    }
    assert.deepEqual(broken, [], "fix the link, or the heading it points at (anchors are GitHub's)");
  });

  it("name only repository paths that exist", () => {
    const named = PAGES.flatMap((page) => repoPaths(text(page)).map((p) => ({ ...p, page })));
    const missing = named.filter(({ path }) => !existsSync(join(ROOT, path)));
    const notIgnored = new Set(missing.map((m) => m.path));
    for (const p of ignored([...notIgnored])) notIgnored.delete(p);
    assert.deepEqual(
      missing.filter((m) => notIgnored.has(m.path)).map((m) => `${m.page}:${m.line || "(fenced block)"} ${m.path}`),
      [],
      "a page names a path that is not in the repository: fix it to where the file is now",
    );
  });

  it("are each linked from the README", () => {
    const linked = new Set(links(text(README)).map((l) => l.target.split("#")[0]));
    for (const page of PAGES.filter((p) => p !== README)) assert.ok(linked.has(page), `${page}: add it to README.md`);
  });

  it(`keep the README under ${MAX_README_LINES} lines`, () => {
    const lines = text(README).split("\n").length;
    assert.ok(lines < MAX_README_LINES, `README.md has ${lines} lines: move the detail to a page under docs/`);
  });

  it("lay out every directory there is", () => {
    const layout = split(text(README)).fences.find((f) => /^runtime\/\s/m.test(f.body))?.body;
    assert.ok(layout, "README.md has no Layout block");
    // An entry is a line starting at column 0 with its continuation lines.
    const entries = new Map<string, string>();
    let current = "";
    for (const line of layout.split("\n")) {
      const name = /^(\S+\/)\s/.exec(line)?.[1];
      if (name !== undefined) entries.set((current = name), line);
      else entries.set(current, `${entries.get(current) ?? ""} ${line.trim()}`);
    }
    const tracked = execFileSync("git", ["ls-files"], { cwd: ROOT, encoding: "utf8" }).split("\n");
    // The directories holding a tracked file directly under `under`, dot-directories left out.
    const dirs = (under: string) =>
      [
        ...new Set(
          tracked
            .filter((f) => f.startsWith(under) && f.slice(under.length).includes("/"))
            .map((f) => f.slice(under.length).split("/")[0]!),
        ),
      ]
        .filter((d) => !d.startsWith("."))
        .sort();
    assert.deepEqual([...entries.keys()].map((e) => e.slice(0, -1)).sort(), dirs(""));
    for (const program of ["runtime", "operator"]) {
      const listed = /src\/\{([^}]*)\}/.exec(entries.get(`${program}/`) ?? "")?.[1];
      assert.ok(listed, `${program}/ in the Layout names no src/{...}`);
      assert.deepEqual(
        listed
          .split(",")
          .map((s) => s.trim())
          .sort(),
        dirs(`${program}/src/`),
        `the Layout's ${program}/src/{...} against ${program}/src/'s directories`,
      );
    }
  });

  it("give a first pipeline the operator accepts, as the sample it says to copy has it", () => {
    const shown = split(text(README))
      .fences.filter((f) => f.lang === "yaml")
      .map((f) => parse(f.body) as ArchivePipeline)
      .filter((o) => o.kind === "ArchivePipeline");
    assert.equal(shown.length, 1, "README.md shows one ArchivePipeline");
    const v = validateSpec(shown[0]!.spec);
    assert.ok(!("faults" in v), JSON.stringify("faults" in v ? v.faults : []));
    const sample = readFileSync(join(ROOT, "config/samples/archiver_v1alpha1_archivepipeline_minio.yaml"), "utf8")
      .split(/^---$/m)
      .map((d) => parse(d) as ArchivePipeline)
      .find((o) => o.kind === "ArchivePipeline");
    assert.deepEqual(shown[0], sample);
  });

  it("give a first runtime command whose environment and flags the runtime accepts", (t) => {
    const block = split(text(README)).fences.find((f) => f.body.includes("runtime/src/main.ts run"))?.body;
    assert.ok(block, "README.md has no command running runtime/src/main.ts");
    // The command's lines, from its first variable to `run`'s flags, continuations joined.
    const command = block
      .replace(/\\\n\s*/g, " ")
      .split("\n")
      .find((l) => l.includes("runtime/src/main.ts run"))!;
    const cwd = tempDir(t);
    const env = Object.fromEntries(
      [...command.matchAll(/(\w+)=(\S+)/g)].map((m) => [m[1]!, m[2]!.replace("$PWD", cwd)]),
    );
    const argv = command.slice(command.indexOf("main.ts run") + "main.ts ".length).split(/\s+/);
    const { config } = loadConfig({ argv: argv.slice(1), env, cwd });
    assert.deepEqual(config.kafka.brokers, ["127.0.0.1:29092"]);
    assert.deepEqual(config.kafka.topics, ["events"]);
    assert.equal(config.archive.destination, `file://${cwd}/archive`);
    assert.equal(config.dlq.enabled, false);
    assert.equal(config.logger.format, "text");
    assert.equal(config.metrics.addr, "127.0.0.1:0");
  });
});
