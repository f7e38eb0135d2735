// Builds the configured Transport (a Kafka consumer or the gRPC Push listener), and the Kafka auth options the
// consumer and the DLQ producer share.
import { readFileSync } from "node:fs";
import type { Logger } from "pino";
import type { ResolvedConfig } from "../config/resolve.ts";
import { ConfigError } from "../errors.ts";
import type { Metrics } from "../observe/metrics.ts";
import type { MemoryLimit } from "../regulate/memory.ts";
import { discoveryRules } from "./discovery.ts";
import type { KafkaTransportOptions, Transport } from "./types.ts";

/** SASL and TLS options of the kafka section, shared by the consumer and the DLQ producer. */
export function kafkaAuth(k: ResolvedConfig["kafka"]): Pick<KafkaTransportOptions, "sasl" | "ssl"> {
  const sasl =
    k.sasl_mechanism !== undefined
      ? { mechanism: k.sasl_mechanism, username: k.sasl_username ?? "", password: k.sasl_password ?? "" }
      : undefined;
  const tls = k.tls;
  const ssl = tls.enabled
    ? {
        rejectUnauthorized: tls.reject_unauthorized,
        ...(tls.ca_path ? { ca: [readFileSync(tls.ca_path, "utf8")] } : {}),
        ...(tls.cert_path ? { cert: readFileSync(tls.cert_path, "utf8") } : {}),
        ...(tls.key_path ? { key: readFileSync(tls.key_path, "utf8") } : {}),
      }
    : undefined;
  return { sasl, ssl };
}

async function kafkaTransport(
  cfg: ResolvedConfig,
  log: Logger,
  memory: MemoryLimit,
  metrics?: TransportMetrics,
): Promise<Transport> {
  const k = cfg.kafka;
  const { sasl, ssl } = kafkaAuth(k);
  // Loaded only when chosen: @platformatic/kafka takes about 0.3 s to load, kafkajs about 0.1 s.
  const Client =
    k.client === "platformatic"
      ? (await import("./platformatic.ts")).PlatformaticKafkaTransport
      : (await import("./kafka.ts")).KafkaTransport;
  return new Client({
    brokers: k.brokers,
    clientId: k.client_id,
    groupId: k.group_id,
    // Empty: discovery picks the topics from the broker's list, re-read every topic_refresh_secs.
    topics: k.topics.length > 0 ? k.topics : { rules: discoveryRules(k), refreshMs: k.topic_refresh_secs * 1000 },
    topicsSubscribed: metrics?.topicsSubscribed,
    sasl,
    ssl,
    sessionTimeoutMs: k.session_timeout_ms,
    rebalanceTimeoutMs: k.rebalance_timeout_ms,
    ...fetchBytes(k.batch_size, memory.bytes),
    batchRecords: k.batch_size,
    log,
  });
}

/**
 * Fetch sizes from the memory limit. A fetch is held whole while its records are routed: the response, each record
 * batch decompressed, and a JS object per record, which together ran to 10-20 times its bytes on the wire (JSON
 * records of 700 bytes, lz4). A 1024th of the limit per fetch (1 MiB up to a 1 GiB limit, the 64 MiB ceiling from
 * 64 GiB up); a partition takes at most a quarter of it, or batch_size records of about a kilobyte. Each partition's
 * records come back from their lane as one route reply, held until its last record's flush lands: with a 256th (4
 * MiB at 1 GiB) a single-topic run held 17-29 replies of 10 MiB and peaked at 380-408 MiB; with a 1024th (and the
 * replies collected as they are let go, see codec/lanes.ts) at 194-198 MiB, in about the same time.
 */
export function fetchBytes(batchSize: number, limitBytes: number): { maxBytes: number; maxBytesPerPartition: number } {
  const maxBytes = Math.max(1 << 20, Math.min(64 << 20, Math.floor(limitBytes / 1024)));
  return { maxBytes, maxBytesPerPartition: Math.max(256 << 10, Math.min(batchSize * 1024, Math.floor(maxBytes / 4))) };
}

async function grpcTransport(cfg: ResolvedConfig, log: Logger): Promise<Transport> {
  const g = cfg.grpc;
  if (g.listen === undefined) {
    throw new ConfigError(
      "grpc.listen",
      "is required when transport is grpc; set it or DFE_ARCHIVER_GRPC_LISTEN to host:port",
    );
  }
  // Loaded only when chosen: gRPC and its proto loader take about 0.15 s to load.
  const { GrpcTransport, grpcCredentials } = await import("./grpc.ts");
  return new GrpcTransport({
    listen: g.listen,
    credentials: grpcCredentials(g.tls),
    maxMessageBytes: g.max_message_bytes,
    queueRecords: g.queue_records,
    log,
  });
}

/** The transport's own gauges. */
export type TransportMetrics = Pick<Metrics, "topicsSubscribed">;

export async function openTransport(
  cfg: ResolvedConfig,
  log: Logger,
  memory: MemoryLimit,
  metrics?: TransportMetrics,
): Promise<Transport> {
  return cfg.transport === "kafka" ? kafkaTransport(cfg, log, memory, metrics) : grpcTransport(cfg, log);
}
