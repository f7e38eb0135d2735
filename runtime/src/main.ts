#!/usr/bin/env node
// dfe-archiver run: loads the config cascade, serves health and metrics, runs the pipeline until SIGTERM/SIGINT,
// then drains (stop receiving, flush, complete files, commit) and exits 0, or non-zero when offsets were withheld.
import { loadConfig } from "./config/load.ts";
import { idleReason, redactConfig } from "./config/resolve.ts";
import { ArchiverError, ConfigError } from "./errors.ts";
import { createLogger } from "./observe/log.ts";
import { createMetrics, type Metrics } from "./observe/metrics.ts";
import { startObserveServer } from "./observe/http.ts";
import { Health } from "./observe/health.ts";
import { Pipeline } from "./pipeline.ts";
import { openStore } from "./store/open.ts";
import { kafkaAuth, openTransport } from "./transport/open.ts";
import { KafkaDlq } from "./dlq/kafka.ts";
import { resolveMemoryLimit } from "./regulate/memory.ts";

const USAGE = `usage: dfe-archiver run [--config PATH] [--log-level LEVEL] [--log-format json|text] [--metrics-addr HOST:PORT]`;

async function run(argv: string[]): Promise<number> {
  let loaded: ReturnType<typeof loadConfig>;
  try {
    loaded = loadConfig({ argv, env: process.env, cwd: process.cwd() });
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`dfe-archiver: refusing to start: ${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const cfg = loaded.config;
  const log = createLogger(cfg.logger.level, cfg.logger.format);
  for (const w of loaded.warnings) log.warn(w);
  log.info({ file: loaded.file, config: redactConfig(cfg) }, "effective config");

  const metrics: Metrics = createMetrics({ namespace: cfg.metrics.namespace });
  const idle = idleReason(cfg);
  const health = new Health();
  health.setIdle(idle !== undefined);
  if (idle) {
    health.set("work_config", "degraded", idle);
    health.set("transport", "ok", "idle: no connection opened");
  }
  metrics.pipelineIdle.set(idle ? 1 : 0);
  metrics.configValid.set(1);
  let pipeline: Pipeline | undefined;
  const server = await startObserveServer(cfg.metrics.addr, metrics.registry, {
    health: () => health.snapshot(),
    pressure: () => pipeline?.pressure() ?? 0,
  });
  log.info({ addr: server.address }, "serving /metrics /livez /readyz /health /scaling/pressure");

  let stopping: ((signal: string) => void) | undefined;
  const signalled = new Promise<string>((resolve) => (stopping = resolve));
  for (const sig of ["SIGTERM", "SIGINT"] as const) process.once(sig, () => stopping?.(sig));

  if (idle) {
    log.warn({ reason: idle }, "idle until configured: no broker connection, no listener");
    log.info({ signal: await signalled }, "stopping");
    await server.close();
    return 0;
  }

  try {
    const memory = resolveMemoryLimit(cfg.memory.limit_bytes, cfg.memory.cgroup_headroom);
    const store = await openStore(cfg, process.env, metrics, log);
    let dlq: KafkaDlq | undefined;
    if (cfg.dlq.enabled) {
      dlq = new KafkaDlq({
        brokers: cfg.dlq.brokers,
        topic: cfg.dlq.topic,
        messageMaxBytes: cfg.dlq.message_max_bytes,
        clientId: cfg.kafka.client_id,
        ...kafkaAuth(cfg.kafka),
        log,
      });
      await dlq.start();
    } else log.warn("the DLQ is off: records refused for good are dropped and counted in messages_dropped_total");
    const transport = openTransport(cfg, log, memory);
    pipeline = new Pipeline({ config: cfg, transport, metrics, log, memory, store, dlq });
  } catch (err) {
    if (err instanceof ArchiverError && !err.retryable) {
      log.error(`refusing to start: ${err.message}`);
      await server.close();
      return 2;
    }
    throw err;
  }
  void signalled.then((signal) => {
    log.info({ signal }, "stopping");
    void pipeline.drain();
  });
  await pipeline.start();
  const exit = await pipeline.done;
  await server.close();
  if (exit.code !== 0)
    log.error({ reason: exit.reason }, "exiting non-zero so the restart reads the withheld records again");
  return exit.code;
}

const [cmd, ...rest] = process.argv.slice(2);
if (cmd === "run") {
  run(rest).then(
    (code) => process.exit(code),
    (err: unknown) => {
      process.stderr.write(`dfe-archiver: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
      process.exit(1);
    },
  );
} else {
  process.stderr.write(`${USAGE}\n`);
  process.exit(cmd === "--help" || cmd === "-h" ? 0 : 2);
}
