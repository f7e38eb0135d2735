// dfe-archiver-operator's command line: one table of flags, from which both the parser and --help are made, so the
// two cannot drift; --version; usage errors exit 2 with the usage; a cluster it cannot use exits 1 with one line.
import { parseArgs } from "node:util";
import { LOG_LEVELS } from "../../runtime/src/config/schema.ts";
import { columns } from "../../runtime/src/help.ts";
import { parseListenAddr } from "../../runtime/src/observe/http.ts";
import { createLogger, type LogFormat } from "../../runtime/src/observe/log.ts";
import { packageVersion, versionLine } from "../../runtime/src/version.ts";
import { SERVICE_ACCOUNT_DIR } from "./kubeconfig.ts";
import { startOperator } from "./operator.ts";

const PROGRAM = "dfe-archiver-operator";
const LOG_FORMATS = ["json", "text"] as const;

interface Flag {
  type: "string" | "boolean";
  short?: string;
  default?: string | boolean;
  /** The value's form, for --help. */
  value?: string;
  help: string;
}

export const FLAGS = {
  kubeconfig: {
    type: "string",
    value: "FILE",
    help: "The kubeconfig to use. Without it: $KUBECONFIG, else the in-cluster service account, else ~/.kube/config.",
  },
  context: { type: "string", value: "NAME", help: "The kubeconfig's context to use. Default: its current-context." },
  namespace: { type: "string", value: "NS", help: "The one namespace to watch. Default: all namespaces." },
  image: {
    type: "string",
    value: "IMAGE",
    help: `The runtime's image, which every pipeline's Deployment runs. Default: ${defaultImage(packageVersion())}.`,
  },
  "metrics-addr": {
    type: "string",
    value: "HOST:PORT",
    default: "0.0.0.0:8080",
    help: "Address of /healthz, /readyz and /metrics; port 0 takes any free port, which the log line `operator listening` names.",
  },
  "leader-elect": {
    type: "boolean",
    default: true,
    help: "Reconciles only while holding the Lease dfe-archiver-operator (one replica at a time); --leader-elect=false or --no-leader-elect reconciles at once.",
  },
  "lease-namespace": {
    type: "string",
    value: "NS",
    help: "The Lease's namespace. Default: --namespace, else $POD_NAMESPACE, else the service account's or the kubeconfig context's namespace, else default.",
  },
  "log-level": {
    type: "string",
    value: "LEVEL",
    default: "info",
    help: `Least severe level logged: ${LOG_LEVELS.join(", ")}.`,
  },
  "log-format": {
    type: "string",
    value: LOG_FORMATS.join("|"),
    default: "json",
    help: "Log line format: json for collectors, text for a terminal.",
  },
  help: { type: "boolean", short: "h", help: "Prints this help and exits." },
  version: { type: "boolean", help: "Prints the version (package, git commit, Node.js) and exits." },
} as const satisfies Record<string, Flag>;

/** The environment the operator reads, for --help. */
const ENV = [
  ["KUBECONFIG", "Kubeconfig files separated by ':', merged as kubectl merges them; read without --kubeconfig."],
  ["HOME", "Where ~/.kube/config is, the kubeconfig used when nothing before it is found."],
  [
    "KUBERNETES_SERVICE_HOST",
    `With KUBERNETES_SERVICE_PORT, set in a pod: its service account (${SERVICE_ACCOUNT_DIR}) is used when neither --kubeconfig nor KUBECONFIG is.`,
  ],
  ["KUBERNETES_SERVICE_PORT", "The in-cluster apiserver's port, beside KUBERNETES_SERVICE_HOST."],
  ["POD_NAMESPACE", "The Lease's namespace when neither --lease-namespace nor --namespace is given."],
] as const;

function defaultImage(version: string): string {
  return `ghcr.io/dfe/dfe-archiver:${version}`;
}

const USAGE = `usage: ${PROGRAM} [FLAGS]     reconciles ArchivePipelines until SIGTERM or SIGINT
       ${PROGRAM} --help      every flag and environment variable, with its default
       ${PROGRAM} --version   the version, its git commit and the Node.js running it`;

