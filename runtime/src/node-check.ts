// Both programs' entries call this before anything else: under an older Node (the machine's own on the PATH, say)
// they would otherwise die on the first Node 24 API they touch, with an error that names the API but not the cause.
// It runs on that older Node, so it uses nothing newer than Node 18 has.
import { relative } from "node:path";

/** The Node.js major both programs need; package.json's engines.node says the same (a test holds them equal). */
export const NODE_MAJOR = 24;

/** The one-line refusal for a Node older than NODE_MAJOR, or undefined when this Node will do. */
export function nodeRefusal(program: string, version: string, execPath: string, script: string): string | undefined {
  const major = Number(/^v?(\d+)\./.exec(version)?.[1]);
  if (major >= NODE_MAJOR) return undefined;
  return (
    `${program}: needs Node.js ${NODE_MAJOR} or later, and this is Node.js ${version} (${execPath}); ` +
    `run it as node_modules/.bin/node ${script} (the Node ${NODE_MAJOR} that npm ci installs in a checkout), ` +
    `or run its container image`
  );
}

/** Exits 1 with the refusal on stderr when this Node is too old for `program`. */
export function refuseUnsupportedNode(program: string): void {
  const path = process.argv[1] ?? "";
  const near = relative(process.cwd(), path);
  const script = near === "" || near.startsWith("..") ? path : near;
  const refusal = nodeRefusal(program, process.version, process.execPath, script);
  if (refusal === undefined) return;
  process.stderr.write(`${refusal}\n`);
  process.exit(1);
}
