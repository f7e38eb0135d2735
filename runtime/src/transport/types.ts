// What a transport hands the pipeline, and what the pipeline asks of it. Kafka is one implementation; the gRPC
// Push listener another. Back-pressure is the awaited onBatch plus explicit pause/resume, never an unbounded queue.
import type { CommitOffset, PartitionRef } from "../delivery/tracker.ts";

export interface InboundRecord {
  readonly value: Buffer | null;
  /** The record's offset in its partition, as Kafka numbers it. */
  readonly offset: string;
}

export interface InboundBatch {
  /** Undefined for a push with no routing key: such a record gets no topic folder. */
  readonly topic: string | undefined;
  readonly partition: number;
  readonly records: readonly InboundRecord[];
  /** The partition's high watermark when the batch was fetched: position lag = highWatermark - (last + 1). */
  readonly highWatermark?: string;
}

export interface TransportSink {
  /** Awaited: the transport fetches no more for this partition until it resolves. */
  onBatch(batch: InboundBatch): Promise<void>;
  onAssigned(partitions: readonly PartitionRef[]): void;
  onRevoked(partitions: readonly PartitionRef[]): void;
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
