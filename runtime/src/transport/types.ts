// What a transport hands the pipeline, and what the pipeline asks of it. Kafka is one implementation; the gRPC
// Push listener another. Back-pressure is the awaited onBatch plus explicit pause/resume, never an unbounded queue.
import type { ConnectionOptions } from "node:tls";
import type { Logger } from "pino";
import type { Gauge } from "prom-client";
import type { CommitOffset, PartitionRef } from "../delivery/tracker.ts";
import type { InboundBatch } from "../records.ts";
import type { TopicSource } from "./subscription.ts";

export interface TransportSink {
  /** Awaited: the transport fetches no more for this partition until it resolves. */
  onBatch(batch: InboundBatch): Promise<void>;
  /**
   * Partitions newly assigned: each is read from its committed offset. A partition this member keeps across a
   * rebalance or a subscription change is not reported again and is read on from where it was.
   */
  onAssigned(partitions: readonly PartitionRef[]): void;
  /**
   * Partitions taken away (a rebalance, or their topic left the subscription). Without `handOver` they are gone
   * already: nothing of them may be committed. With it the transport lets them go only once the returned promise
   * settles, or once `handOver` aborts at the bound it sets (within the rebalance timeout): it fetches nothing more of
   * them, and commits of them still land meanwhile, so the sink commits what it received of them first and their next
   * owner reads none of it again.
   */
  onRevoked(partitions: readonly PartitionRef[], handOver?: AbortSignal): Promise<void> | void;
  /** The connection's health as the client sees it, for the transport health component. */
  onState?(state: "ok" | "degraded", reason?: string): void;
}

export interface Transport {
  /** Whether a commit releases records the source can read again (kafka); false for a push listener. */
  readonly replayable: boolean;
  start(sink: TransportSink): Promise<void>;
  commit(offsets: readonly CommitOffset[]): Promise<void>;
  pause(partitions: readonly PartitionRef[]): void;
  resume(partitions: readonly PartitionRef[]): void;
  /** Stops receiving; the transport can still commit until close(). */
  stopReceiving(): Promise<void>;
  close(): Promise<void>;
}

/** What every Kafka client implementation of Transport is built from. */
export interface KafkaTransportOptions {
  brokers: readonly string[];
  clientId: string;
  groupId: string;
  /** The topics to consume, or discovery's rules and refresh interval. */
  topics: TopicSource;
  /** Set to the number of topics subscribed. */
  topicsSubscribed?: Gauge | undefined;
  sasl?: { mechanism: "plain" | "scram-sha-256" | "scram-sha-512"; username: string; password: string } | undefined;
  ssl?: ConnectionOptions | boolean | undefined;
  sessionTimeoutMs: number;
  /** How long a rebalance waits for members to join again; bounds a revoked partition's hand-over. */
  rebalanceTimeoutMs: number;
  /** Bytes fetched per partition per request at most: sets the size of a batch. */
  maxBytesPerPartition: number;
  /** Records a partition's fetch aims at (kafka.batch_size), where the client sizes fetches by records. */
  batchRecords: number;
  /** Bytes fetched per request across partitions. */
  maxBytes: number;
  log: Logger;
}

export function groupByTopic(partitions: readonly PartitionRef[]): { topic: string; partitions: number[] }[] {
  const m = new Map<string, number[]>();
  for (const p of partitions) {
    const list = m.get(p.topic) ?? [];
    list.push(p.partition);
    m.set(p.topic, list);
  }
  return [...m].map(([topic, ps]) => ({ topic, partitions: ps }));
}
