// Builds the configured Transport, and the Kafka auth options the consumer and the DLQ producer share.
import { readFileSync } from "node:fs";
import type { Logger } from "pino";
import type { ResolvedConfig } from "../config/resolve.ts";
import { ConfigError } from "../errors.ts";
import type { MemoryLimit } from "../regulate/memory.ts";
import { KafkaTransport } from "./kafka.ts";
import { PlatformaticKafkaTransport } from "./platformatic.ts";
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

function kafkaTransport(cfg: ResolvedConfig, log: Logger, memory: MemoryLimit): Transport {
  const k = cfg.kafka;
  if (k.topics.length === 0) {
    throw new ConfigError("kafka.topics", "is empty: list the topics to archive (DFE_ARCHIVER_KAFKA_TOPICS=a,b)");
  }
  const { sasl, ssl } = kafkaAuth(k);
  const Client = k.client === "platformatic" ? PlatformaticKafkaTransport : KafkaTransport;
  return new Client({
    brokers: k.brokers,
    clientId: k.client_id,
    groupId: k.group_id,
    topics: k.topics,
    sasl,
    ssl,
    sessionTimeoutMs: k.session_timeout_ms,
    // About a kilobyte a record: batch_size records per fetch, but no more than the memory limit affords (a fetch is
    // held compressed and decompressed while its records are routed).
    maxBytesPerPartition: Math.max(1 << 20, Math.min(k.batch_size * 1024, Math.floor(memory.bytes / 128))),
    maxBytes: Math.max(4 << 20, Math.floor(memory.bytes / 32)),
    log,
  });
}

export function openTransport(cfg: ResolvedConfig, log: Logger, memory: MemoryLimit): Transport {
  if (cfg.transport === "kafka") return kafkaTransport(cfg, log, memory);
  throw new ConfigError("transport", "grpc is not available in this build yet; use transport: kafka");
}
