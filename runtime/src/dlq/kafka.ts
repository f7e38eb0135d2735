// The DLQ: a Kafka topic written through confirming sends (acks=all). One entry per record, carrying its payload in
// base64 with the reason, the routed destination and where it came from. Only a send the broker confirms lets the
// pipeline release the records' offsets (Rejected); an entry no backend can hold is refused before any write.
import kafkajs, { type Producer, type SASLOptions } from "kafkajs";
import type { ConnectionOptions } from "node:tls";
import type { Logger } from "pino";
import { ArchiverError, ConfigError } from "../errors.ts";
import { quietIdleRequestQueues } from "../transport/kafkajs-queue.ts";

const { Kafka, logLevel } = kafkajs;

/** scalo's own ceiling for one dead letter, whatever the producer allows. */
export const DLQ_CEILING_BYTES = 16 * 1024 * 1024;
// The entry's JSON around the payload: reason, destination, topic, partition, offset, keys and quotes.
const ENTRY_OVERHEAD = 1024;

export interface DeadLetter {
  readonly payload: Buffer;
  readonly reason: string;
  readonly destination: string;
  readonly topic: string | undefined;
  readonly partition: number | undefined;
  readonly offset: string | undefined;
  /** Set when one entry carries a whole block of several records (a file with more lines than records). */
  readonly records?: number;
}

export interface DlqOptions {
  brokers: readonly string[];
  topic: string;
  messageMaxBytes: number;
  clientId: string;
  sasl?: { mechanism: "plain" | "scram-sha-256" | "scram-sha-512"; username: string; password: string } | undefined;
  ssl?: ConnectionOptions | boolean | undefined;
  log: Logger;
}

export class KafkaDlq {
  readonly topic: string;
  /** The largest entry any backend can hold: the producer's message.max.bytes, and scalo's 16 MiB. */
  readonly ceiling: number;
  readonly #kafka: InstanceType<typeof Kafka>;
  readonly #producer: Producer;
  readonly #log: Logger;

  constructor(opts: DlqOptions) {
    this.topic = opts.topic;
    this.ceiling = Math.min(opts.messageMaxBytes, DLQ_CEILING_BYTES);
    this.#log = opts.log.child({ component: "dlq" });
    quietIdleRequestQueues();
    this.#kafka = new Kafka({
      clientId: `${opts.clientId}-dlq`,
      brokers: [...opts.brokers],
      ...(opts.sasl ? { sasl: opts.sasl as SASLOptions } : {}),
      ...(opts.ssl !== undefined ? { ssl: opts.ssl } : {}),
      logLevel: logLevel.NOTHING,
    });
    this.#producer = this.#kafka.producer({ allowAutoTopicCreation: false });
  }

  /** Connects, and refuses to start when the DLQ topic does not exist (the archiver never creates topics). */
  async start(): Promise<void> {
    const admin = this.#kafka.admin();
    await admin.connect();
    try {
      const topics = await admin.listTopics();
      if (!topics.includes(this.topic)) {
        throw new ConfigError(
          "dlq.topic",
          `topic '${this.topic}' does not exist on the DLQ brokers: create it, name another with dlq.topic, or set dlq.enabled: false`,
        );
      }
    } finally {
      await admin.disconnect();
    }
    await this.#producer.connect();
  }

  /** Whether a record of `payloadBytes` fits one entry: its base64 payload is a third larger than the record. */
  fits(payloadBytes: number): boolean {
    return 4 * Math.ceil(payloadBytes / 3) + ENTRY_OVERHEAD <= this.ceiling;
  }

  /** Sends entries and resolves once the broker confirmed every one (acks=all). Rejects retryable otherwise. */
  async send(letters: readonly DeadLetter[]): Promise<void> {
    let batch: { value: string }[] = [];
    let bytes = 0;
    const flush = async () => {
      if (batch.length === 0) return;
      const messages = batch;
      batch = [];
      bytes = 0;
      await this.#producer.send({ topic: this.topic, acks: -1, messages });
    };
    try {
      for (const l of letters) {
        const value = JSON.stringify({
          payload: l.payload.toString("base64"),
          reason: l.reason,
          destination: l.destination,
          topic: l.topic,
          partition: l.partition,
          offset: l.offset,
          ...(l.records !== undefined ? { records: l.records, block: true } : {}),
        });
        if (bytes + value.length > this.ceiling) await flush();
        batch.push({ value });
        bytes += value.length;
      }
      await flush();
    } catch (err) {
      throw new ArchiverError(
        "dlq_write_failed",
        `DLQ write to ${this.topic} failed: ${(err as Error).message}`,
        "retryable",
        {
          cause: err,
        },
      );
    }
    this.#log.debug({ entries: letters.length }, "dead letters confirmed");
  }

  async close(): Promise<void> {
    await this.#producer.disconnect();
  }
}
