// Makes the defaults that depend on other keys concrete, once, so no stage re-derives them: the roll interval,
// the routing fields, the DLQ, discovery's exclusions, the codec's level and the memory guard (env only).
import { CODEC_LEVELS, ROLL_INTERVAL_WARN_SECS, SECRET_PATHS, type Config, type MemoryConfig } from "./schema.ts";
import { readMemoryEnv } from "./env.ts";
import { ConfigFaultsError } from "./validate.ts";

export type SaslMechanism = "plain" | "scram-sha-256" | "scram-sha-512";

export type ResolvedConfig = Config & {
  kafka: { topic_exclude: string[]; sasl_mechanism?: SaslMechanism };
  archive: { roll_interval_secs: number };
  compression: { level: number | undefined };
  routing: { expression_fields: string[] };
  dlq: { enabled: boolean; brokers: string[] };
  memory: MemoryConfig;
  /** kafka with acknowledgements on: each record's offset is held until its archive file is complete. */
  offsetsHeld: boolean;
};

/** What holding one record's offset costs while its file is open: scalo's offset tracking plus the writer's eight. */
export const HELD_BYTES_PER_RECORD = 32;
const REFERENCE_RATE = 10_000;

export function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

/** Internal topics: Kafka's __consumer_offsets and __transaction_state, _schemas, _confluent-*. */
export const INTERNAL_TOPICS = "^_";

function decimalBytes(n: number): string {
  return n >= 1e9 ? `${(n / 1e9).toFixed(2)} GB` : `${Math.round(n / 1e6)} MB`;
}

export function resolveConfig(config: Config, env: NodeJS.ProcessEnv): { config: ResolvedConfig; warnings: string[] } {
  const warnings: string[] = [];
  const memory = readMemoryEnv(env);
  if ("faults" in memory) throw new ConfigFaultsError(memory.faults);

  const kafka = config.transport === "kafka";
  const offsetsHeld = kafka && config.kafka.acknowledgements.enabled;
  const configuredRoll = config.archive.roll_interval_secs;
  const roll = configuredRoll ?? (offsetsHeld || !kafka ? 300 : 3600);
  if (configuredRoll !== undefined && configuredRoll > ROLL_INTERVAL_WARN_SECS) {
    if (offsetsHeld) {
      const held = HELD_BYTES_PER_RECORD * REFERENCE_RATE;
      warnings.push(
        `archive.roll_interval_secs is ${configuredRoll}: every record's offset is held until its file completes, ` +
          `about ${HELD_BYTES_PER_RECORD} bytes a record, so at 10k records/s an open file holds ` +
          `${decimalBytes(held * configuredRoll)} (${decimalBytes(held * 300)} at the default 300 s)`,
      );
    } else if (!kafka) {
      warnings.push(
        `archive.roll_interval_secs is ${configuredRoll} on grpc, where the archive copy is at-most-once: ` +
          `a kill loses up to ${configuredRoll} s of intake the open files hold (the default is 300 s)`,
      );
    }
  }
  if (kafka && config.kafka.topics.length > 0 && (config.kafka.topic_include ?? config.kafka.topic_exclude))
    warnings.push(
      "kafka.topic_include and kafka.topic_exclude apply to discovery only; kafka.topics is set, so they are unused",
    );
  if (!config.self_regulation.enabled)
    warnings.push(
      "self_regulation.enabled is false: nothing pauses intake when memory, held records or staged bytes run high",
    );

  const dlqBrokers = config.dlq.brokers ?? config.kafka.brokers;
  const resolved: ResolvedConfig = {
    ...config,
    kafka: {
      ...config.kafka,
      sasl_mechanism: config.kafka.sasl_mechanism?.toLowerCase() as SaslMechanism | undefined,
      topic_exclude: config.kafka.topic_exclude ?? [`^${escapeRegExp(config.dlq.topic)}$`, INTERNAL_TOPICS],
    },
    archive: { ...config.archive, roll_interval_secs: roll },
    compression: {
      ...config.compression,
      level: config.compression.level ?? CODEC_LEVELS[config.compression.codec]?.default,
    },
    routing: {
      ...config.routing,
      expression_fields: config.routing.expression_fields ?? (kafka ? ["_org_id"] : ["_source", "_org_id"]),
    },
    dlq: { ...config.dlq, enabled: config.dlq.enabled ?? kafka, brokers: dlqBrokers },
    memory: memory.memory,
    offsetsHeld,
  };
  return { config: resolved, warnings };
}

/** Why the archiver idles (up, Ready, doing nothing), or undefined when it has a destination to archive to. */
export function idleReason(config: ResolvedConfig): string | undefined {
  if (config.archive.destination !== undefined) return undefined;
  return (
    "no destination configured: set archive.destination or DFE_ARCHIVER_DESTINATION " +
    "(file:///path, s3://bucket/prefix, minio://bucket/prefix, gs://bucket/prefix or az://container/prefix)"
  );
}

export const REDACTED = "<redacted>";

/** A copy for the startup log with every secret that is set replaced by "<redacted>". */
export function redactConfig(config: Config | ResolvedConfig): unknown {
  const copy = structuredClone(config) as unknown as Record<string, unknown>;
  for (const key of SECRET_PATHS) {
    const path = key.split(".");
    let node: Record<string, unknown> | undefined = copy;
    for (const seg of path.slice(0, -1)) node = node?.[seg] as Record<string, unknown> | undefined;
    const last = path.at(-1) as string;
    if (node && node[last] !== undefined) node[last] = REDACTED;
  }
  return copy;
}
