// The process's life across config changes: idle until a destination is configured, then one pipeline at a time.
// A valid change drains the running pipeline (stop receiving, flush, complete files, commit) and starts the next in
// the same process; a refused change keeps the running config and says why on /readyz, the log and config_valid.
import type { Logger } from "pino";
import type { ConfigRead } from "../config/watch.ts";
import type { LoadedConfig } from "../config/load.ts";
import { idleReason, redactConfig, type ResolvedConfig } from "../config/resolve.ts";
import type { KafkaDlq } from "../dlq/kafka.ts";
import { ArchiverError } from "../errors.ts";
import type { Health } from "../observe/health.ts";
import type { Metrics } from "../observe/metrics.ts";
import { codecLanes } from "../codec/lanes.ts";
import { Pipeline, type PipelineExit } from "../pipeline.ts";
import { resolveMemoryLimit } from "../regulate/memory.ts";
import { openStore } from "../store/open.ts";
import { kafkaAuth, openTransport } from "../transport/open.ts";
import type { Transport } from "../transport/types.ts";
import { backoffDelay, type Backoff } from "../store/backoff.ts";
import { setTimeout as sleep } from "node:timers/promises";

/** Starting a pipeline whose broker or store is not reachable yet: from 1 s up to 30 s between attempts. */
const START_BACKOFF: Backoff = { minMs: 1000, maxMs: 30_000 };

export interface SupervisorDeps {
  env: NodeJS.ProcessEnv;
  metrics: Metrics;
  log: Logger;
  health: Health;
}

/** Keys a running process cannot change: they bind sockets or build objects that outlive a pipeline. */
const RESTART_ONLY = [
  ["metrics.addr", (c: ResolvedConfig) => c.metrics.addr],
  ["metrics.namespace", (c: ResolvedConfig) => c.metrics.namespace],
  ["logger.format", (c: ResolvedConfig) => c.logger.format],
] as const;

export class Supervisor {
  readonly #d: SupervisorDeps;
  #config: ResolvedConfig | undefined;
  #pipeline: Pipeline | undefined;
  /** The pipeline this supervisor asked to drain: its end is expected. */
  #drainingPipeline: Pipeline | undefined;
  /** Config changes and the stop are applied one at a time, in order. */
  #queue: Promise<void> = Promise.resolve();
  #stopping = false;
  #resolveExit!: (code: number) => void;
  readonly exited: Promise<number>;

