// The seed's metric names, bare unless metrics.namespace is set. One registry per process (a test may build several).
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";

export type DropReason = "refused" | "dlq_too_large" | "too_deep" | "unreplayable";

export interface Metrics {
  readonly registry: Registry;
  readonly messagesReceived: Counter;
  readonly messagesArchived: Counter;
  readonly messagesWritten: Counter;
  readonly messagesDropped: Counter<"reason">;
  readonly messagesDlq: Counter;
  readonly bytesWritten: Counter;
  readonly bytesCompressed: Counter;
  readonly filesCreated: Counter;
  readonly filesClosed: Counter;
  readonly archiveRoll: Counter<"trigger">;
  readonly writerEvictions: Counter;
  readonly hotBufferEvictions: Counter;
  readonly hotBufferSpills: Counter;
  readonly spilledBytes: Gauge;
  readonly flushOperations: Counter;
  readonly archiveErrors: Counter;
  readonly kafkaCommitErrors: Counter;
  readonly routingErrors: Counter;
  readonly routingFallback: Counter<"field">;
  readonly transportRevokeDiscarded: Counter<"stage">;
  readonly transportHandovers: Counter<"outcome">;
  readonly stagedFilesRecovered: Counter;
  readonly stagedFilesQuarantined: Counter<"reason">;
  readonly stagedFilesRemoved: Counter<"reason">;
  readonly configReloadErrors: Counter;
  readonly bufferBytes: Gauge;
  readonly bufferRecords: Gauge;
  readonly kafkaLag: Gauge;
  readonly topicsSubscribed: Gauge;
  readonly pipelineDeliveryGuarantee: Gauge<"guarantee" | "reason">;
  readonly pipelineIdle: Gauge;
  readonly hotBuffersActive: Gauge;
  readonly hotBuffersBytes: Gauge;
  readonly heldRecords: Gauge;
  readonly heldOffsetBytes: Gauge;
  readonly uploadsPending: Gauge;
  readonly stagedBytes: Gauge;
  readonly writersOpen: Gauge;
  readonly writersParked: Gauge;
  readonly scalingPressure: Gauge;
  readonly selfRegulationPaused: Gauge;
  readonly sinkCircuitOpen: Gauge;
  readonly configValid: Gauge;
  readonly batchSizeBytes: Histogram;
  readonly flushDuration: Histogram;
}

