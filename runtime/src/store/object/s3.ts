// S3 and MinIO: one request (PutObject) per attempt for a file of one part's size or less, else one multipart upload.
// Every request that carries bytes carries their CRC32, which the store checks. Credentials: the config's static keys
// when set, else the AWS SDK's default provider chain (AWS_* env, web identity / IRSA, ECS and EC2 instance metadata),
// which reads the process environment itself. MinIO is S3 on its own endpoint, path-style, with keys it always needs.
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
  UploadPartCommand,
  type ChecksumAlgorithm,
  type CompletedPart,
  type CreateMultipartUploadCommandInput,
  type S3ClientConfig,
  type StorageClass,
} from "@aws-sdk/client-s3";
import type { Logger } from "pino";
import type { ResolvedConfig } from "../../config/resolve.ts";
import { ConfigError } from "../../errors.ts";
import { abortQuietly, genericFault, redactor, uploadError, type FaultReader, type Redact } from "./fail.ts";
import { StagedFile } from "./staged.ts";
import { checkKey, joinKey, objectMetadata, type ObjectBackend, type UploadMeta } from "./types.ts";

/** S3's limits on one multipart upload: parts, and bytes in a part. */
const MAX_PARTS = 10_000;
const MAX_PART_BYTES = 5 * 1024 ** 3;

// Refusals of the object itself; MinIO names its own for a bad name. Everything else can clear.
const PERMANENT = new Set([
  "EntityTooLarge",
  "KeyTooLongError",
  "InvalidObjectName",
  "XMinioInvalidObjectName",
  "XMinioInvalidResourceName",
]);

export const s3Faults: FaultReader = {
  fault(err) {
    if (err instanceof S3ServiceException)
      return { code: err.name, status: err.$metadata.httpStatusCode, message: err.message };
    const fault = genericFault(err);
    // The SDK's own failures (TimeoutError, a missing region) carry their kind in the name.
    return fault.code === "store_error" && err instanceof Error && err.name !== "Error"
      ? { ...fault, code: err.name }
      : fault;
  },
  permanent: (fault) => PERMANENT.has(fault.code),
};

// A connection that cannot open, or a request that stops moving, fails its try instead of holding the upload.
const REQUEST_HANDLER = { connectionTimeout: 10_000, requestTimeout: 120_000 };

/** The client settings for an s3:// or minio:// destination, and the secrets in them. */
export function s3ClientConfig(
  cfg: ResolvedConfig,
  scheme: "s3" | "minio",
): { config: S3ClientConfig; secrets: string[] } {
  if (scheme === "minio") {
    const m = cfg.archive.minio;
    if (m.access_key === undefined || m.secret_key === undefined)
      throw new ConfigError(
        m.access_key === undefined ? "archive.minio.access_key" : "archive.minio.secret_key",
        "minio:// needs archive.minio.access_key and archive.minio.secret_key (DFE_ARCHIVER_ARCHIVE__MINIO__ACCESS_KEY " +
          "and DFE_ARCHIVER_ARCHIVE__MINIO__SECRET_KEY): MinIO has no instance metadata to fall back to",
      );
    // The schema makes the endpoint a URL with its scheme, so use_ssl can only contradict it.
    const endpoint = m.endpoint ?? cfg.archive.s3.endpoint;
    if (endpoint === undefined)
      throw new ConfigError(
        "archive.minio.endpoint",
        "is required for minio:// destinations (or DFE_ARCHIVER_S3_ENDPOINT), e.g. http://minio:9000",
      );
    if (m.use_ssl && endpoint.startsWith("http://"))
      throw new ConfigError("archive.minio.use_ssl", `is true, but the endpoint ${endpoint} is plain http://`);
    return {
      config: {
        endpoint,
        region: m.region,
        forcePathStyle: true,
        credentials: { accessKeyId: m.access_key, secretAccessKey: m.secret_key },
        requestHandler: REQUEST_HANDLER,
      },
      secrets: [m.access_key, m.secret_key],
    };
  }
  const s = cfg.archive.s3;
  const config: S3ClientConfig = { forcePathStyle: s.force_path_style, requestHandler: REQUEST_HANDLER };
  // S3-compatible stores mostly ignore the region, but the signature needs one.
  const region = s.region ?? (s.endpoint === undefined ? undefined : "us-east-1");
  if (region !== undefined) config.region = region;
  if (s.endpoint !== undefined) config.endpoint = s.endpoint;
  if ((s.access_key_id === undefined) !== (s.secret_access_key === undefined))
    throw new ConfigError(
      s.access_key_id === undefined ? "archive.s3.access_key_id" : "archive.s3.secret_access_key",
      "archive.s3.access_key_id and archive.s3.secret_access_key (DFE_ARCHIVER_S3_ACCESS_KEY_ID, " +
        "DFE_ARCHIVER_S3_SECRET_ACCESS_KEY) are set together, or neither to use the AWS credential chain",
    );
  if (s.access_key_id !== undefined && s.secret_access_key !== undefined)
    config.credentials = {
      accessKeyId: s.access_key_id,
      secretAccessKey: s.secret_access_key,
      ...(s.session_token === undefined ? {} : { sessionToken: s.session_token }),
    };
  else if (s.session_token !== undefined)
    throw new ConfigError("archive.s3.session_token", "is used with access_key_id and secret_access_key; set them too");
  return { config, secrets: [s.access_key_id, s.secret_access_key, s.session_token].filter((x) => x !== undefined) };
}

type PutOptions = Pick<CreateMultipartUploadCommandInput, "ServerSideEncryption" | "SSEKMSKeyId" | "StorageClass">;

