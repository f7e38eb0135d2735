// Kafka consumer group through kafkajs: manual commits only, per-partition pause/resume, assignment changes
// reported so the pipeline discards buffered records of a revoked partition before any write.
import { Kafka, logLevel, type Consumer, type LogEntry, type SASLOptions } from "kafkajs";
import type { CommitOffset, PartitionRef } from "../delivery/tracker.ts";
import { ArchiverError } from "../errors.ts";
import { registerKafkaCodecs } from "./kafka-codecs.ts";
import { groupByTopic, type KafkaTransportOptions, type Transport, type TransportSink } from "./types.ts";

type Assignment = Map<string, number[]>;

export class KafkaTransport implements Transport {
  readonly replayable = true;
  readonly #opts: KafkaTransportOptions;
  readonly #consumer: Consumer;
  #assignment: Assignment = new Map();
  #sink: TransportSink | undefined;

  constructor(opts: KafkaTransportOptions) {
    this.#opts = opts;
    registerKafkaCodecs();
    const log = opts.log.child({ component: "kafkajs" });
    const kafka = new Kafka({
      clientId: opts.clientId,
      brokers: [...opts.brokers],
      ...(opts.sasl ? { sasl: opts.sasl as SASLOptions } : {}),
      ...(opts.ssl !== undefined ? { ssl: opts.ssl } : {}),
      logLevel: logLevel.WARN,
      logCreator: () => (entry: LogEntry) => {
        const { message, ...extra } = entry.log;
        const fn = entry.level <= logLevel.ERROR ? log.error.bind(log) : log.warn.bind(log);
        fn(extra, message);
      },
    });
    this.#consumer = kafka.consumer({
      groupId: opts.groupId,
      sessionTimeout: opts.sessionTimeoutMs,
      heartbeatInterval: Math.max(1000, Math.floor(opts.sessionTimeoutMs / 10)),
      maxBytesPerPartition: opts.maxBytesPerPartition,
      maxBytes: opts.maxBytes,
      allowAutoTopicCreation: false,
      // A fetch the broker holds open delays the drain (the consumer disconnects only once it returns): keep it short.
      maxWaitTimeInMs: 500,
    });
  }

  async start(sink: TransportSink): Promise<void> {
    this.#sink = sink;
    const c = this.#consumer;
    c.on(c.events.GROUP_JOIN, (e) => this.#onJoin(e.payload.memberAssignment));
    await c.connect();
    await c.subscribe({ topics: [...this.#opts.topics], fromBeginning: true });
    await c.run({
      autoCommit: false,
      eachBatchAutoResolve: true,
      partitionsConsumedConcurrently: 2,
      eachBatch: async ({ batch, heartbeat, isStale }) => {
        if (isStale() || batch.isEmpty()) return;
        await sink.onBatch({
          topic: batch.topic,
          partition: batch.partition,
          records: batch.messages,
          highWatermark: batch.highWatermark,
        });
        await heartbeat();
      },
    });
  }

  #onJoin(assignment: Record<string, number[]>): void {
    const next: Assignment = new Map(Object.entries(assignment).map(([t, ps]) => [t, [...ps].sort((a, b) => a - b)]));
    const revoked: PartitionRef[] = [];
    const added: PartitionRef[] = [];
    for (const [topic, ps] of this.#assignment) {
      const now = new Set(next.get(topic) ?? []);
      for (const partition of ps) if (!now.has(partition)) revoked.push({ topic, partition });
    }
    for (const [topic, ps] of next) for (const partition of ps) added.push({ topic, partition });
    this.#assignment = next;
    this.#opts.log.info({ assignment, revoked }, "partitions assigned");
    if (revoked.length > 0) this.#sink?.onRevoked(revoked);
    this.#sink?.onAssigned(added);
  }

  async commit(offsets: readonly CommitOffset[]): Promise<void> {
    if (offsets.length === 0) return;
    try {
      await this.#consumer.commitOffsets(offsets.map((o) => ({ ...o })));
    } catch (err) {
      // A commit that fails (rebalance, broker away) is retried at the next commit with a floor at least as high.
      throw new ArchiverError("kafka_commit_failed", `offset commit failed: ${(err as Error).message}`, "retryable", {
        cause: err,
      });
    }
  }

  pause(partitions: readonly PartitionRef[]): void {
    this.#consumer.pause(groupByTopic(partitions));
  }

  resume(partitions: readonly PartitionRef[]): void {
    this.#consumer.resume(groupByTopic(partitions));
  }

  /** Pauses every subscribed topic: fetching stops, while the group membership (and so commits) stays. */
  async stopReceiving(): Promise<void> {
    this.#consumer.pause(this.#opts.topics.map((topic) => ({ topic })));
  }

  async close(): Promise<void> {
    await this.#consumer.disconnect();
  }
}
