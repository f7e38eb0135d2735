// The config table of docs/configuration.md, generated from the schema so the two cannot drift: scripts/generate.ts
// writes it between the markers, and a test fails when the page's copy is stale. The marker handling is shared by the
// other generated blocks of docs/ (the ArchivePipeline fields of archivepipeline.md, the metrics table of metrics.md).
import { z } from "zod";
import { nestedEnvName } from "./env.ts";
import { CONFIG_LEAVES, MEMORY_LEAVES, type Leaf } from "./schema.ts";

export const TABLE_START = "<!-- config-table:start -->";
export const TABLE_END = "<!-- config-table:end -->";

interface JsonField {
  type?: string;
  enum?: unknown[];
  default?: unknown;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  items?: JsonField;
}

const cell = (text: string) => text.replace(/\|/g, "\\|");
const code = (text: string) => `\`${text}\``;

function typeOf(leaf: Leaf, js: JsonField): string {
  let text: string;
  if (js.enum) text = js.enum.map((v) => code(String(v))).join(" | ");
  else if (js.type === "array") text = `${js.items?.type ?? "value"}[]`;
  else {
    const bounds: string[] = [];
    if (js.minimum !== undefined && js.minimum > Number.MIN_SAFE_INTEGER) bounds.push(`≥ ${js.minimum}`);
    if (js.exclusiveMinimum !== undefined) bounds.push(`> ${js.exclusiveMinimum}`);
    if (js.maximum !== undefined && js.maximum < Number.MAX_SAFE_INTEGER) bounds.push(`≤ ${js.maximum}`);
    if (js.exclusiveMaximum !== undefined) bounds.push(`< ${js.exclusiveMaximum}`);
    text = `${js.type ?? "value"}${bounds.length ? ` (${bounds.join(", ")})` : ""}`;
  }
  return leaf.meta.secret ? `${text}, secret` : text;
}

/** A key's default: the schema's value (a string as is, else JSON) as `literal`, else the derived one, else unset. */
export function leafDefault(leaf: Leaf): { text: string; literal: boolean } {
  const js = z.toJSONSchema(leaf.schema, { io: "input" }) as JsonField;
  if (js.default !== undefined)
    return { text: typeof js.default === "string" ? js.default : JSON.stringify(js.default), literal: true };
  return { text: leaf.meta.derivedDefault ?? "unset", literal: false };
}

/** The env var a key is read from: its own name, else (unless env-only, as the memory keys are) the nested one. */
export function leafEnv(leaf: Leaf, envOnly: boolean): string | undefined {
  return leaf.meta.env ?? (envOnly ? undefined : nestedEnvName(leaf.path));
}

function defaultOf(leaf: Leaf): string {
  const d = leafDefault(leaf);
  return d.literal ? code(d.text) : d.text;
}

function envOf(leaf: Leaf, envOnly: boolean): string {
  const names = [leafEnv(leaf, envOnly), leaf.meta.cli];
  return names
    .filter((n) => n !== undefined)
    .map(code)
    .join(" / ");
}

function row(leaf: Leaf, envOnly: boolean): string {
  const js = z.toJSONSchema(leaf.schema, { io: "input" }) as JsonField;
  const cells = [code(leaf.key), typeOf(leaf, js), defaultOf(leaf), envOf(leaf, envOnly), leaf.meta.description ?? ""];
  return `| ${cells.map(cell).join(" | ")} |`;
}

/** Every key as a Markdown table: key, type or allowed values, default, env var (or flag), description. */
export function renderConfigTable(): string {
  return [
    "| Key | Type | Default | Env var / flag | Description |",
    "| --- | --- | --- | --- | --- |",
    ...CONFIG_LEAVES.map((l) => row(l, false)),
    ...MEMORY_LEAVES.map((l) => row(l, true)),
  ].join("\n");
}

/** A block of a docs/ page generated from a source of truth, between two markers, that scripts/generate.ts rewrites. */
export interface GeneratedBlock {
  /** What the block holds, for messages ("config table"). */
  readonly name: string;
  readonly start: string;
  readonly end: string;
  readonly render: () => string;
}

export const CONFIG_TABLE: GeneratedBlock = {
  name: "config table",
  start: TABLE_START,
  end: TABLE_END,
  render: renderConfigTable,
};

function markers(page: string, block: GeneratedBlock): { start: number; end: number } | undefined {
  const start = page.indexOf(block.start);
  const end = page.indexOf(block.end);
  return start === -1 || end < start ? undefined : { start: start + block.start.length, end };
}

/** The text between a block's markers, trimmed, or undefined when the markers are missing. */
export function readBlock(page: string, block: GeneratedBlock): string | undefined {
  const m = markers(page, block);
  return m && page.slice(m.start, m.end).trim();
}

/** The page with a block's text replaced by its current rendering; undefined without the markers. */
export function spliceBlock(page: string, block: GeneratedBlock): string | undefined {
  const m = markers(page, block);
  return m && `${page.slice(0, m.start)}\n${block.render()}\n${page.slice(m.end)}`;
}
