// dfe-archiver run: loads the config cascade, serves health and metrics, and runs the pipeline (idle until a
// destination is configured, restarted in-process on each config change) until SIGTERM/SIGINT, then drains (stop
// receiving, flush, complete files, commit) and exits 0, or non-zero when offsets were withheld.
// Only what the heap sizing needs is loaded before it: a process given a memory limit restarts itself there (see
// regulate/heap.ts), and the rest of the module graph (the bundle's other chunks, built) is loaded once, after it.
import { parseCliArgs } from "./config/load.ts";
import { readConfig, watchConfig } from "./config/watch.ts";
import { ConfigError } from "./errors.ts";
import type { Metrics } from "./observe/metrics.ts";
import { sizeHeap } from "./regulate/heap.ts";
import { resolveMemoryLimit } from "./regulate/memory.ts";

const PROGRAM = "dfe-archiver";

const USAGE = `usage: ${PROGRAM} run [FLAGS]   archive until SIGTERM or SIGINT, then drain and exit
       ${PROGRAM} --help        every flag and environment variable, with its default
       ${PROGRAM} --version     the version, its git commit and the Node.js running it`;

async function run(argv: string[]): Promise<number> {
  const cwd = process.cwd();
  const first = readConfig(argv, process.env, cwd);
  if (!first.ok) {
    process.stderr.write(`dfe-archiver: refusing to start: ${first.error.message}\n`);
    return 2;
  }
  const loaded = first.loaded;
  const cfg = loaded.config;
  // Before anything starts: this may restart the process in place with V8's heap sized from the memory limit.
  const unsized = sizeHeap(resolveMemoryLimit(cfg.memory.limit_bytes, cfg.memory.cgroup_headroom));
  const [
    { Supervisor },
    { Health },
    { startObserveServer },
    { createLogger, logProcessWarnings },
    { createMetrics },
    { startStatusReporter },
  ] = await Promise.all([
    import("./lifecycle/supervisor.ts"),
    import("./observe/health.ts"),
    import("./observe/http.ts"),
    import("./observe/log.ts"),
    import("./observe/metrics.ts"),
    import("./observe/report.ts"),
  ]);
  const log = createLogger(cfg.logger.level, cfg.logger.format);
  logProcessWarnings(log);
  if (unsized !== undefined) log.warn(unsized);
  for (const w of loaded.warnings) log.warn(w);
  log.info({ file: loaded.file }, "config read");

  const metrics: Metrics = createMetrics({ namespace: cfg.metrics.namespace });
  const health = new Health();
  const supervisor = new Supervisor({ env: process.env, metrics, log, health });
  // In a pod of an ArchivePipeline: its health reported into the pipeline's status.pods.
  const reporter = await startStatusReporter({
    health,
    env: process.env,
    log,
    deliveryGuarantee: () => supervisor.deliveryGuarantee(),
  });
  const server = await startObserveServer(cfg.metrics.addr, metrics.registry, {
    health: () => health.snapshot(),
    pressure: () => supervisor.pressure(),
  });
  log.info({ addr: server.address }, "serving /metrics /livez /readyz /health /scaling/pressure");
  for (const sig of ["SIGTERM", "SIGINT"] as const) process.once(sig, () => supervisor.stop(sig));

  await supervisor.boot(loaded);
  const watcher = watchConfig(
    { argv, env: process.env, cwd, file: loaded.file, onChange: (r) => supervisor.apply(r) },
    loaded,
  );
  const code = await supervisor.exited;
  watcher.close();
  await reporter?.close();
  await server.close();
  if (code === 1) log.error("exiting non-zero so the restart reads the withheld records again");
  return code;
}

/** Refuses a command line with the reason and the usage: exit 2, as for any usage error. */
function usageError(reason: string): number {
  process.stderr.write(
    `${PROGRAM}: ${reason}\n${USAGE}\nRun '${PROGRAM} --help' for every flag and environment variable.\n`,
  );
  return 2;
}

/** The arguments before a `--`, where --help and --version are looked for. */
const flagsOf = (argv: string[]) => argv.slice(0, argv.includes("--") ? argv.indexOf("--") : undefined);

/** Runs the command line `argv` (without node and the script) and exits with its code. */
export function main(argv: string[]): void {
  const exit = (code: number | Promise<number>) =>
    void Promise.resolve(code).then(
      (c) => process.exit(c),
      (err: unknown) => {
        process.stderr.write(`${PROGRAM}: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
        process.exit(1);
      },
    );
  const [cmd, ...rest] = argv;
  const asked = flagsOf(argv);
  // Loaded only when asked: the help's modules and node:child_process (the version's) are nothing a start needs.
  if (asked.includes("--help") || asked.includes("-h"))
    return exit(
      import("./help.ts").then(({ runtimeHelp }) => {
        process.stdout.write(`${runtimeHelp(USAGE)}\n`);
        return 0;
      }),
    );
  if (asked.includes("--version"))
    return exit(
      import("./version.ts").then(({ versionLine }) => {
        process.stdout.write(`${versionLine(PROGRAM)}\n`);
        return 0;
      }),
    );
  if (cmd !== "run") return exit(usageError(cmd === undefined ? "no command given" : `unknown command '${cmd}'`));
  try {
    const { positionals } = parseCliArgs(rest);
    if (positionals.length > 0) return exit(usageError(`run takes no arguments, and was given '${positionals[0]}'`));
  } catch (err) {
    if (!(err instanceof ConfigError)) throw err;
    // Its message starts with the key, "cli: ", which the usage says better.
    return exit(usageError(err.message.slice(err.key.length + 2)));
  }
  exit(run(rest));
}
