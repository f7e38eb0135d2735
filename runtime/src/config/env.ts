// The environment layer. Only DFE_ARCHIVER_ names are read (plus METRICS_ADDR and LOG_LEVEL): the names a key
// declares in its metadata directly, and DFE_ARCHIVER_A__B__C as the path a.b.c into the config. Any other name,
// old ones (ARCHIVER_X, KAFKA_X) included, reaches nothing, silently: a Kubernetes service link such as
// DFE_ARCHIVER_SERVICE_HOST must not refuse the boot either.
import {
  CONFIG_LEAVES,
  MEMORY_LEAVES,
  SECTION_KEYS,
  baseType,
  memorySchema,
  type Leaf,
  type MemoryConfig,
} from "./schema.ts";
import { faultAt, nearest, validateSchema, type ConfigFault } from "./validate.ts";

export const ENV_PREFIX = "DFE_ARCHIVER_";

/** The nested variable for a key: DFE_ARCHIVER_ARCHIVE__S3__REGION for archive.s3.region. */
export function nestedEnvName(path: readonly string[]): string {
  return ENV_PREFIX + path.map((p) => p.toUpperCase()).join("__");
}

const NUMBER = /^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$/;

/**
 * An environment value as the key's type: numbers, booleans (true/false/1/0), lists split on commas. An empty
 * scalar is unset (a Secret key mapped to nothing), while an empty list is the empty list.
 */
export function coerceEnvValue(leaf: Leaf, name: string, raw: string): { value: unknown } | { fault: ConfigFault } {
  const text = raw.trim();
  const bad = (what: string) => ({ fault: faultAt(leaf.path, `must be ${what}`, raw, () => name) });
  switch (baseType(leaf.schema)) {
    case "array":
      return {
        value: text
          .split(",")
          .map((s) => s.trim())
          .filter((s) => s !== ""),
      };
    case "number":
      if (text === "") return { value: undefined };
      return NUMBER.test(text) ? { value: Number(text) } : bad("a number");
    case "boolean":
      if (text === "") return { value: undefined };
      if (/^(?:true|1)$/i.test(text)) return { value: true };
      if (/^(?:false|0)$/i.test(text)) return { value: false };
      return bad("true, false, 1 or 0");
    default:
      return { value: text === "" ? undefined : raw };
  }
}

export interface EnvLayer {
  /** Each key the environment sets, with its value and the variable that set it. */
  values: Map<string, { leaf: Leaf; value: unknown; name: string }>;
  faults: ConfigFault[];
  warnings: string[];
}

const LEAF_BY_KEY = new Map(CONFIG_LEAVES.map((l) => [l.key, l]));
const KNOWN_NAMES = [
  ...CONFIG_LEAVES.flatMap((l) => [nestedEnvName(l.path), ...(l.meta.env ? [l.meta.env] : [])]),
  ...MEMORY_LEAVES.flatMap((l) => (l.meta.env ? [l.meta.env] : [])),
];

export function envLayer(env: NodeJS.ProcessEnv): EnvLayer {
  const layer: EnvLayer = { values: new Map(), faults: [], warnings: [] };
  const set = (leaf: Leaf, name: string, raw: string) => {
    const r = coerceEnvValue(leaf, name, raw);
    if ("fault" in r) layer.faults.push(r.fault);
    else if (r.value !== undefined) layer.values.set(leaf.key, { leaf, value: r.value, name });
  };
  // Nested names first, so a key's declared name, read second, wins when both are set.
  for (const [name, raw] of Object.entries(env)) {
    if (raw === undefined || !name.startsWith(ENV_PREFIX) || !name.includes("__")) continue;
    const key = name.slice(ENV_PREFIX.length).toLowerCase().split("__").join(".");
    const leaf = LEAF_BY_KEY.get(key);
    if (leaf) {
      if (leaf.meta.env !== name) set(leaf, name, raw);
      continue;
    }
    const near = SECTION_KEYS.has(key)
      ? `${key} is a section; set one of its keys, e.g. ${nestedEnvName(CONFIG_LEAVES.find((l) => l.key.startsWith(`${key}.`))?.path ?? [])}`
      : `did you mean ${nearest(name, KNOWN_NAMES) ?? "one of the variables in docs/configuration.md's config table"}?`;
    layer.faults.push({ key: name, message: `names no config key (${key}); ${near}` });
  }
  for (const leaf of CONFIG_LEAVES) {
    const name = leaf.meta.env;
    const raw = name === undefined ? undefined : env[name];
    if (name === undefined || raw === undefined) continue;
    const nested = nestedEnvName(leaf.path);
    if (nested !== name && env[nested] !== undefined && env[nested] !== raw)
      layer.warnings.push(`${name} and ${nested} both set ${leaf.key}; ${name} wins`);
    set(leaf, name, raw);
  }
  return layer;
}

/** The memory guard's settings, from DFE_ARCHIVER_MEMORY_* only. */
export function readMemoryEnv(env: NodeJS.ProcessEnv): { memory: MemoryConfig } | { faults: ConfigFault[] } {
  const input: Record<string, unknown> = {};
  const faults: ConfigFault[] = [];
  const sources = new Map<string, string>();
  for (const leaf of MEMORY_LEAVES) {
    const name = leaf.meta.env;
    const raw = name === undefined ? undefined : env[name];
    if (name === undefined || raw === undefined) continue;
    const r = coerceEnvValue(leaf, name, raw);
    if ("fault" in r) faults.push(r.fault);
    else if (r.value !== undefined) {
      input[leaf.path[1] as string] = r.value;
      sources.set(leaf.key, name);
    }
  }
  const r = validateSchema(memorySchema, input, (key) => sources.get(key), ["memory"]);
  if ("faults" in r) faults.push(...r.faults);
  return faults.length || !("data" in r) ? { faults } : { memory: r.data };
}

/** Parses .env text: KEY=VALUE lines, # comments, an optional `export `, values optionally quoted. */
export function parseDotenv(
  text: string,
  sourceName = ".env",
): { vars: Record<string, string>; faults: ConfigFault[] } {
  const vars: Record<string, string> = {};
  const faults: ConfigFault[] = [];
  text.split(/\r?\n/).forEach((line, i) => {
    const body = line.trim().replace(/^export\s+/, "");
    if (body === "" || body.startsWith("#")) return;
    const m = /^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/.exec(body);
    if (m === null) {
      faults.push({ key: `${sourceName}:${i + 1}`, message: "expected KEY=VALUE, a # comment or a blank line" });
      return;
    }
    const key = m[1] as string;
    let value = m[2] as string;
    const quote = value[0];
    if ((quote === '"' || quote === "'") && value.length >= 2 && value.endsWith(quote)) {
      value = value.slice(1, -1);
      if (quote === '"')
        value = value.replace(/\\([nrt"\\])/g, (_, c: string) => ({ n: "\n", r: "\r", t: "\t" })[c] ?? c);
    } else if (quote === '"' || quote === "'") {
      faults.push({ key: `${sourceName}:${i + 1}`, message: `${key}: the value's closing ${quote} is missing` });
      return;
    } else value = value.replace(/\s+#.*$/, "");
    vars[key] = value;
  });
  return { vars, faults };
}
