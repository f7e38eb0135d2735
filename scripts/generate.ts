// Regenerates the checked-in text that has a source of truth elsewhere: README.md's generated blocks (the config
// table, from the schema; the ArchivePipeline fields, from the CRD; the metrics table, from the runtime's registry),
// the ArchivePipeline CRD, from the schema and operator/src/api/, with its copies in the Helm chart and kustomize;
// and the runtime's WebAssembly modules, from their .wat sources (scripts/wasm-modules.ts).
// Usage: node_modules/.bin/node scripts/generate.ts [README path] [CRD path]
//   (defaults: README.md at the repo root, and the CRD at crds/<name>.yaml in the README's directory; the copies are
//   written only with the defaults)
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { CONFIG_TABLE, spliceBlock } from "../runtime/src/config/docs.ts";
import { METRICS_TABLE } from "../runtime/src/observe/docs.ts";
import { CRD_COPIES, CRD_FILE, crdYaml } from "../operator/src/api/crd.ts";
import { CR_FIELDS } from "../operator/src/api/docs.ts";
import { WASM_MODULES, wasmModuleText } from "./wasm-modules.ts";

const readmePath = resolve(process.argv[2] ?? resolve(import.meta.dirname, "..", "README.md"));
if (!existsSync(readmePath)) {
  process.stderr.write(`generate: ${readmePath} does not exist\n`);
  process.exit(1);
}
const before = readFileSync(readmePath, "utf8");
// Every block or none: a README missing one block's markers is left as it was.
let after = before;
const missing: string[] = [];
const changed: string[] = [];
for (const block of [CONFIG_TABLE, CR_FIELDS, METRICS_TABLE]) {
  const spliced = spliceBlock(after, block);
  if (spliced === undefined) missing.push(`${block.start} ... ${block.end} block for the ${block.name}`);
  else {
    if (spliced !== after) changed.push(block.name);
    after = spliced;
  }
}
if (missing.length > 0) {
  process.stderr.write(`generate: ${readmePath} has no ${missing.join(", and no ")}\n`);
  process.exit(1);
}
if (after !== before) writeFileSync(readmePath, after);
process.stdout.write(
  `generate: ${readmePath} ${changed.length > 0 ? `${changed.join(", ")} rewritten` : "already current"}\n`,
);

const crd = crdYaml();
const crdPaths =
  process.argv[3] === undefined
    ? [CRD_FILE, ...CRD_COPIES].map((f) => resolve(dirname(readmePath), f))
    : [resolve(process.argv[3])];
for (const crdPath of crdPaths) {
  const current = existsSync(crdPath) && readFileSync(crdPath, "utf8") === crd;
  if (!current) {
    mkdirSync(dirname(crdPath), { recursive: true });
    writeFileSync(crdPath, crd);
  }
  process.stdout.write(`generate: ${crdPath} ${current ? "already current" : "rewritten"}\n`);
}

// The WebAssembly modules belong to the sources, not to a README's directory: written only with the defaults.
if (process.argv[2] === undefined) {
  for (const m of WASM_MODULES) {
    const text = await wasmModuleText(m);
    const current = existsSync(m.file) && readFileSync(m.file, "utf8") === text;
    if (!current) writeFileSync(m.file, text);
    process.stdout.write(`generate: ${m.file} ${current ? "already current" : "rewritten"}\n`);
  }
}
