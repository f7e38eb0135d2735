// Compression: each flush becomes one complete standalone frame (zstd frame, LZ4 frame, snappy framed stream, gzip
// member), so a file of many flushes is one standard concatenated stream its codec's own tools read whole, and the
// archiver can read a staged file back a flush at a time. All of it runs on the codec lanes, off the event loop:
// zstd and gzip through node:zlib, lz4 frames through lz4-napi's frame API (its plain `compress` writes a raw block
// no lz4 tool reads), snappy framing through the snappy package's frame-format Compressor.

import { ArchiverError, ConfigError } from "../errors.ts";
import { codecId, codecLanes, type AppendTarget, type LaneFailure } from "./lanes.ts";

export const CODEC_NAMES = ["zstd", "lz4", "snappy", "gzip"] as const;
export type CodecName = (typeof CODEC_NAMES)[number];
export type CodecSuffix = ".zst" | ".lz4" | ".sz" | ".gz";

export interface Codec {
  readonly name: CodecName;
  /** Appended to the object key after the extension. */
  readonly suffix: CodecSuffix;
  /** The level in use, or undefined for a codec without levels. */
  readonly level: number | undefined;
  /**
   * One flushed batch in, one complete standalone frame out. Rejects with ArchiverError `codec_refused` (permanent)
   * when the codec refuses the input, so the batch is dead-lettered.
   */
  compress(input: Buffer): Promise<Buffer>;
  /**
   * compress() of the concatenation of `input`'s pieces, with the frame appended at the end of `target` (a
   * descriptor opened for append, or the path of a parked file) where it is made; resolves to the frame's length. A refusal rejects as compress() does; a failed write
   * rejects with the lane's `fs` failure, which says how much of the frame reached the file.
   */
  compressAppend(target: AppendTarget, input: readonly Buffer[]): Promise<number>;
  /**
   * One block (one compress() output, as a manifest's block length delimits it) back to the batch. Rejects with
   * ArchiverError `codec_corrupt` (permanent) when the block does not decode or fails its checksum.
   */
  decompress(block: Buffer): Promise<Buffer>;
}

export interface LevelRange {
  readonly min: number;
  readonly max: number;
  readonly default: number;
}

/** The levels each codec accepts. lz4-napi's frame API (lz4_flex) has a single speed and snappy has none. */
export const CODEC_LEVELS = {
  zstd: { min: 1, max: 22, default: 3 },
  lz4: undefined,
  snappy: undefined,
  gzip: { min: 1, max: 9, default: 6 },
} as const satisfies Record<CodecName, LevelRange | undefined>;

/**
 * Builds the codec for `compression.codec` / `compression.level`. A level outside the codec's range is a ConfigError.
 * A level given to a codec without levels is ignored (and `level` reads undefined), since the seed's configuration
 * carries `level: 3` whatever the codec.
 */
export function createCodec(name: CodecName, level?: number): Codec {
  return new LaneCodec(name, name === "zstd" || name === "gzip" ? levelIn(name, level) : undefined);
}

const SUFFIXES: Record<CodecName, CodecSuffix> = { zstd: ".zst", lz4: ".lz4", snappy: ".sz", gzip: ".gz" };

class LaneCodec implements Codec {
  readonly name: CodecName;
  readonly suffix: CodecSuffix;
  readonly level: number | undefined;
  readonly #id: number;

  constructor(name: CodecName, level: number | undefined) {
    this.name = name;
    this.suffix = SUFFIXES[name];
    this.level = level;
    this.#id = codecId(CODEC_NAMES.indexOf(name), level);
  }

  compress(input: Buffer): Promise<Buffer> {
    return codecLanes()
      .run("compress", this.#id, input)
      .catch((err: unknown) => {
        throw this.#failure("codec_refused", "refused the batch", err);
      });
  }

  compressAppend(target: AppendTarget, input: readonly Buffer[]): Promise<number> {
    return codecLanes()
      .compressAppend(target, this.#id, input)
      .catch((err: unknown) => {
        if (!(err instanceof Error) && (err as LaneFailure).kind === "fs") throw err;
        throw this.#failure("codec_refused", "refused the batch", err);
      });
  }

  decompress(block: Buffer): Promise<Buffer> {
    return codecLanes()
      .run("decompress", this.#id, block)
      .catch((err: unknown) => {
        throw this.#failure("codec_corrupt", "block does not decode", err);
      });
  }

  /**
   * Decided here, once, by what was being done: a batch the codec will not compress fails the same way on every
   * retry, so it is dead-lettered; a block that will not decode means the file cannot be read back. A lane that
   * died is neither, and stays retryable.
   */
  #failure(code: "codec_refused" | "codec_corrupt", what: string, err: unknown): Error {
    if (err instanceof Error) return err;
    const message = (err as LaneFailure).message;
    return new ArchiverError(code, `${this.name} ${what}: ${message}`, "permanent");
  }
}

function levelIn(name: "zstd" | "gzip", level: number | undefined): number {
  const range: LevelRange = CODEC_LEVELS[name];
  const chosen = level ?? range.default;
  if (!Number.isInteger(chosen) || chosen < range.min || chosen > range.max) {
    throw new ConfigError(
      "compression.level",
      `${chosen} is not a ${name} level; use an integer ${range.min}-${range.max}`,
    );
  }
  return chosen;
}
