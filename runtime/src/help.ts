// dfe-archiver --help, made from the parser's flags and the config schema so that it cannot drift from either, and
// the layout both programs' --help share.
import { leafDefault, leafEnv } from "./config/docs.ts";
import { CLI_FLAGS, CONFIG_SEARCH } from "./config/load.ts";
import { CONFIG_LEAVES, MEMORY_LEAVES, type Leaf } from "./config/schema.ts";

/** Rows of two columns, the right one wrapped at 120 characters, its further lines under its first. */
export function columns(rows: readonly (readonly [string, string])[]): string[] {
  const indent = Math.max(...rows.map(([left]) => left.length)) + 4;
  const room = Math.max(40, 120 - indent);
  return rows.map(([left, right]) => {
    const lines: string[] = [];
    let line = "";
    for (const word of right.split(" ")) {
      if (line !== "" && line.length + 1 + word.length > room) {
        lines.push(line);
        line = word;
      } else line = line === "" ? word : `${line} ${word}`;
    }
    lines.push(line);
    return `  ${left.padEnd(indent - 2)}${lines.join(`\n${" ".repeat(indent)}`)}`;
  });
}

/** What each flag's value looks like; a flag the parser gains without one here fails the typecheck. */
const FLAG_VALUES: Record<keyof typeof CLI_FLAGS, string> = {
  config: "PATH",
  "log-level": "LEVEL",
  "log-format": "json|text",
  "metrics-addr": "HOST:PORT",
};

/** --config has no key in the schema: the file is where the keys are read from. */
const CONFIG_FLAG = {
  env: "DFE_ARCHIVER_CONFIG",
  description: "The config file.",
  default: `the first of ${CONFIG_SEARCH.join(", ")} that exists`,
};

/** Read by the entry (main.ts) and by Node, not by the config. */
const PROCESS_ENV = [
  ["UV_THREADPOOL_SIZE", "16", "threads of libuv's pool, which runs every file operation"],
  ["NODE_COMPILE_CACHE", "Node's, in the temp directory", "directory of the compile cache"],
] as const;

const defaultText = (leaf: Leaf) => {
  const d = leafDefault(leaf);
  return d.literal && d.text === "" ? '""' : d.text;
};

/** --help, from the parser's flags and the config schema, so that neither can drift from it. */
export function runtimeHelp(usage: string): string {
  const flags = (Object.keys(CLI_FLAGS) as (keyof typeof CLI_FLAGS)[]).map((name): [string, string] => {
    const flag = `--${name}`;
    const left = `${flag} ${FLAG_VALUES[name]}`;
    if (name === "config")
      return [left, `${CONFIG_FLAG.description} Env ${CONFIG_FLAG.env}; default: ${CONFIG_FLAG.default}.`];
    const leaf = CONFIG_LEAVES.find((l) => l.meta.cli === flag);
    if (leaf === undefined) throw new Error(`${flag} sets no key of the config schema (meta.cli)`);
    const env = leafEnv(leaf, false);
    return [left, `${leaf.meta.description ?? leaf.key} Sets ${leaf.key}; env ${env}; default: ${defaultText(leaf)}.`];
  });
  const env = [
    [CONFIG_FLAG.env, `--config; default: ${CONFIG_FLAG.default}`] as [string, string],
    ...CONFIG_LEAVES.map((l): [string, string] => [leafEnv(l, false) ?? "", `${l.key}; default: ${defaultText(l)}`]),
    ...MEMORY_LEAVES.map((l): [string, string] => [leafEnv(l, true) ?? "", `${l.key}; default: ${defaultText(l)}`]),
    ...PROCESS_ENV.map(([name, value, what]): [string, string] => [name, `${what}; default: ${value}`]),
  ];
  return [
    `dfe-archiver: consumes records from Kafka or a gRPC Push listener and writes them, compressed, to rolling files on`,
    "local disk or in an object store (S3/MinIO, GCS, Azure Blob), committing offsets once each file is durable.",
    "",
    usage,
    "",
    "Flags of run (a flag wins over its env var):",
    ...columns([
      ...flags,
      ["-h, --help", "Prints this help and exits."],
      ["--version", "Prints the version and exits."],
    ]),
    "",
    "Environment, over a .env file in the working directory, over the config file (every key of it is read from an",
    "env var; a double underscore nests: DFE_ARCHIVER_SCALING__ENABLED is scaling.enabled):",
    ...columns(env),
    "",
    "An object store also takes its SDK's own credentials (AWS_*, GOOGLE_APPLICATION_CREDENTIALS, AZURE_STORAGE_ACCOUNT",
    "and AZURE_STORAGE_KEY) when the config names none. docs/configuration.md describes every key.",
  ].join("\n");
}