export function createMetrics(opts: { namespace?: string | undefined; defaultMetrics?: boolean } = {}): Metrics {
  const registry = new Registry();
  const n = (name: string) => (opts.namespace ? `${opts.namespace}_${name}` : name);
  const counter = <L extends string = never>(name: string, help: string, labelNames: readonly L[] = []) =>
    new Counter<L>({ name: n(name), help, labelNames, registers: [registry] });
  const gauge = <L extends string = never>(name: string, help: string, labelNames: readonly L[] = []) =>
    new Gauge<L>({ name: n(name), help, labelNames, registers: [registry] });
  if (opts.defaultMetrics ?? true) collectDefaultMetrics({ register: registry, prefix: opts.namespace ? n("") : "" });

  return {
    registry,
    messagesReceived: counter("messages_received_total", "Messages received from the transport"),
    messagesArchived: counter("messages_archived_total", "Records in archive files the store confirmed"),
    messagesWritten: counter(
      "messages_written_total",
      "Records written into an open archive file, before the store confirms it",
    ),
    messagesDropped: counter("messages_dropped_total", "Records dropped for good, by reason", ["reason"]),
    messagesDlq: counter("messages_dlq_total", "Messages sent to DLQ"),
    bytesWritten: counter("bytes_written_total", "Uncompressed bytes written"),
    bytesCompressed: counter("bytes_compressed_total", "Compressed bytes written"),
    filesCreated: counter("files_created_total", "Archive files created"),
    filesClosed: counter("files_closed_total", "Archive files closed (rolled)"),
    archiveRoll: counter("archive_roll_total", "Archive files rolled, by trigger", ["trigger"]),
    writerEvictions: counter(
      "writer_evictions_total",
      "Writers parked (descriptor closed, file kept in progress) because archive.max_writers was reached",
    ),
    hotBufferEvictions: counter(
      "hot_buffer_evictions_total",
      "Hot buffers flushed early because a record for another destination needed their slot",
    ),
    hotBufferSpills: counter(
      "hot_buffer_spills_total",
      "Hot buffers whose records went to the spill in the spool, the hot buffers' memory bound being reached",
    ),
    spilledBytes: gauge("spilled_bytes", "Bytes of hot-buffer records spilled to the spool, awaiting their flush"),
    flushOperations: counter("flush_operations_total", "Flush operations"),
    archiveErrors: counter("archive_errors_total", "Archive errors, each failed attempt counted"),
    kafkaCommitErrors: counter("kafka_commit_errors_total", "Offset releases the transport failed"),
    routingErrors: counter("routing_errors_total", "Records routing failed on, archived under their topic"),
    routingFallback: counter(
      "routing_fallback_total",
      "Expression-routing fields a record did not carry, by field path",
      ["field"],
    ),
    transportRevokeDiscarded: counter(
      "transport_revoke_discarded_total",
      "Records of a revoked partition discarded before any write, by stage",
      ["stage"],
    ),
    transportHandovers: counter(
      "transport_handovers_total",
      "Revocations whose partitions' records were committed before their next owner read them (done), or not all by the rebalance bound (cut_short)",
      ["outcome"],
    ),
    stagedFilesRecovered: counter(
      "staged_files_recovered_total",
      "Complete staged files a previous process left, uploaded by this one",
    ),
    stagedFilesQuarantined: counter("staged_files_quarantined_total", "Staged files moved to quarantine", ["reason"]),
    stagedFilesRemoved: counter("staged_files_removed_total", "Staged files removed at startup", ["reason"]),
    configReloadErrors: counter("config_reload_errors_total", "Config changes refused; the running config kept"),
    bufferBytes: gauge("buffer_bytes", "Current buffer size"),
    bufferRecords: gauge("buffer_records", "Current buffer record count"),
    kafkaLag: gauge("kafka_lag", "Records past this pod's read position (sum across assigned partitions)"),
    topicsSubscribed: gauge(
      "topics_subscribed",
      "Kafka topics the consumer subscribes to (kafka.topics, or discovered)",
    ),
    pipelineDeliveryGuarantee: gauge("pipeline_delivery_guarantee", "1 for the delivery guarantee in force", [
      "guarantee",
      "reason",
    ]),
    pipelineIdle: gauge("pipeline_idle", "1 while no destination is configured and the pipeline idles"),
    hotBuffersActive: gauge("hot_buffers_active", "Active hot buffers"),
    hotBuffersBytes: gauge("hot_buffers_bytes", "Total bytes in hot buffers"),
    heldRecords: gauge("held_records", "Records whose offsets are held until their archive file is durable"),
    heldOffsetBytes: gauge("held_offset_bytes", "Bytes the held offsets cost, tracked by span"),
    uploadsPending: gauge("uploads_pending", "Archive files staged locally and not yet confirmed by the store"),
    stagedBytes: gauge("staged_bytes", "Bytes of archive files staged locally and not yet uploaded"),
    writersOpen: gauge("writers_open", "Open archive writers"),
    writersParked: gauge(
      "writers_parked",
      "Writers past archive.max_writers whose file stays in progress with its descriptor closed",
    ),
    scalingPressure: gauge("scaling_pressure", "Scaling pressure composite, 0-100"),
    selfRegulationPaused: gauge("self_regulation_paused", "1 while the self-regulation latch has intake paused"),
    sinkCircuitOpen: gauge(
      "sink_circuit_open",
      "1 while every write the sink was asked for fails (scaling_pressure reads 0 meanwhile)",
    ),
    configValid: gauge("config_valid", "1 while the last config read was valid, 0 while a refused change is pending"),
    batchSizeBytes: new Histogram({
      name: n("batch_size_bytes"),
      help: "Archive batch size distribution",
      buckets: [1 << 10, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24],
      registers: [registry],
    }),
    flushDuration: new Histogram({
      name: n("flush_duration_seconds"),
      help: "Flush duration distribution",
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5],
      registers: [registry],
    }),
  };
}
