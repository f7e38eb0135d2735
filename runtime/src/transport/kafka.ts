// Kafka consumer group through kafkajs: manual commits only, per-partition pause/resume, assignment changes
// reported so the pipeline discards buffered records of a revoked partition before any write. kafkajs subscribes only
// before run() and never drops a topic, so a subscription change replaces the consumer: the old one finishes the
// batches it is delivering and leaves the group, then a new one joins with the new topics. Commits wait meanwhile,
// and a partition the new consumer keeps is read on from where the old one was.
import { Kafka, logLevel, type Admin, type Consumer, type LogEntry, type SASLOptions } from "kafkajs";
import type { CommitOffset, PartitionRef } from "../delivery/tracker.ts";
import { ArchiverError } from "../errors.ts";
import type { TopicChange } from "./discovery.ts";
import { registerKafkaCodecs } from "./kafka-codecs.ts";
import { quietIdleRequestQueues } from "./kafkajs-queue.ts";
import { TopicSubscription } from "./subscription.ts";
import { groupByTopic, type KafkaTransportOptions, type Transport, type TransportSink } from "./types.ts";

type Assignment = Map<string, number[]>;

export class KafkaTransport implements Transport {
  readonly replayable = true;
  readonly #opts: KafkaTransportOptions;
  readonly #kafka: Kafka;
  readonly #subscription: TopicSubscription;
  #admin: Admin | undefined;
  #consumer: Consumer | undefined;
  #assignment: Assignment = new Map();
  /** The next offset to read of each assigned partition the sink has resolved a batch of. */
  readonly #positions = new Map<string, bigint>();
  /** The join each partition was last assigned at: a batch begun under an earlier assignment records no position. */
  readonly #assignedAt = new Map<string, number>();
  #joins = 0;
  /** Partitions pause() holds: a new consumer starts with none paused, so each join applies them again. */
  readonly #paused = new Set<string>();
  /** A consumer swap in progress: commits wait for the consumer that follows. */
  #swap: Promise<void> | undefined;
  /** Commits in flight: a stopping kafkajs consumer resolves a commit without sending it, so a swap waits for them. */
  readonly #commits = new Set<Promise<void>>();
  #receiving = true;
  #sink: TransportSink | undefined;

