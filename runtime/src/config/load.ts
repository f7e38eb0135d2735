// The cascade, highest first: CLI flags > process env > .env in cwd > config file > defaults. The file is read as
// written (a ${VAR} in it stays literal); env and flags overlay it key by key, then the schema judges the result.
import { existsSync, readFileSync, statSync } from "node:fs";
import { resolve as resolvePath } from "node:path";
import { parseArgs } from "node:util";
import { parseDocument } from "yaml";
import { ConfigError } from "../errors.ts";
import { envLayer, nestedEnvName, parseDotenv, readMemoryEnv } from "./env.ts";
import { resolveConfig, type ResolvedConfig } from "./resolve.ts";
import { CONFIG_LEAVES, MEMORY_LEAVES } from "./schema.ts";
import { ConfigFaultsError, validateConfig, type ConfigFault } from "./validate.ts";

export interface CliArgs {
  config?: string;
  logLevel?: string;
  logFormat?: string;
  metricsAddr?: string;
  /** Arguments that are not flags, in order. */
  positionals: string[];
}

/** The flags, for the parser and for `dfe-archiver --help` (runtime/src/cli.ts), which describes each. */
export const CLI_FLAGS = {
  config: { type: "string" },
  "log-level": { type: "string" },
  "log-format": { type: "string" },
  "metrics-addr": { type: "string" },
} as const;

/** scalo's common flags: --config PATH, --log-level, --log-format, --metrics-addr (as --flag VALUE or --flag=VALUE). */
export function parseCliArgs(argv: readonly string[]): CliArgs {
  try {
    const { values, positionals } = parseArgs({
      args: [...argv],
      options: CLI_FLAGS,
      strict: true,
      allowPositionals: true,
    });
    const out: CliArgs = { positionals };
    if (values.config !== undefined) out.config = values.config;
    if (values["log-level"] !== undefined) out.logLevel = values["log-level"];
    if (values["log-format"] !== undefined) out.logFormat = values["log-format"];
    if (values["metrics-addr"] !== undefined) out.metricsAddr = values["metrics-addr"];
    return out;
  } catch (err) {
    const known = Object.keys(CLI_FLAGS)
      .map((f) => `--${f}`)
      .join(", ");
    // Node appends how to pass a positional that starts with "-": not what went wrong here.
    throw new ConfigError("cli", `${(err as Error).message.split(/\.\s|\n/)[0]}; the flags are ${known}`);
  }
}

/** Files tried, in order, when neither --config nor DFE_ARCHIVER_CONFIG names one (relative to cwd). */
export const CONFIG_SEARCH = ["config.yaml", "config/settings.yaml", "/etc/dfe-archiver/config.yaml"] as const;

const CLI_KEYS = [
  ["logLevel", ["logger", "level"], "--log-level"],
  ["logFormat", ["logger", "format"], "--log-format"],
  ["metricsAddr", ["metrics", "addr"], "--metrics-addr"],
] as const;

const MEMORY_HINT = `the memory guard reads ${MEMORY_LEAVES.map((l) => l.meta.env).join(", ")} from the environment only`;