/** --help, from FLAGS (as the parser is) and ENV. */
export function helpText(): string {
  const flags = Object.entries(FLAGS).map(([name, f]: [string, Flag]): [string, string] => {
    const left = `${f.short ? `-${f.short}, ` : ""}--${name}${f.value ? ` ${f.value}` : ""}`;
    return [left, `${f.help}${f.default === undefined ? "" : ` Default: ${String(f.default)}.`}`];
  });
  return [
    `${PROGRAM}: reconciles ArchivePipeline resources into the runtime's Deployments, ConfigMaps, RBAC and KEDA`,
    "ScaledObjects, and reports each pipeline's state in its status.",
    "",
    USAGE,
    "",
    "Flags:",
    ...columns(flags),
    "",
    "Environment:",
    ...columns(ENV),
  ].join("\n");
}

function usageError(reason: string): never {
  process.stderr.write(`${PROGRAM}: ${reason}\n${USAGE}\nRun '${PROGRAM} --help' for every flag.\n`);
  process.exit(2);
}

const oneOf = <T extends string>(flag: string, value: string, allowed: readonly T[]): T => {
  if ((allowed as readonly string[]).includes(value)) return value as T;
  return usageError(`--${flag} ${value}: must be one of ${allowed.join(", ")}`);
};

/** Runs the command line `argv` (without node and the script): exits on a usage error, a refusal or a signal. */
export function main(argv: string[]): void {
  // --leader-elect=false, as Go controllers spell it, is the negated flag.
  const args = argv.map((a) =>
    a === "--leader-elect=false" ? "--no-leader-elect" : a === "--leader-elect=true" ? "--leader-elect" : a,
  );
  let parsed;
  try {
    parsed = parseArgs({ args, options: FLAGS, allowNegative: true, allowPositionals: true, strict: true });
  } catch (e) {
    // Node appends how to pass a positional that starts with "-": not what went wrong here.
    return usageError((e as Error).message.split(/\.\s|\n/)[0] ?? String(e));
  }
  const { values, positionals } = parsed;
  if (values.help) {
    process.stdout.write(`${helpText()}\n`);
    process.exit(0);
  }
  if (values.version) {
    process.stdout.write(`${versionLine(PROGRAM)}\n`);
    process.exit(0);
  }
  if (positionals.length > 0) usageError(`takes no arguments, and was given '${positionals[0]}'`);
  try {
    parseListenAddr(values["metrics-addr"]);
  } catch (e) {
    usageError(`--metrics-addr: ${(e as Error).message}`);
  }
  const level = oneOf("log-level", values["log-level"], LOG_LEVELS);
  const format: LogFormat = oneOf("log-format", values["log-format"], LOG_FORMATS);
  const log = createLogger(level, format).child({ component: PROGRAM });

  // Signals are taken before the start: "operator listening" is logged while the start is still under way, and a
  // SIGTERM then must still shut down cleanly rather than kill the process; one that comes while the apiserver is
  // still awaited aborts the wait.
  const abort = new AbortController();
  const starting = startOperator({
    kubeconfig: values.kubeconfig,
    context: values.context,
    namespace: values.namespace,
    image: values.image ?? defaultImage(packageVersion()),
    metricsAddr: values["metrics-addr"],
    leaderElect: values["leader-elect"],
    leaseNamespace: values["lease-namespace"],
    log,
    signal: abort.signal,
  });
  let signalled: number | undefined;
  const stop = (code: number) => () => {
    signalled ??= code;
    abort.abort();
    starting
      .then(
        (op) => op.shutDown().then(() => process.exit(signalled)),
        // The start's own handler below exits.
        () => undefined,
      )
      .catch((e: unknown) => {
        log.error({ err: e }, "shutdown failed");
        process.exit(1);
      });
  };
  process.once("SIGTERM", stop(0));
  process.once("SIGINT", stop(0));
  starting.then(
    // Leadership lost: another replica may already be reconciling, so this one stops and lets its pod restart.
    (op) =>
      void op.lost.then(() => {
        log.error("leader lease lost; exiting");
        stop(1)();
      }),
    (e: unknown) => {
      if (signalled !== undefined) process.exit(signalled);
      process.stderr.write(`${PROGRAM}: ${(e instanceof Error ? e.message : String(e)).replace(/\s*\n\s*/g, " ")}\n`);
      process.exit(1);
    },
  );
}