  constructor(opts: KafkaTransportOptions) {
    this.#opts = opts;
    registerKafkaCodecs();
    quietIdleRequestQueues();
    const log = opts.log.child({ component: "kafkajs" });
    this.#kafka = new Kafka({
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
    this.#subscription = new TopicSubscription(opts, {
      list: () => this.#listTopics(),
      apply: (topics, change) => this.#resubscribe(topics, change),
    });
  }

  async start(sink: TransportSink): Promise<void> {
    this.#sink = sink;
    if (this.#subscription.discovering) {
      this.#admin = this.#kafka.admin();
      await this.#admin.connect();
    }
    await this.#subscription.start();
  }

  async #listTopics(): Promise<string[]> {
    if (this.#admin === undefined) throw new Error("topic discovery without an admin client");
    return this.#admin.listTopics();
  }

  async #resubscribe(topics: readonly string[], change: TopicChange): Promise<void> {
    let release!: () => void;
    this.#swap = new Promise<void>((r) => (release = r));
    try {
      await Promise.allSettled([...this.#commits]);
      const old = this.#consumer;
      this.#consumer = undefined;
      if (old !== undefined) {
        this.#opts.log.info({ added: change.added, removed: change.removed }, "replacing the consumer");
        // Waits for the batches it is delivering, then leaves the group.
        await old.disconnect();
      }
      if (topics.length === 0) {
        this.#revokeAll();
        return;
      }
      const c = this.#newConsumer();
      this.#consumer = c;
      try {
        await c.connect();
        await c.subscribe({ topics: [...topics], fromBeginning: true });
        await this.#run(c);
      } catch (err) {
        this.#consumer = undefined;
        await c.disconnect().catch(() => undefined);
        this.#revokeAll();
        throw err;
      }
    } finally {
      this.#swap = undefined;
      release();
    }
  }

  #newConsumer(): Consumer {
    const opts = this.#opts;
    const c = this.#kafka.consumer({
      groupId: opts.groupId,
      sessionTimeout: opts.sessionTimeoutMs,
      rebalanceTimeout: opts.rebalanceTimeoutMs,
      heartbeatInterval: Math.max(1000, Math.floor(opts.sessionTimeoutMs / 10)),
      maxBytesPerPartition: opts.maxBytesPerPartition,
      maxBytes: opts.maxBytes,
      allowAutoTopicCreation: false,
      // A fetch the broker holds open delays the drain (the consumer disconnects only once it returns): keep it short.
      maxWaitTimeInMs: 500,
    });
    c.on(c.events.GROUP_JOIN, (e) => {
      this.#sink?.onState?.("ok");
      this.#onJoin(c, e.payload.memberAssignment);
    });
    // A crash is often a subscribed topic deleted under the consumer: look again now rather than at the next refresh.
    c.on(c.events.CRASH, (e) => {
      this.#sink?.onState?.("degraded", `consumer crashed, rejoining: ${e.payload.error.message}`);
      this.#subscription.refreshSoon();
    });
    return c;
  }

  async #run(c: Consumer): Promise<void> {
    const sink = this.#sink;
    if (sink === undefined) throw new Error("consumer run before start");
    await c.run({
      autoCommit: false,
      eachBatchAutoResolve: true,
      partitionsConsumedConcurrently: 2,
      eachBatch: async ({ batch, heartbeat, isStale }) => {
        if (isStale() || batch.isEmpty()) return;
        const key = partitionKey(batch.topic, batch.partition);
        const at = this.#assignedAt.get(key);
        await sink.onBatch({
          topic: batch.topic,
          partition: batch.partition,
          records: batch.messages,
          highWatermark: batch.highWatermark,
        });
        const next = BigInt(batch.lastOffset()) + 1n;
        if (at !== undefined && this.#assignedAt.get(key) === at && next > (this.#positions.get(key) ?? -1n)) {
          this.#positions.set(key, next);
        }
        await heartbeat();
      },
    });
  }

  #onJoin(c: Consumer, assignment: Record<string, number[]>): void {
    if (c !== this.#consumer) return;
    const join = ++this.#joins;
    const next: Assignment = new Map(Object.entries(assignment).map(([t, ps]) => [t, [...ps].sort((a, b) => a - b)]));
    const revoked: PartitionRef[] = [];
    const added: PartitionRef[] = [];
    const kept: PartitionRef[] = [];
    for (const [topic, ps] of this.#assignment) {
      const now = new Set(next.get(topic) ?? []);
      for (const partition of ps) if (!now.has(partition)) revoked.push({ topic, partition });
    }
    for (const [topic, ps] of next) {
      const was = new Set(this.#assignment.get(topic) ?? []);
      for (const partition of ps) (was.has(partition) ? kept : added).push({ topic, partition });
    }
    this.#assignment = next;
    for (const p of revoked) this.#forget(partitionKey(p.topic, p.partition));
    for (const p of added) {
      const key = partitionKey(p.topic, p.partition);
      this.#forget(key);
      this.#assignedAt.set(key, join);
    }
    // Everything of a kept partition before its position was handed over and is held or released already.
    for (const p of kept) {
      const at = this.#positions.get(partitionKey(p.topic, p.partition));
      if (at !== undefined) c.seek({ topic: p.topic, partition: p.partition, offset: at.toString() });
    }
    if (!this.#receiving) c.pause([...next.keys()].map((topic) => ({ topic })));
    else {
      const paused = [...next].flatMap(([topic, ps]) =>
        ps.filter((p) => this.#paused.has(partitionKey(topic, p))).map((partition) => ({ topic, partition })),
      );
      if (paused.length > 0) c.pause(groupByTopic(paused));
    }
    this.#opts.log.info({ assignment, kept: kept.length, revoked }, "partitions assigned");
    if (revoked.length > 0) this.#sink?.onRevoked(revoked);
    if (added.length > 0) this.#sink?.onAssigned(added);
  }

  /** No consumer holds anything any more: every partition is revoked. */
  #revokeAll(): void {
    const revoked = [...this.#assignment].flatMap(([topic, ps]) => ps.map((partition) => ({ topic, partition })));
    this.#assignment = new Map();
    for (const p of revoked) this.#forget(partitionKey(p.topic, p.partition));
    if (revoked.length === 0) return;
    this.#opts.log.info({ revoked }, "partitions revoked");
    this.#sink?.onRevoked(revoked);
  }

  #forget(key: string): void {
    this.#positions.delete(key);
    this.#assignedAt.delete(key);
    this.#paused.delete(key);
  }

  async commit(offsets: readonly CommitOffset[]): Promise<void> {
    if (offsets.length === 0) return;
    while (this.#swap !== undefined) await this.#swap;
    // A commit computed before a rebalance took a partition away must not land over its new owner's.
    const mine = offsets.filter((o) => this.#assignment.get(o.topic)?.includes(o.partition) === true);
    const c = this.#consumer;
    if (mine.length > 0) {
      if (c === undefined) throw new ArchiverError("kafka_commit_failed", "no consumer to commit through", "retryable");
      const sent = c.commitOffsets(mine.map((o) => ({ ...o })));
      this.#commits.add(sent);
      try {
        await sent;
      } catch (err) {
        // A commit that fails (rebalance, broker away) is retried at the next commit with a floor at least as high.
        throw new ArchiverError("kafka_commit_failed", `offset commit failed: ${(err as Error).message}`, "retryable", {
          cause: err,
        });
      } finally {
        this.#commits.delete(sent);
      }
    }
    if (mine.length < offsets.length) {
      throw new ArchiverError(
        "kafka_commit_failed",
        "offsets of partitions no longer assigned were not committed",
        "retryable",
      );
    }
  }

  pause(partitions: readonly PartitionRef[]): void {
    for (const p of partitions) this.#paused.add(partitionKey(p.topic, p.partition));
    this.#withConsumer((c) => c.pause(groupByTopic(partitions)));
  }

  resume(partitions: readonly PartitionRef[]): void {
    for (const p of partitions) this.#paused.delete(partitionKey(p.topic, p.partition));
    if (this.#receiving) this.#withConsumer((c) => c.resume(groupByTopic(partitions)));
  }

  /** Pauses every subscribed topic: fetching stops, while the group membership (and so commits) stays. */
  async stopReceiving(): Promise<void> {
    this.#receiving = false;
    await this.#subscription.stop();
    this.#withConsumer((c) => c.pause(this.#subscription.topics.map((topic) => ({ topic }))));
  }

  async close(): Promise<void> {
    this.#receiving = false;
    await this.#subscription.stop();
    await this.#consumer?.disconnect();
    await this.#admin?.disconnect();
  }

  /**
   * Pause and resume reach a consumer that runs. kafkajs refuses them before run() and between a crash and its
   * restart; the next join applies #paused (and a stop) anyway.
   */
  #withConsumer(fn: (c: Consumer) => void): void {
    const c = this.#consumer;
    if (c === undefined) return;
    try {
      fn(c);
    } catch (err) {
      this.#opts.log.debug({ err }, "consumer not running: the next join applies the pause state");
    }
  }
}

function partitionKey(topic: string, partition: number): string {
  return `${topic}\u0000${partition}`;
}