// The SDK's default, pinned so that AWS_REQUEST_CHECKSUM_CALCULATION=when_required cannot take it off.
const CHECKSUM: ChecksumAlgorithm = "CRC32";

export class S3Backend implements ObjectBackend {
  readonly scheme: "s3" | "minio";
  readonly bucket: string;
  readonly #prefix: string;
  readonly #client: S3Client;
  readonly #chunkSize: number;
  readonly #put: PutOptions;
  readonly #log: Logger;
  readonly #redact: Redact;

  constructor(opts: {
    scheme: "s3" | "minio";
    client: S3Client;
    bucket: string;
    prefix: string;
    chunkSize: number;
    put?: PutOptions;
    log: Logger;
    redact: Redact;
  }) {
    this.scheme = opts.scheme;
    this.bucket = opts.bucket;
    this.#prefix = opts.prefix;
    this.#client = opts.client;
    this.#chunkSize = opts.chunkSize;
    this.#put = opts.put ?? {};
    this.#log = opts.log;
    this.#redact = opts.redact;
  }

  key(relPath: string): string {
    return joinKey(this.#prefix, relPath);
  }

  async upload(opts: { stagedPath: string; size: number; key: string; meta: UploadMeta; signal?: AbortSignal }) {
    checkKey(opts.key);
    const staged = await StagedFile.open(opts.stagedPath, opts.size);
    try {
      // A file past MAX_PARTS chunks is sent in larger parts rather than refused.
      const partSize = Math.min(MAX_PART_BYTES, Math.max(this.#chunkSize, Math.ceil(opts.size / MAX_PARTS)));
      // One part or less goes in one request: as a multipart upload it would take three (create, part, complete).
      if (opts.size <= partSize) await this.#putObject(staged, opts);
      else await this.#multipart(staged, partSize, opts);
    } finally {
      await staged.close();
    }
  }

  #where(key: string): string {
    return `${this.scheme}://${this.bucket}/${key}`;
  }

  /** The whole file in one PutObject: nothing is left in the store when it fails, so there is nothing to abort. */
  async #putObject(staged: StagedFile, opts: { key: string; meta: UploadMeta; signal?: AbortSignal }): Promise<void> {
    const { key, signal } = opts;
    try {
      const body = await staged.whole();
      await this.#client.send(
        new PutObjectCommand({
          Bucket: this.bucket,
          Key: key,
          ...this.#put,
          Metadata: objectMetadata(opts.meta, "-"),
          Body: body,
          ContentLength: body.length,
          ChecksumAlgorithm: CHECKSUM,
        }),
        { abortSignal: signal },
      );
    } catch (err) {
      throw uploadError(err, "put object", this.#where(key), signal, s3Faults, this.#redact);
    }
  }

  async #multipart(
    staged: StagedFile,
    partSize: number,
    opts: { key: string; meta: UploadMeta; signal?: AbortSignal },
  ): Promise<void> {
    const { key, signal } = opts;
    const where = this.#where(key);
    const target = { Bucket: this.bucket, Key: key };
    let uploadId: string | undefined;
    let op = "create upload";
    try {
      const created = await this.#client.send(
        new CreateMultipartUploadCommand({ ...target, ...this.#put, Metadata: objectMetadata(opts.meta, "-") }),
        { abortSignal: signal },
      );
      uploadId = created.UploadId;
      if (uploadId === undefined) throw new Error("the store answered CreateMultipartUpload without an UploadId");
      const UploadId = uploadId;
      const parts: CompletedPart[] = [];
      op = "upload part";
      await staged.sendParts({ partSize, emptyPart: true, signal }, async (part, partSignal) => {
        const sent = await this.#client.send(
          new UploadPartCommand({
            ...target,
            UploadId,
            PartNumber: part.number,
            Body: part.data,
            ContentLength: part.data.length,
            ChecksumAlgorithm: CHECKSUM,
          }),
          { abortSignal: partSignal },
        );
        parts[part.number - 1] = { PartNumber: part.number, ETag: sent.ETag };
      });
      op = "complete upload";
      await this.#client.send(
        new CompleteMultipartUploadCommand({ ...target, UploadId, MultipartUpload: { Parts: parts } }),
        {
          abortSignal: signal,
        },
      );
    } catch (err) {
      const failed = uploadError(err, op, where, signal, s3Faults, this.#redact);
      const id = uploadId;
      if (id !== undefined)
        await abortQuietly(
          (abortSignal) =>
            this.#client.send(new AbortMultipartUploadCommand({ ...target, UploadId: id }), { abortSignal }),
          where,
          "its parts stay until the bucket's lifecycle rule for incomplete uploads removes them",
          this.#log,
          s3Faults,
          this.#redact,
        );
      throw failed;
    }
  }
}

/** The backend of an s3:// or minio:// destination. */
export function openS3(
  cfg: ResolvedConfig,
  scheme: "s3" | "minio",
  bucket: string,
  prefix: string,
  log: Logger,
): ObjectBackend {
  const { config, secrets } = s3ClientConfig(cfg, scheme);
  const s = cfg.archive.s3;
  const put: PutOptions = {};
  if (scheme === "s3") {
    if (s.server_side_encryption !== undefined) put.ServerSideEncryption = s.server_side_encryption;
    if (s.sse_kms_key_id !== undefined) put.SSEKMSKeyId = s.sse_kms_key_id;
    if (s.storage_class !== undefined) put.StorageClass = s.storage_class as StorageClass;
  }
  return new S3Backend({
    scheme,
    client: new S3Client(config),
    bucket,
    prefix,
    chunkSize: cfg.archive.multipart_chunk_size,
    put,
    log,
    redact: redactor(secrets),
  });
}
