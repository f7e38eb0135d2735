// The ArchivePipeline field reference of docs/archivepipeline.md, generated from the CRD's OpenAPI schema (crd.ts) so
// it says what `kubectl explain` says: scripts/generate.ts writes it between the markers, and a test fails when it is
// stale.
// A structural schema stores no defaults but spec.transport's, so crd.ts states each one as the description's closing
// "Default: ..." sentence; the table moves it to a column of its own.
import type { GeneratedBlock } from "../../../runtime/src/config/docs.ts";
import { crdObject, type JsonSchema } from "./crd.ts";
import { camelKey } from "./keys.ts";
import { SECRET_KEYS } from "./spec.ts";

const SECRET_PATHS = new Set(SECRET_KEYS.map((k) => `spec.${camelKey(k)}`));

/** One documented field: its path (spec.archive.minio.accessKey, status.conditions[].type) and its cells. */
export interface FieldRow {
  path: string;
  type: string;
  default: string;
  description: string;
}

const cell = (text: string) => text.replace(/\|/g, "\\|").replace(/\n/g, " ");
const code = (text: string) => `\`${text}\``;
const str = (node: JsonSchema, key: string) => (typeof node[key] === "string" ? (node[key] as string) : undefined);
const num = (node: JsonSchema, key: string) => (typeof node[key] === "number" ? (node[key] as number) : undefined);
const props = (node: JsonSchema) => (node["properties"] as Record<string, JsonSchema> | undefined) ?? {};
const itemsOf = (node: JsonSchema) => node["items"] as JsonSchema | undefined;
const valuesOf = (node: JsonSchema) => {
  const v = node["additionalProperties"];
  return typeof v === "object" && v !== null ? (v as JsonSchema) : undefined;
};
const nested = (node: JsonSchema) => Object.keys(props(node)).length > 0;

function bounds(node: JsonSchema): string[] {
  const out: string[] = [];
  const add = (key: string, text: (n: number) => string) => {
    const n = num(node, key);
    if (n !== undefined) out.push(text(n));
  };
  add("minimum", (n) => `≥ ${n}`);
  add("exclusiveMinimum", (n) => `> ${n}`);
  add("maximum", (n) => `≤ ${n}`);
  add("exclusiveMaximum", (n) => `< ${n}`);
  add("minLength", (n) => (n === 1 ? "non-empty" : `length ≥ ${n}`));
  add("maxLength", (n) => `length ≤ ${n}`);
  add("minItems", (n) => (n === 1 ? "non-empty" : `≥ ${n} items`));
  return out;
}

function baseType(node: JsonSchema): string {
  const enumValues = node["enum"] as unknown[] | undefined;
  if (enumValues) return enumValues.map((v) => code(String(v))).join(" | ");
  if (node["x-kubernetes-int-or-string"] === true) return "integer or string";
  const items = itemsOf(node);
  if (items) {
    const keys = node["x-kubernetes-list-map-keys"] as string[] | undefined;
    return `${baseType(items)}[]${keys ? ` (keyed by ${keys.map(code).join(", ")})` : ""}`;
  }
  const values = valuesOf(node);
  if (values) return `map of ${baseType(values)}`;
  const format = str(node, "format");
  return `${str(node, "type") ?? "value"}${format ? ` (${format})` : ""}`;
}

function typeOf(node: JsonSchema, path: string, required: boolean): string {
  const extra = path.endsWith("[]") ? [] : bounds(node);
  const text = SECRET_PATHS.has(path)
    ? "Secret reference"
    : `${baseType(node)}${extra.length ? ` (${extra.join(", ")})` : ""}`;
  return required ? `${text}, required` : text;
}

// A default the apiserver stores is the node's own; any other is the description's closing sentence.
const STATED_DEFAULT = /^(.*?)\s*Default: (.+)\.$/s;

// A required field, or an object whose fields carry the defaults, has none of its own: "-" rather than "unset".
function split(node: JsonSchema, required = false): { description: string; default: string } {
  const description = str(node, "description") ?? "";
  const stored = node["default"];
  if (stored !== undefined)
    return { description, default: code(typeof stored === "string" ? stored : JSON.stringify(stored)) };
  const m = STATED_DEFAULT.exec(description);
  if (!m) return { description, default: required || nested(node) ? "-" : "unset" };
  // One token (a value) is code; a sentence (a rule, "300 while offsets are held ...") is prose.
  const value = m[2] as string;
  return { description: m[1] as string, default: /\s/.test(value) || value.includes("`") ? value : code(value) };
}

/**
 * Every field under `node` (not `node` itself), depth first: objects with their own row, then their fields; a
 * Secret reference and a map as one row each; a list of objects as a row, then its items' fields under path[].
 */
export function fieldRows(node: JsonSchema, path: string): FieldRow[] {
  const rows: FieldRow[] = [];
  const required = new Set((node["required"] as string[] | undefined) ?? []);
  for (const [name, child] of Object.entries(props(node))) {
    const childPath = `${path}.${name}`;
    const req = required.has(name);
    rows.push({ path: childPath, type: typeOf(child, childPath, req), ...split(child, req) });
    if (SECRET_PATHS.has(childPath)) continue;
    rows.push(...fieldRows(child, childPath));
    const items = itemsOf(child);
    if (items && nested(items)) rows.push(...fieldRows(items, `${childPath}[]`));
  }
  return rows;
}

// The status is observed, never written by a user: its tables have no Default column.
function table(rows: FieldRow[], defaults: boolean): string {
  const cells = (r: FieldRow) =>
    defaults ? [code(r.path), r.type, r.default, r.description] : [code(r.path), r.type, r.description];
  return [
    defaults ? "| Field | Type | Default | Description |" : "| Field | Type | Description |",
    defaults ? "| --- | --- | --- | --- |" : "| --- | --- | --- |",
    ...rows.map((r) => `| ${cells(r).map(cell).join(" | ")} |`),
  ].join("\n");
}

const hasFields = (node: JsonSchema) => nested(node) || nested(itemsOf(node) ?? {});

/**
 * The spec and the status, as Markdown: a table of each one's plain fields, then a heading and table for each of
 * their sections (an object, or a list of objects), in the schema's order.
 */
export function renderFieldTables(): string {
  const version = (crdObject()["spec"] as { versions: { schema: { openAPIV3Schema: JsonSchema } }[] }).versions[0];
  const root = version?.schema.openAPIV3Schema ?? {};
  const parts: string[] = [];
  for (const top of ["spec", "status"]) {
    const node = props(root)[top] ?? {};
    const plain = Object.fromEntries(Object.entries(props(node)).filter(([, c]) => !hasFields(c)));
    parts.push(
      `### ${code(top)}`,
      str(node, "description") ?? "",
      table(fieldRows({ ...node, properties: plain }, top), top === "spec"),
    );
    for (const [name, child] of Object.entries(props(node))) {
      if (!hasFields(child)) continue;
      const path = `${top}.${name}`;
      const items = itemsOf(child);
      const rows = items ? fieldRows(items, `${path}[]`) : fieldRows(child, path);
      parts.push(`### ${code(path)}`, split(child).description, table(rows, top === "spec"));
    }
  }
  return parts.filter((p) => p !== "").join("\n\n");
}

export const CR_FIELDS: GeneratedBlock = {
  name: "ArchivePipeline fields",
  start: "<!-- crd-fields:start -->",
  end: "<!-- crd-fields:end -->",
  render: renderFieldTables,
};
