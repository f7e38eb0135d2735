// What a batch of records is, as a transport hands it to the pipeline and the route stage reads it: the one module of
// record types the stages share, below both. route/ sees records only through these; the format an encoded batch
// carries (Kafka's record batches) is read by the EncodedFormat its transport supplies, so routing knows none.

export interface InboundRecord {
  readonly value: Buffer | null;
  /** The record's offset in its partition, as Kafka numbers it. */
  readonly offset: string;
}

interface BatchOf {
  /** Undefined for a push with no routing key: such a record gets no topic folder. */
  readonly topic: string | undefined;
  readonly partition: number;
  /** The partition's high watermark when the batch was fetched: position lag = highWatermark - (last + 1). */
  readonly highWatermark?: string;
}

/** Records one by one, as a client decoded them. */
export interface RecordsBatch extends BatchOf {
  readonly records: readonly InboundRecord[];
  readonly encoded?: undefined;
}

/**
 * A partition's fetched record batches as the broker sent them (Kafka's v2 format), left encoded: they are
 * decompressed and decoded where they are routed, off the event loop.
 */
export interface EncodedBatch extends BatchOf {
  readonly records?: undefined;
  readonly encoded: EncodedRecords;
}

export interface EncodedRecords {
  /** Whole record batches end to end (a partial one the broker cut at the fetch size already left out). */
  readonly bytes: Uint8Array;
  /** Records below this offset were delivered already: a compressed batch arrives whole. */
  readonly fromOffset: number;
  /** The last offset the batches cover, control batches included. */
  readonly lastOffset: number;
  /** Transactions aborted in the range (read_committed): their records are not archived. */
  readonly aborted: readonly AbortedTransaction[];
}

/** A transaction the broker reports aborted in the fetched range (read_committed): its records are skipped. */
export interface AbortedTransaction {
  readonly producerId: number;
  readonly firstOffset: number;
}

export type InboundBatch = RecordsBatch | EncodedBatch;

/** One record as a reader hands it over: its value at records[start, end), where the reader left it, and its offset. */
export type RecordVisitor = (records: Buffer, start: number, end: number, offset: number) => void;

/** How the records of an EncodedBatch are read, from the transport that fetched them. */
export interface EncodedFormat {
  /**
   * `bytes` (whole batches) cut at batch boundaries into at most `pieces` runs of about equal records, none under
   * `minRecords` but the last; cheap enough for the event loop (it reads the batches' heads alone).
   */
  cut(bytes: Uint8Array, pieces: number, minRecords: number): Uint8Array[];
  /**
   * Calls `visit` for each record at or past `fromOffset`, in order, the records of `aborted` transactions left out;
   * returns the records visited. What `visit` is given lasts until the next call on the same thread, and may lie in
   * a decoder's WebAssembly memory (wasm/memory.ts), where the route scan reads it in place. Throws a permanent
   * ArchiverError on bytes that do not parse.
   */
  forEach(bytes: Uint8Array, fromOffset: number, visit: RecordVisitor, aborted: readonly AbortedTransaction[]): number;
}
