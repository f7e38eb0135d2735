// Regenerates the checked-in text that has a source of truth elsewhere: the generated blocks of the docs/ pages
// (scripts/doc-pages.ts: the config table, from the schema; the ArchivePipeline fields, from the CRD; the metrics
// table, from the runtime's registry), the ArchivePipeline CRD, from the schema and operator/src/api/, with its copies
// in the Helm chart and kustomize; and the runtime's WebAssembly modules, from their .wat sources
// (scripts/wasm-modules.ts).
// Usage: node_modules/.bin/node scripts/generate.ts [ROOT]
//   ROOT (default: the repository) holds the pages (ROOT/docs/...) and the CRD with its copies (ROOT/crds/...); the
//   WebAssembly modules are written only without it.
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { spliceBlock } from "../runtime/src/config/docs.ts";
import { CRD_COPIES, CRD_FILE, crdYaml } from "../operator/src/api/crd.ts";
import { GENERATED_PAGES } from "./doc-pages.ts";
import { WASM_MODULES, wasmModuleText } from "./wasm-modules.ts";

const root = resolve(process.argv[2] ?? resolve(import.meta.dirname, ".."));

// Every page or none: with one page or one block's markers missing, no page is written.
const missing: string[] = [];
const writes: { path: string; text: string; name: string; changed: boolean }[] = [];
for (const { file, block } of GENERATED_PAGES) {
  const path = join(root, file);
  const before = existsSync(path) ? readFileSync(path, "utf8") : undefined;
  const after = before === undefined ? undefined : spliceBlock(before, block);
  if (after === undefined) missing.push(`${path} has no ${block.start} ... ${block.end} block for the ${block.name}`);
  else writes.push({ path, text: after, name: block.name, changed: after !== before });
}
if (missing.length > 0) {
  process.stderr.write(`generate: ${missing.join("; ")}\n`);
  process.exit(1);
}
for (const w of writes) {
  if (w.changed) writeFileSync(w.path, w.text);
  process.stdout.write(`generate: ${w.path} ${w.changed ? `${w.name} rewritten` : "already current"}\n`);
}

const crd = crdYaml();
for (const crdPath of [CRD_FILE, ...CRD_COPIES].map((f) => resolve(root, f))) {
  const current = existsSync(crdPath) && readFileSync(crdPath, "utf8") === crd;
  if (!current) {
    mkdirSync(dirname(crdPath), { recursive: true });
    writeFileSync(crdPath, crd);
  }
  process.stdout.write(`generate: ${crdPath} ${current ? "already current" : "rewritten"}\n`);
}

// The WebAssembly modules belong to the sources, not to a copy's root: written only with the defaults.
if (process.argv[2] === undefined) {
  for (const m of WASM_MODULES) {
    const text = await wasmModuleText(m);
    const current = existsSync(m.file) && readFileSync(m.file, "utf8") === text;
    if (!current) writeFileSync(m.file, text);
    process.stdout.write(`generate: ${m.file} ${current ? "already current" : "rewritten"}\n`);
  }
}
