// Fetch v17 with each partition's records left as the broker sent them. The library's own Fetch decodes every record
// into an object on the event loop as the response arrives (3 µs a record, most of the main thread's time at full
// speed); here the bytes go to a route lane whole and are decoded there (record-batch.ts). The request is the
// library's; only the response parser differs, reading the same layout.
import { ResponseError, createAPI, fetchV17, readKnownTaggedFields, type Reader } from "@platformatic/kafka";
import type { AbortedTransaction } from "../records.ts";

export interface RawFetchPartition {
  readonly partitionIndex: number;
  readonly errorCode: number;
  readonly highWatermark: bigint;
  readonly abortedTransactions: readonly AbortedTransaction[];
  /** The partition's record batches end to end, the last one possibly cut at the fetch size; empty for none. */
  readonly records: Buffer;
}

export interface RawFetchResponse {
  readonly responses: readonly { readonly topicId: string; readonly partitions: readonly RawFetchPartition[] }[];
}

const EMPTY = Buffer.alloc(0);

/*
  Fetch Response (Version: 17) => throttle_time_ms error_code session_id [responses] TAG_BUFFER
    responses => topic_id [partitions] TAG_BUFFER
      partitions => partition_index error_code high_watermark last_stable_offset log_start_offset
        [aborted_transactions] preferred_read_replica records TAG_BUFFER (diverging_epoch, current_leader and
        snapshot_id are tagged fields)
        aborted_transactions => producer_id first_offset TAG_BUFFER
        records => COMPACT_RECORDS
*/
function parseResponse(_correlationId: number, apiKey: number, apiVersion: number, reader: Reader): RawFetchResponse {
  const errors: [string, [number, null]][] = [];
  reader.readInt32();
  const errorCode = reader.readInt16();
  if (errorCode !== 0) errors.push(["", [errorCode, null]]);
  reader.readInt32();
  const response: RawFetchResponse = {
    responses: reader.readArray((r, i) => ({
      topicId: r.readUUID(),
      partitions: r.readArray(
        (r, j): RawFetchPartition => {
          const partitionIndex = r.readInt32();
          const partitionError = r.readInt16();
          const highWatermark = r.readInt64();
          r.readInt64();
          r.readInt64();
          const abortedTransactions =
            r.readNullableArray((r) => ({ producerId: Number(r.readInt64()), firstOffset: Number(r.readInt64()) })) ??
            [];
          r.readInt32();
          if (partitionError !== 0) errors.push([`/responses/${i}/partitions/${j}`, [partitionError, null]]);
          // COMPACT_RECORDS: the length plus one, zero for null.
          const size = Math.max(0, r.readUnsignedVarInt() - 1);
          const records = size === 0 ? EMPTY : r.buffer.slice(r.position, r.position + size);
          r.skip(size);
          readKnownTaggedFields(r, {});
          return { partitionIndex, errorCode: partitionError, highWatermark, abortedTransactions, records };
        },
        true,
        false,
      ),
    })),
  };
  readKnownTaggedFields(reader, {});
  // As the library's parser: a response with an error rejects, carrying the response for the partitions' codes.
  if (errors.length > 0) throw new ResponseError(apiKey, apiVersion, Object.fromEntries(errors), response);
  return response;
}

/** Called as `rawFetch.async(connection, maxWaitMs, minBytes, maxBytes, isolationLevel, sessionId, epoch, ...)`. */
export const rawFetch = createAPI<Parameters<typeof fetchV17.createRequest>, RawFetchResponse>(
  1,
  17,
  fetchV17.createRequest,
  parseResponse,
);
