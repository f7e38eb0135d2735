// What --version prints for both programs: the package's version, the git commit it was built from when known, and
// the Node.js running it.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, realpathSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

// Replaced by the commit in a build (scripts/build.ts defines it); undeclared in the sources.
declare const DFE_ARCHIVER_COMMIT: string | undefined;

/** The directory of dfe-archiver's package.json, above this file (in the source tree or in dist/). */
function packageRoot(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); dir !== dirname(dir); dir = dirname(dir)) {
    const file = join(dir, "package.json");
    if (existsSync(file) && (JSON.parse(readFileSync(file, "utf8")) as { name?: string }).name === "dfe-archiver")
      return dir;
  }
  throw new Error("dfe-archiver's package.json not found above this module");
}

export function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(join(packageRoot(), "package.json"), "utf8")) as { version?: string };
  if (pkg.version === undefined) throw new Error("dfe-archiver's package.json has no version");
  return pkg.version;
}

/**
 * The commit: a build's, else, run from the sources, the checkout's HEAD (only when the package's directory is the
 * checkout's top, so that a copy inside another repository never reports that repository's commit).
 */
export function gitCommit(): string | undefined {
  if (typeof DFE_ARCHIVER_COMMIT === "string") return DFE_ARCHIVER_COMMIT || undefined;
  const root = packageRoot();
  try {
    const [top, head] = execFileSync("git", ["rev-parse", "--show-toplevel", "--short=12", "HEAD"], {
      cwd: root,
      encoding: "utf8",
      stdio: ["ignore", "pipe", "ignore"],
      timeout: 5000,
    }).split("\n");
    return top === realpathSync(root) && head ? head : undefined;
  } catch {
    return undefined;
  }
}

/** One line: `program 0.1.0 (commit 0123456789ab) on Node.js v24.21.0`; the commit is left out when unknown. */
export function versionLine(program: string): string {
  const commit = gitCommit();
  return `${program} ${packageVersion()}${commit === undefined ? "" : ` (commit ${commit})`} on Node.js ${process.version}`;
}