function isMapping(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** Writes `value` at `path`, creating sections; refuses to replace a non-mapping the file put there. */
function setPath(target: Record<string, unknown>, path: readonly string[], value: unknown): boolean {
  let node = target;
  for (const seg of path.slice(0, -1)) {
    const next = node[seg];
    if (next === undefined) node = node[seg] = {};
    else if (isMapping(next)) node = next;
    else return false;
  }
  node[path.at(-1) as string] = value;
  return true;
}

function valueAt(root: unknown, key: string): unknown {
  let node = root;
  for (const seg of key.replace(/\[(\d+)\]/g, ".$1").split(".")) {
    if (typeof node !== "object" || node === null) return undefined;
    node = (node as Record<string, unknown>)[seg];
  }
  return node;
}

export interface ParseOptions {
  /** The environment (process env over .env); defaults to none, so a caller states what it reads. */
  env?: NodeJS.ProcessEnv;
  /** Names the file in refusals and warnings. */
  sourceName?: string;
  cli?: CliArgs;
}

/**
 * Parses a config file's text under the env and flags, validates it and resolves it; throws ConfigError listing
 * every fault. loadConfig uses it at boot; a reload calls it with the new text and the same env and flags.
 */
export function parseConfigText(
  yamlText: string,
  opts: ParseOptions = {},
): { config: ResolvedConfig; warnings: string[] } {
  const env = opts.env ?? {};
  const sourceName = opts.sourceName ?? "config file";
  const faults: ConfigFault[] = [];
  const warnings: string[] = [];

  const doc = parseDocument(yamlText, { prettyErrors: true });
  for (const e of doc.errors) faults.push({ key: sourceName, message: e.message.split("\n")[0] as string });
  for (const w of doc.warnings) warnings.push(`${sourceName}: ${w.message.split("\n")[0] as string}`);
  const parsed: unknown = doc.errors.length ? undefined : doc.toJS();
  let file: Record<string, unknown> = {};
  if (isMapping(parsed)) file = parsed;
  else if (parsed !== undefined && parsed !== null)
    faults.push({
      key: sourceName,
      message: `must be a mapping of sections (transport, kafka, archive, ...); got ${Array.isArray(parsed) ? "a list" : JSON.stringify(parsed)}`,
    });
  if ("memory" in file) {
    warnings.push(`${sourceName}: the memory section is ignored; ${MEMORY_HINT}`);
    delete file.memory;
  }
  for (const leaf of CONFIG_LEAVES) {
    const v = valueAt(file, leaf.key);
    const ref = typeof v === "string" ? /\$\{[^}]*\}/.exec(v) : null;
    if (ref)
      warnings.push(
        `${leaf.key} in ${sourceName} holds ${ref[0]}, which is read literally, never expanded; ` +
          `set ${leaf.meta.env ?? nestedEnvName(leaf.path)} instead`,
      );
  }

  const merged = structuredClone(file);
  const sources = new Map<string, string>();
  const layer = envLayer(env);
  faults.push(...layer.faults);
  warnings.push(...layer.warnings);
  for (const { leaf, value, name } of layer.values.values())
    if (setPath(merged, leaf.path, value)) sources.set(leaf.key, name);
  for (const [flag, path, name] of CLI_KEYS) {
    const value = opts.cli?.[flag];
    if (value !== undefined && setPath(merged, path, value)) sources.set(path.join("."), name);
  }

  const sourceOf = (key: string): string | undefined => {
    for (const [k, s] of sources) if (key === k || key.startsWith(`${k}[`)) return s;
    return valueAt(file, key) !== undefined ? sourceName : undefined;
  };
  const verdict = validateConfig(merged, sourceOf);
  if ("faults" in verdict) faults.push(...verdict.faults);
  const memory = readMemoryEnv(env);
  if ("faults" in memory) faults.push(...memory.faults);
  if (faults.length || !("config" in verdict)) throw new ConfigFaultsError(faults);

  const resolved = resolveConfig(verdict.config, env);
  return { config: resolved.config, warnings: [...warnings, ...resolved.warnings] };
}

/** Reads the process env over the .env file in cwd. */
function readEnv(env: NodeJS.ProcessEnv, cwd: string, faults: ConfigFault[]): NodeJS.ProcessEnv {
  const path = resolvePath(cwd, ".env");
  if (!existsSync(path)) return env;
  const dot = parseDotenv(readFileSync(path, "utf8"), path);
  faults.push(...dot.faults);
  return { ...dot.vars, ...env };
}

/** The config file: --config, else DFE_ARCHIVER_CONFIG, else the first of CONFIG_SEARCH that exists. */
function locate(cli: CliArgs, env: NodeJS.ProcessEnv, cwd: string): string | undefined {
  const named: [string, string] | undefined =
    cli.config !== undefined
      ? ["--config", cli.config]
      : env.DFE_ARCHIVER_CONFIG
        ? ["DFE_ARCHIVER_CONFIG", env.DFE_ARCHIVER_CONFIG]
        : undefined;
  if (named) {
    const path = resolvePath(cwd, named[1]);
    if (!existsSync(path) || !statSync(path).isFile())
      throw new ConfigError(
        named[0],
        `names ${path}, which is not a file; fix the path or leave it unset to search ${CONFIG_SEARCH.join(", ")}`,
      );
    return path;
  }
  return CONFIG_SEARCH.map((p) => resolvePath(cwd, p)).find((p) => existsSync(p) && statSync(p).isFile());
}

export interface LoadedConfig {
  config: ResolvedConfig;
  /** The config file read, or undefined when none was found (defaults and env only). */
  file: string | undefined;
  warnings: string[];
  /** The environment the config was read under (process env over .env), for a reload. */
  env: NodeJS.ProcessEnv;
  cli: CliArgs;
}

/** Loads the whole cascade; throws ConfigError listing every fault. Defaults to the process's argv, env and cwd. */
export function loadConfig(opts: { argv?: string[]; env?: NodeJS.ProcessEnv; cwd?: string } = {}): LoadedConfig {
  const cwd = opts.cwd ?? process.cwd();
  const cli = parseCliArgs(opts.argv ?? process.argv.slice(2));
  const faults: ConfigFault[] = [];
  const env = readEnv(opts.env ?? process.env, cwd, faults);
  const file = locate(cli, env, cwd);
  let text = "";
  if (file !== undefined) {
    try {
      text = readFileSync(file, "utf8");
    } catch (err) {
      faults.push({ key: file, message: `cannot be read: ${(err as Error).message}` });
    }
  }
  let parsed: { config: ResolvedConfig; warnings: string[] } | undefined;
  try {
    parsed = parseConfigText(text, { env, sourceName: file, cli });
  } catch (err) {
    if (!(err instanceof ConfigFaultsError)) throw err;
    faults.push(...err.faults);
  }
  if (faults.length || parsed === undefined) throw new ConfigFaultsError(faults);
  return { config: parsed.config, file, warnings: parsed.warnings, env, cli };
}
