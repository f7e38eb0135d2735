// Tests and benchmarks read what a transport hands the pipeline one record at a time, whichever kind of batch it is.
import { forEachRecord } from "../../runtime/src/transport/record-batch.ts";
import type { InboundBatch } from "../../runtime/src/transport/types.ts";

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
