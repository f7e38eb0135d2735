// Turns the schema's verdict into refusals a person can act on: each names the dotted key, what was given (never a
// secret's value), where it came from, and the allowed values or the fix. Every fault is collected before refusing.
import type { z } from "zod";
import { ConfigError } from "../errors.ts";
import {
  CONFIG_LEAVES,
  SECRET_PATHS,
  SECTION_KEYS,
  configSchema,
  configShape,
  crossSectionFaults,
  objectOf,
  type Config,
} from "./schema.ts";

export interface ConfigFault {
  /** Dotted key (kafka.topic_include[2]), or the file or variable the fault is in when it precedes any key. */
  key: string;
  message: string;
}

/** Every fault that refuses the boot, in one error; `faults` lists them for a status condition. */
export class ConfigFaultsError extends ConfigError {
  readonly faults: readonly ConfigFault[];

  constructor(faults: readonly ConfigFault[]) {
    const only = faults.length === 1 ? faults[0] : undefined;
    super(
      only?.key ?? "config",
      only?.message ??
        `${faults.length} faults refuse the boot:\n${faults.map((f) => `  - ${f.key}: ${f.message}`).join("\n")}`,
    );
    this.faults = faults;
  }
}

/** kafka.topic_include[2] for ["kafka", "topic_include", 2]. */
export function dottedKey(path: readonly PropertyKey[]): string {
  let out = "";
  for (const seg of path) {
    if (typeof seg === "number") out += `[${seg}]`;
    else out += out === "" ? String(seg) : `.${String(seg)}`;
  }
  return out;
}

function distance(a: string, b: string): number {
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let diag = row[0] as number;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const up = row[j] as number;
      row[j] = Math.min(up + 1, (row[j - 1] as number) + 1, diag + (a[i - 1] === b[j - 1] ? 0 : 1));
      diag = up;
    }
  }
  return row[b.length] as number;
}

/** The candidate closest to `name` when it is close enough to be a likely typo. */
export function nearest(name: string, candidates: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestD = Infinity;
  for (const c of candidates) {
    const d = distance(name.toLowerCase(), c.toLowerCase());
    if (d < bestD) [best, bestD] = [c, d];
  }
  return bestD <= Math.max(2, Math.floor(name.length / 3)) ? best : undefined;
}

const ALL_KEYS = [...SECTION_KEYS, ...CONFIG_LEAVES.map((l) => l.key)];

function unknownKeyMessage(parent: (string | number)[], name: string): string {
  let obj: z.ZodObject | undefined = configSchema;
  for (const seg of parent) obj = obj && objectOf(obj.shape[String(seg)] as z.ZodType);
  const siblings = obj ? Object.keys(obj.shape) : [];
  const prefix = parent.length ? `${dottedKey(parent)}.` : "";
  const near = nearest(name, siblings);
  if (near !== undefined) return `is not a known key; did you mean ${prefix}${near}?`;
  // A key put in the wrong section: the same name elsewhere is the likeliest fix.
  const elsewhere = ALL_KEYS.find((k) => k.split(".").at(-1) === name) ?? nearest(name, ALL_KEYS);
  if (elsewhere !== undefined) return `is not a known key; did you mean ${elsewhere}?`;
  return `is not a known key; known keys ${parent.length ? `under ${dottedKey(parent)}` : "at the top level"}: ${siblings.join(", ")}`;
}

const EXPECTED: Record<string, string> = {
  int: "an integer",
  number: "a number",
  string: "a string",
  boolean: "true or false",
  array: "a list",
  object: "a mapping",
};

