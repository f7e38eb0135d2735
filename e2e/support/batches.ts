// Tests and benchmarks read what a transport hands the pipeline one record at a time, whichever kind of batch it is.
import { compressFrameSync } from "lz4-napi";
import { lz4Bound, Lz4Frames } from "../../runtime/src/transport/lz4-frame.ts";
import { forEachRecord } from "../../runtime/src/transport/record-batch.ts";
import type { InboundBatch } from "../../runtime/src/records.ts";

export interface BatchRecord {
  /** Null when the record had no value (a record batch's null reads as empty). */
  readonly value: Buffer | null;
  readonly offset: number;
}

/** The batch's records in order: decoded here for an encoded batch, as the route lane would. */
export function recordsOf(batch: InboundBatch): BatchRecord[] {
  if (batch.encoded === undefined) return batch.records.map((r) => ({ value: r.value, offset: Number(r.offset) }));
  const out: BatchRecord[] = [];
  const { bytes, fromOffset, aborted } = batch.encoded;
  forEachRecord(
    bytes,
    fromOffset,
    (records, start, end, offset) => out.push({ value: Buffer.from(records.subarray(start, end)), offset }),
    aborted,
  );
  return out;
}

/**
 * `records` as an lz4 decoder leaves them, as Kafka's lz4 batches are decoded: end to end in `decoder`'s memory, each
 * a view of it, valid until the decoder's next run.
 */
export function lz4Decoded(records: readonly (string | Buffer)[], decoder = new Lz4Frames()): Buffer[] {
  const bytes = records.map((r) => (typeof r === "string" ? Buffer.from(r) : r));
  const all = Buffer.concat(bytes);
  if (all.length === 0) return bytes;
  const frame = compressFrameSync(all);
  decoder.begin(lz4Bound(frame));
  const out = decoder.decode(frame);
  let at = 0;
  return bytes.map((r) => out.subarray(at, (at += r.length)));
}
