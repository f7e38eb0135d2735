// The store seen from the writers: a file opened under the destination, appended a frame at a time, then completed.
// A local backend writes in place; an object backend stages under <spool>/uploads and uploads the file whole once
// it completes. Either way `complete` resolving is the moment the file's offsets may be released.

import type { Codec } from "../codec/index.ts";

/** What a completed file is, for a backend that records it (an object store's manifest: object path, blocks). */
export interface FileMeta {
  readonly records: number;
  /** Codec name, e.g. "zstd". */
  readonly codec: string;
  /** Epoch milliseconds. */
  readonly openedAt: number;
  readonly closedAt: number;
  /** Length of each appended frame, in order: one block per flush, readable back on its own. */
  readonly blockLengths: readonly number[];
  /** Records in each block, in the same order: what a block dead-lettered whole carries. */
  readonly blockRecords: readonly number[];
}

export interface ArchiveFile {
  /** Path under the destination root, `/`-separated. */
  readonly relPath: string;
  /** Bytes on the file so far (after a failed append: what reached it). */
  readonly size: number;
  /** Appends one whole frame. Rejects with an ArchiverError whose kind says whether a retry can clear it. */
  append(frame: Buffer): Promise<void>;
  /**
   * Appends `raw`, the concatenation of its pieces, as one frame of `codec`, compressed where it is written; resolves
   * to the frame's length. Rejects as append() does, or with the codec's `codec_refused` (permanent) when it refuses
   * the batch.
   */
  appendCompressed(codec: Codec, raw: readonly Buffer[]): Promise<number>;
  /** Cuts the file back to `size` bytes: a failed append is cut back to the last whole block before a retry. */
  truncate(size: number): Promise<void>;
  /**
   * Closes the file's descriptor while the file stays in progress: the next append, truncate or complete opens it
   * again. Writers past archive.max_writers park their files, so a destination whose writer was evicted keeps one
   * file per roll rather than one per flush. On rejection the file no longer holds its descriptor.
   */
  park(): Promise<void>;
  /**
   * Resolves once the file is durable (synced / uploaded). Each step a failure can leave to be done again (naming
   * the file, syncing its directories, writing its manifest: a full disk) runs through `retry`, which may run it
   * again until it lands; the sync of the file's data never does (see LocalFile). On rejection the file no longer
   * holds its handle.
   */
  complete(meta: FileMeta, retry?: Retry): Promise<void>;
  /** Gives the file up: releases it and removes what was written. */
  abandon(): Promise<void>;
}

/**
 * Runs `attempt`, and runs it again after each failure a retry may clear for as long as the caller holds out; rejects
 * with the failure that ends it. A file's completion waits out a full disk through it.
 */
export type Retry = <R>(attempt: () => Promise<R>) => Promise<R>;

/** One attempt: what `complete` does without a caller's retry. */
export const once: Retry = (attempt) => attempt();

export interface ArchiveStore {
  readonly kind: "file" | "object";
  /** Creates `relPath` (never replacing an existing file); refuses a path that is absolute or has an empty, `.` or `..` segment. */
  open(relPath: string): Promise<ArchiveFile>;
}