  constructor(deps: SupervisorDeps) {
    this.#d = deps;
    this.exited = new Promise((r) => (this.#resolveExit = r));
  }

  /** Starts on the boot config; a permanent fault in it (the store, the DLQ topic) refuses with exit code 2. */
  async boot(loaded: LoadedConfig): Promise<void> {
    this.#d.health.set("transport", "degraded", "starting");
    this.#d.health.setStarting(true);
    const started = await this.#start(loaded.config).finally(() => this.#d.health.setStarting(false));
    if (!started.ok) {
      this.#d.log.error(`refusing to start: ${started.error.message}`);
      this.#resolveExit(2);
    }
  }

  pressure(): number {
    return this.#pipeline?.pressure() ?? 0;
  }

  /** The running pipeline's delivery guarantee; undefined while none runs. */
  deliveryGuarantee(): string | undefined {
    return this.#pipeline?.guarantee.guarantee;
  }

  /** A config read that differs from the last one: applied after whatever is in progress. */
  apply(read: ConfigRead): void {
    this.#enqueue(() => this.#apply(read));
  }

  /** Drains the running pipeline and resolves `exited` with its exit code. */
  stop(signal: string): void {
    if (this.#stopping) return;
    this.#stopping = true;
    this.#d.log.info({ signal }, "stopping");
    this.#enqueue(async () => {
      const exit = await this.#drain();
      this.#resolveExit(exit.code);
    });
  }

  #enqueue(step: () => Promise<void>): void {
    this.#queue = this.#queue.then(step).catch((err: unknown) => {
      this.#d.log.fatal({ err }, "lifecycle step failed");
      this.#resolveExit(1);
    });
  }

  async #apply(read: ConfigRead): Promise<void> {
    if (this.#stopping) return;
    const { log, metrics } = this.#d;
    if (!read.ok) {
      metrics.configReloadErrors.inc();
      this.#showRefused(read.error);
      log.error({ reason: read.error.message }, "config change refused; the running config is kept");
      return;
    }
    const next = read.loaded.config;
    const prev = this.#config;
    if (prev !== undefined && JSON.stringify(prev) === JSON.stringify(next)) {
      // Back to the running config after a refused change.
      this.#markValid(next);
      return;
    }
    if (prev !== undefined) {
      for (const [key, get] of RESTART_ONLY) {
        if (get(prev) !== get(next)) log.warn({ key, running: get(prev), next: get(next) }, "takes effect at restart");
      }
    }
    log.info("config changed: draining the running pipeline before starting on the new config");
    const drained = await this.#drain();
    if (drained.code !== 0) {
      // Kafka reads withheld records again from the committed offset when the next pipeline joins the group.
      log.warn({ reason: drained.reason }, "the drained pipeline withheld offsets; the next one reads them again");
    }
    if (this.#stopping) return;
    const started = await this.#start(next);
    if (started.ok) return;
    metrics.configReloadErrors.inc();
    log.error({ reason: started.error.message }, "config change refused: the pipeline does not start on it");
    if (prev !== undefined) {
      log.warn("restarting on the previous config");
      const back = await this.#start(prev);
      if (!back.ok) {
        log.fatal({ reason: back.error.message }, "the previous config no longer starts either");
        this.#resolveExit(2);
        return;
      }
    }
    this.#showRefused(started.error);
  }

  #showRefused(error: ArchiverError): void {
    this.#d.metrics.configValid.set(0);
    this.#d.health.setConfigRefused(true);
    this.#d.health.set("work_config", "degraded", `config change refused, running config kept: ${error.message}`);
  }

  #markValid(cfg: ResolvedConfig): void {
    const idle = idleReason(cfg);
    this.#d.metrics.configValid.set(1);
    this.#d.health.setConfigRefused(false);
    this.#d.health.setIdle(idle !== undefined);
    this.#d.health.set("work_config", idle ? "degraded" : "ok", idle);
  }

  /** Starts a pipeline on `cfg`, or idles when it names no destination. A permanent fault comes back as an error. */
  async #start(cfg: ResolvedConfig): Promise<{ ok: true } | { ok: false; error: ArchiverError }> {
    const { log, metrics, health, env } = this.#d;
    log.level = cfg.logger.level;
    log.info({ config: redactConfig(cfg) }, "effective config");
    const idle = idleReason(cfg);
    metrics.pipelineIdle.set(idle ? 1 : 0);
    if (idle) {
      this.#config = cfg;
      this.#markValid(cfg);
      health.set("transport", "ok", "idle: no connection opened");
      health.set("sink", "ok", "idle: nothing to write");
      log.warn({ reason: idle }, "idle until configured: no broker connection, no listener");
      return { ok: true };
    }
    // Before the transport: the lanes load their modules on their own threads while the event loop loads the Kafka
    // client's and joins the group (0.1-0.15 s built, about half of it ajv compiling the option schemas the client
    // calls).
    codecLanes().start();
    for (let failures = 0; ;) {
      let dlq: KafkaDlq | undefined;
      let transport: Transport | undefined;
      // Which component a failure to start belongs to: the store, or the broker (DLQ producer and consumer).
      let part: "sink" | "transport" = "sink";
      try {
        const memory = resolveMemoryLimit(cfg.memory.limit_bytes, cfg.memory.cgroup_headroom);
        const store = await openStore(cfg, env, metrics, log);
        part = "transport";
        if (cfg.dlq.enabled) {
          // Loaded only when on: its kafkajs producer takes about 0.1 s to load.
          const { KafkaDlq } = await import("../dlq/kafka.ts");
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
        transport = await openTransport(cfg, log, memory, metrics);
        const pipeline = new Pipeline({ config: cfg, transport, metrics, log, memory, store, dlq, health });
        await pipeline.start();
        this.#pipeline = pipeline;
        this.#config = cfg;
        this.#markValid(cfg);
        health.set("transport", "ok");
        health.set("sink", "ok");
        void pipeline.done.then((exit) => this.#ended(pipeline, exit));
        return { ok: true };
      } catch (err) {
        await transport?.close().catch(() => undefined);
        await dlq?.close().catch(() => undefined);
        if (err instanceof ArchiverError && !err.retryable) {
          metrics.pipelineIdle.set(this.#pipeline ? 0 : 1);
          return { ok: false, error: err };
        }
        // A broker or store not reachable yet: nothing was received, so waiting costs lag, never records.
        const waitMs = backoffDelay(++failures, START_BACKOFF);
        const reason = `cannot start, retrying in ${(waitMs / 1000).toFixed(1)} s: ${(err as Error).message}`;
        health.set(part, "failed", reason);
        log.warn({ err, failures, part }, "pipeline start failed; retrying");
        for (const until = Date.now() + waitMs; Date.now() < until && !this.#stopping;) await sleep(250);
        if (this.#stopping) return { ok: true };
      }
    }
  }

  /** A pipeline that ends without being asked to (a fatal sink fault) ends the process with its code. */
  #ended(pipeline: Pipeline, exit: PipelineExit): void {
    if (this.#pipeline !== pipeline || this.#drainingPipeline === pipeline) return;
    this.#d.log.error({ ...exit }, "the pipeline ended on its own");
    this.#pipeline = undefined;
    this.#resolveExit(exit.code === 0 ? 1 : exit.code);
  }

  async #drain(): Promise<PipelineExit> {
    const pipeline = this.#pipeline;
    if (!pipeline) return { code: 0 };
    this.#drainingPipeline = pipeline;
    const exit = await pipeline.drain();
    this.#pipeline = undefined;
    return exit;
  }
}
