// Regenerates the checked-in text that has a source of truth elsewhere: README.md's config table, from the schema,
// and the ArchivePipeline CRD, from the schema and operator/src/api/, with its copies in the Helm chart and kustomize.
// Usage: node_modules/.bin/node scripts/generate.ts [README path] [CRD path]
//   (defaults: README.md at the repo root, and the CRD at crds/<name>.yaml in the README's directory; the copies are
//   written only with the defaults)
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { TABLE_END, TABLE_START, spliceConfigTable } from "../runtime/src/config/docs.ts";
import { CRD_COPIES, CRD_FILE, crdYaml } from "../operator/src/api/crd.ts";

const readmePath = resolve(process.argv[2] ?? resolve(import.meta.dirname, "..", "README.md"));
if (!existsSync(readmePath)) {
  process.stderr.write(`generate: ${readmePath} does not exist\n`);
  process.exit(1);
}
const before = readFileSync(readmePath, "utf8");
const after = spliceConfigTable(before);
if (after === undefined) {
  process.stderr.write(`generate: ${readmePath} has no ${TABLE_START} ... ${TABLE_END} block for the config table\n`);
  process.exit(1);
}
if (after !== before) writeFileSync(readmePath, after);
process.stdout.write(`generate: ${readmePath} config table ${after === before ? "already current" : "rewritten"}\n`);

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