// Messages for the checks the schema leaves to zod's wording; a message written into the schema wins over these.
const messages: z.core.$ZodErrorMap = (iss) => {
  switch (iss.code) {
    case "invalid_type":
      return `must be ${EXPECTED[iss.expected] ?? iss.expected}`;
    case "invalid_value":
      return `must be one of: ${iss.values.map((v) => String(v)).join(", ")}`;
    case "too_small":
      if (iss.origin === "array") return `must list at least ${String(iss.minimum)}`;
      if (iss.origin === "string") return "must not be empty";
      return `must be ${iss.inclusive ? "at least" : "above"} ${String(iss.minimum)}`;
    case "too_big":
      if (iss.origin === "array") return `must list at most ${String(iss.maximum)}`;
      return `must be ${iss.inclusive ? "at most" : "below"} ${String(iss.maximum)}`;
    default:
      return undefined;
  }
};

function shown(input: unknown): string {
  const text = JSON.stringify(input) ?? String(input);
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

function isSecret(path: readonly PropertyKey[]): boolean {
  const key = dottedKey(path);
  return SECRET_PATHS.some((s) => key === s || key.startsWith(`${s}.`));
}

/** Where the value at a dotted key came from (a variable, a flag, the file), for the refusal. */
export type SourceOf = (key: string) => string | undefined;

/** One refusal line for a value at `path`: the message, what was given (a secret shown redacted) and its source. */
export function faultAt(
  path: readonly PropertyKey[],
  message: string,
  input: unknown,
  sourceOf?: SourceOf,
): ConfigFault {
  const key = dottedKey(path);
  let text = message;
  if (input !== undefined) text += `; got ${isSecret(path) ? "<redacted>" : shown(input)}`;
  const source = sourceOf?.(key);
  if (source !== undefined) text += ` (from ${source})`;
  return { key, message: text };
}

function issueFaults(issues: readonly z.core.$ZodIssue[], sourceOf?: SourceOf): ConfigFault[] {
  const out: ConfigFault[] = [];
  for (const iss of issues) {
    if (iss.code === "unrecognized_keys") {
      for (const name of iss.keys) {
        const path = [...iss.path, name] as (string | number)[];
        out.push(faultAt(path, unknownKeyMessage(iss.path as (string | number)[], name), undefined, sourceOf));
      }
      continue;
    }
    out.push(faultAt(iss.path, iss.message, iss.input, sourceOf));
  }
  return out;
}

const PARAMS = { reportInput: true, error: messages };

/** Parses `input` with `schema`, as refusals; `prefix` is where the schema sits, so keys come out whole. */
export function validateSchema<S extends z.ZodType>(
  schema: S,
  input: unknown,
  sourceOf?: SourceOf,
  prefix: readonly string[] = [],
): { data: z.output<S> } | { faults: ConfigFault[] } {
  const r = schema.safeParse(input, PARAMS);
  if (r.success) return { data: r.data };
  const issues = r.error.issues.map((i) => ({ ...i, path: [...prefix, ...i.path] }) as z.core.$ZodIssue);
  return { faults: issueFaults(issues, sourceOf) };
}

/** Validates a merged raw config, reporting every fault at once, including cross-section ones a local fault hid. */
export function validateConfig(input: unknown, sourceOf?: SourceOf): { config: Config } | { faults: ConfigFault[] } {
  const whole = validateSchema(configSchema, input, sourceOf);
  if ("data" in whole) return { config: whole.data };
  const faults = whole.faults;
  // zod skips the root checks once anything inside failed; run them on the sections that did parse.
  if (typeof input === "object" && input !== null && !Array.isArray(input)) {
    const raw = input as Record<string, unknown>;
    const sections: Record<string, unknown> = {};
    for (const [name, schema] of Object.entries(configShape)) {
      const r = schema.safeParse(raw[name], PARAMS);
      if (r.success) sections[name] = r.data;
    }
    const seen = new Set(faults.map((f) => `${f.key}\n${f.message}`));
    for (const f of crossSectionFaults(sections)) {
      const fault = faultAt(f.path, f.message, f.input, sourceOf);
      if (!seen.has(`${fault.key}\n${fault.message}`)) faults.push(fault);
    }
  }
  return { faults };
}
