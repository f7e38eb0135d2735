// The configuration contract: one zod schema drives runtime validation, the CRD's OpenAPI schema and the config
// table of docs/configuration.md. It stays JSON-Schema representable (no transforms); defaults that depend on other keys are left
// unset here and made concrete in resolve.ts.
import { z } from "zod";
import { PATH_TOKENS, parsePathTemplate } from "../archive/path.ts";

declare module "zod" {
  interface GlobalMeta {
    /** The environment variable read directly into this key (besides the DFE_ARCHIVER_A__B nested form). */
    env?: string;
    /** The CLI flag that sets this key, above every other layer. */
    cli?: string;
    /** Never logged, and never echoed back in a refusal. */
    secret?: boolean;
    /** The default, in words, when it is derived from other keys rather than fixed. */
    derivedDefault?: string;
  }
}

export const TRANSPORTS = ["kafka", "grpc"] as const;
export const CODECS = ["zstd", "lz4", "snappy", "gzip"] as const;
export type Codec = (typeof CODECS)[number];
export const DESTINATION_SCHEMES = ["file", "s3", "minio", "gs", "az"] as const;
export const LOG_LEVELS = ["trace", "debug", "info", "warn", "error", "fatal"] as const;

/** Compression levels each codec accepts, and the level used when none is set; snappy takes none. */
export const CODEC_LEVELS: Record<Codec, { min: number; max: number; default: number } | undefined> = {
  zstd: { min: 1, max: 22, default: 3 },
  gzip: { min: 1, max: 9, default: 6 },
  lz4: { min: 1, max: 12, default: 1 },
  snappy: undefined,
};

export const MIB = 1024 * 1024;
/** S3 refuses a multipart part under 5 MiB (the last part excepted). */
export const MIN_MULTIPART_CHUNK = 5 * MIB;
/** The roll interval past which holding a file's offsets costs enough memory to warn about. */
export const ROLL_INTERVAL_WARN_SECS = 900;

const count = () => z.number().int().min(1);
const bytes = () => z.number().int().min(0);
const ratio = () => z.number().gt(0).max(1);

const HOST_PORT = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$/;
/** host:port; `lowest` 0 lets an address to listen on ask for any free port. */
const hostPort = (lowest: 0 | 1 = 1) =>
  z.string().refine(
    (v) => {
      const m = HOST_PORT.exec(v);
      return m !== null && Number(m[1]) >= lowest && Number(m[1]) <= 65535;
    },
    `must be host:port with a port from 1 to 65535${lowest === 0 ? " (or 0 for any free port)" : ""}, e.g. 0.0.0.0:9090 or [::]:9090`,
  );

const TOPIC_NAME = /^[A-Za-z0-9._-]{1,249}$/;
const topicName = () => z.string().regex(TOPIC_NAME, "must be a Kafka topic name: 1-249 of A-Z a-z 0-9 . _ -");

const regexPattern = () =>
  z.string().superRefine((v, ctx) => {
    try {
      new RegExp(v);
    } catch (err) {
      ctx.addIssue({ code: "custom", message: `is not a valid regular expression (${(err as Error).message})` });
    }
  });

const httpUrl = () =>
  z
    .string()
    .refine(
      (v) => URL.canParse(v) && /^https?:$/.test(new URL(v).protocol),
      "must be an http:// or https:// URL, e.g. http://minio:9000",
    );

// Keys that only work together: a certificate without its key (or the reverse) would fail at the first handshake.
function pairCheck(a: string, b: string) {
  return (v: Record<string, unknown>, ctx: z.RefinementCtx) => {
    if ((v[a] === undefined) !== (v[b] === undefined)) {
      const [set, missing] = v[a] === undefined ? [b, a] : [a, b];
      ctx.addIssue({ code: "custom", path: [missing], input: undefined, message: `is required when ${set} is set` });
    }
  };
}

function checkDestination(v: string, ctx: z.RefinementCtx): void {
  const m = /^([A-Za-z][A-Za-z0-9+.-]*):\/\/(.*)$/.exec(v);
  const allowed = DESTINATION_SCHEMES.map((s) => `${s}://`).join(", ");
  if (m === null) {
    ctx.addIssue({ code: "custom", message: `is not a destination URL; allowed schemes: ${allowed}` });
    return;
  }
  const scheme = m[1] as string;
  const rest = m[2] as string;
  if (!(DESTINATION_SCHEMES as readonly string[]).includes(scheme)) {
    ctx.addIssue({ code: "custom", message: `has unknown scheme ${scheme}://; allowed schemes: ${allowed}` });
    return;
  }
  if (scheme === "file") {
    if (!rest.startsWith("/") || rest === "/")
      ctx.addIssue({ code: "custom", message: "file:// needs an absolute directory, e.g. file:///var/data/archive" });
    return;
  }
  const authority = rest.split("/", 1)[0] as string;
  if (authority.includes("@"))
    ctx.addIssue({
      code: "custom",
      message: `must not carry credentials; set them under archive.${scheme === "gs" ? "gcs" : scheme === "az" ? "azure" : scheme} or their env vars`,
    });
  else if (authority === "")
    ctx.addIssue({ code: "custom", message: `names no bucket or container, e.g. ${scheme}://bucket-name/prefix` });
}

function checkPathTemplate(v: string, ctx: z.RefinementCtx): void {
  const parsed = parsePathTemplate(v);
  if ("error" in parsed) {
    ctx.addIssue({
      code: "custom",
      message: `has unknown or unclosed token ${parsed.error}; allowed tokens: ${PATH_TOKENS.map((t) => `{${t}}`).join(", ")}`,
    });
    return;
  }
  // A template that climbs out of its destination would be refused for every record; refuse it once, here.
  if (v.startsWith("/") || v.split("/").some((s) => s === "." || s === ".."))
    ctx.addIssue({ code: "custom", message: "must be relative, with no . or .. segment" });
}

const kafkaSchema = z
  .strictObject({
    brokers: z
      .array(hostPort())
      .default(["localhost:9092"])
      .describe("Kafka bootstrap brokers as host:port; on kafka at least one is required.")
      .meta({ env: "DFE_ARCHIVER_KAFKA_BROKERS" }),
    group_id: z
      .string()
      .min(1)
      .default("dfe-archiver")
      .describe("Consumer group the archiver joins; replicas sharing it split the partitions.")
      .meta({ env: "DFE_ARCHIVER_KAFKA_GROUP_ID" }),
    client_id: z.string().min(1).default("dfe-archiver").describe("Client id the consumer reports to the brokers."),
    topics: z
      .array(topicName())
      .default([])
      .describe("Topics to consume; empty turns on broker-side discovery, re-read every topic_refresh_secs.")
      .meta({ env: "DFE_ARCHIVER_KAFKA_TOPICS" }),
    topic_include: z
      .array(regexPattern())
      .optional()
      .describe("Regexes a discovered topic must match (any one); unset keeps every topic topic_exclude keeps.")
      .meta({ env: "DFE_ARCHIVER_KAFKA_TOPIC_INCLUDE" }),
    topic_exclude: z
      .array(regexPattern())
      .optional()
      .describe(
        "Regexes that drop a discovered topic; a set list replaces the default rather than adding to it, so list the DLQ topic and ^_ again to keep them out.",
      )
      .meta({
        env: "DFE_ARCHIVER_KAFKA_TOPIC_EXCLUDE",
        derivedDefault: "`^<dlq.topic>$` and `^_` (the DLQ topic and internal topics)",
      }),
    topic_refresh_secs: count()
      .default(60)
      .describe("Seconds between discovery's re-reads of the broker's topic list.")
      .meta({ env: "DFE_ARCHIVER_KAFKA_TOPIC_REFRESH_SECS" }),
    transformed_topic_suffixes: z
      .array(z.string().min(1))
      .default(["_transformed", ".transformed", "-transformed"])
      .describe(
        "Suffixes that mark a discovered topic as a landing topic's transformed twin: when the topics the filters keep hold both name and name plus a suffix, discovery consumes the landing one only. A transformed topic whose landing topic is absent or filtered out is consumed; empty turns the rule off.",
      ),
    sasl_mechanism: z
      .enum(["plain", "scram-sha-256", "scram-sha-512", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
      .optional()
      .describe("SASL mechanism; unset connects without SASL, set needs sasl_username and sasl_password.")
      .meta({ env: "DFE_ARCHIVER_KAFKA_SASL_MECHANISM" }),
    sasl_username: z
      .string()
      .min(1)
      .optional()
      .describe("SASL username, with sasl_mechanism.")
      .meta({ env: "DFE_ARCHIVER_KAFKA_SASL_USER" }),
    sasl_password: z
      .string()
      .min(1)
      .optional()
      .describe("SASL password; keep it out of the file and set it from a Secret.")
      .meta({ env: "DFE_ARCHIVER_KAFKA_SASL_PASSWORD", secret: true }),
    tls: z
      .strictObject({
        enabled: z.boolean().default(false).describe("Connects to the brokers over TLS."),
        ca_path: z.string().min(1).optional().describe("PEM file of the CA that signed the brokers' certificates."),
        cert_path: z.string().min(1).optional().describe("PEM client certificate for mutual TLS; needs key_path."),
        key_path: z.string().min(1).optional().describe("PEM private key of the client certificate; needs cert_path."),
        reject_unauthorized: z
          .boolean()
          .default(true)
          .describe("Refuses a broker certificate that does not verify; false only for testing."),
      })
      .superRefine(pairCheck("cert_path", "key_path"))
      .prefault({})
      .describe("TLS to the brokers."),
    client: z
      .enum(["kafkajs", "platformatic"])
      .default("platformatic")
      .describe(
        "Kafka client library behind the transport: @platformatic/kafka, its record batches decoded off the event loop (the faster, measured in bench/pipeline.bench.ts), or kafkajs.",
      ),
    batch_size: count().default(10000).describe("Records per batch the consumer hands to the pipeline."),
    session_timeout_ms: count()
      .default(30000)
      .describe("Consumer group session timeout in milliseconds; past it the broker rebalances the partitions."),
    rebalance_timeout_ms: count()
      .default(60000)
      .describe(
        "How long a rebalance waits for members to join again, in milliseconds (at least session_timeout_ms); a revoked partition's hand-over gets this less two heartbeat intervals.",
      ),
    acknowledgements: z
      .strictObject({
        enabled: z
          .boolean()
          .default(true)
          .describe(
            "Holds each record's offset until its archive file is complete (at-least-once); false commits each batch at receipt.",
          ),
      })
      .prefault({})
      .describe("End-to-end acknowledgement of records to the broker."),
  })
  .superRefine((v, ctx) => {
    if (v.rebalance_timeout_ms < v.session_timeout_ms)
      ctx.addIssue({
        code: "custom",
        path: ["rebalance_timeout_ms"],
        input: v.rebalance_timeout_ms,
        message: `is ${v.rebalance_timeout_ms}, below session_timeout_ms (${v.session_timeout_ms}); set it to at least ${v.session_timeout_ms}`,
      });
    if (v.sasl_mechanism === undefined) return;
    for (const key of ["sasl_username", "sasl_password"] as const)
      if (v[key] === undefined)
        ctx.addIssue({
          code: "custom",
          path: [key],
          input: undefined,
          message: `is required when sasl_mechanism is set; set it or ${key === "sasl_username" ? "DFE_ARCHIVER_KAFKA_SASL_USER" : "DFE_ARCHIVER_KAFKA_SASL_PASSWORD"}`,
        });
  })
  .prefault({})
  .describe("Kafka consumer, used when transport is kafka (and by the DLQ producer).");

const grpcSchema = z
  .strictObject({
    listen: hostPort()
      .optional()
      .describe("Address the Push listener binds, as host:port; required when transport is grpc.")
      .meta({ env: "DFE_ARCHIVER_GRPC_LISTEN" }),
    max_message_bytes: count()
      .default(64 * MIB)
      .describe("Largest Push message the listener accepts, in bytes."),
    queue_records: count()
      .default(100000)
      .describe("Records the listener queues ahead of the pipeline; a full queue holds the push answer."),
    tls: z
      .strictObject({
        cert_path: z.string().min(1).optional().describe("PEM server certificate; set with key_path to serve TLS."),
        key_path: z.string().min(1).optional().describe("PEM private key of the server certificate."),
        ca_path: z.string().min(1).optional().describe("PEM CA that client certificates must chain to (mutual TLS)."),
      })
      .superRefine(pairCheck("cert_path", "key_path"))
      .superRefine((v, ctx) => {
        if (v.ca_path !== undefined && v.cert_path === undefined)
          ctx.addIssue({
            code: "custom",
            path: ["cert_path"],
            input: undefined,
            message: "is required when ca_path is set: mutual TLS is served over TLS; set cert_path and key_path",
          });
      })
      .prefault({})
      .describe("TLS for the Push listener; unset serves plaintext."),
  })
  .prefault({})
  .describe("Push listener, used when transport is grpc.");

const s3Schema = z
  .strictObject({
    bucket: z
      .string()
      .min(1)
      .optional()
      .describe("S3 bucket; overrides the bucket in the destination URL.")
      .meta({ env: "DFE_ARCHIVER_S3_BUCKET" }),
    region: z.string().min(1).optional().describe("AWS region of the bucket.").meta({ env: "DFE_ARCHIVER_S3_REGION" }),
    access_key_id: z
      .string()
      .min(1)
      .optional()
      .describe("Static access key id; unset uses the AWS credential chain (env, IRSA, instance metadata).")
      .meta({ env: "DFE_ARCHIVER_S3_ACCESS_KEY_ID", secret: true }),
    secret_access_key: z
      .string()
      .min(1)
      .optional()
      .describe("Static secret access key, set with access_key_id.")
      .meta({ env: "DFE_ARCHIVER_S3_SECRET_ACCESS_KEY", secret: true }),
    session_token: z
      .string()
      .min(1)
      .optional()
      .describe("Session token for temporary static credentials.")
      .meta({ secret: true }),
    endpoint: httpUrl()
      .optional()
      .describe("Custom S3 endpoint URL for S3-compatible stores.")
      .meta({ env: "DFE_ARCHIVER_S3_ENDPOINT" }),
    force_path_style: z
      .boolean()
      .default(false)
      .describe("Addresses the bucket in the URL path rather than the host name, as most S3-compatible stores need."),
    server_side_encryption: z
      .enum(["AES256", "aws:kms"])
      .optional()
      .describe("Server-side encryption requested for each object; unset uses the bucket's default."),
    sse_kms_key_id: z.string().min(1).optional().describe("KMS key id or ARN, with server_side_encryption aws:kms."),
    storage_class: z
      .string()
      .min(1)
      .optional()
      .describe("Storage class of each object, e.g. STANDARD_IA; unset uses the bucket's default."),
  })
  .superRefine((v, ctx) => {
    if (v.sse_kms_key_id !== undefined && v.server_side_encryption !== "aws:kms")
      ctx.addIssue({
        code: "custom",
        path: ["server_side_encryption"],
        input: v.server_side_encryption,
        message: "must be aws:kms when sse_kms_key_id is set",
      });
  })
  .prefault({})
  .describe("AWS S3 backend, for s3:// destinations.");

const minioSchema = z
  .strictObject({
    endpoint: httpUrl().optional().describe("MinIO server URL, e.g. http://minio:9000."),
    access_key: z.string().min(1).optional().describe("MinIO access key (the user name).").meta({ secret: true }),
    secret_key: z.string().min(1).optional().describe("MinIO secret key (the password).").meta({ secret: true }),
    bucket: z.string().min(1).optional().describe("MinIO bucket; overrides the bucket in the destination URL."),
    use_ssl: z.boolean().default(false).describe("Connects to MinIO over TLS."),
    region: z.string().min(1).default("us-east-1").describe("Region MinIO signs requests for."),
  })
  .prefault({})
  .describe("MinIO backend, for minio:// destinations.");

const gcsSchema = z
  .strictObject({
    bucket: z.string().min(1).optional().describe("GCS bucket; overrides the bucket in the destination URL."),
    service_account_key: z
      .string()
      .refine((v) => {
        try {
          const key: unknown = JSON.parse(v);
          return typeof key === "object" && key !== null && !Array.isArray(key);
        } catch {
          return false;
        }
      }, "must be a service account key as inline JSON (an object)")
      .optional()
      .describe("Service account key as inline JSON; first in the credential order.")
      .meta({ secret: true }),
    credentials_path: z
      .string()
      .min(1)
      .optional()
      .describe(
        "Path to a service account JSON file; after service_account_key, before GOOGLE_APPLICATION_CREDENTIALS.",
      ),
    project_id: z.string().min(1).optional().describe("Google Cloud project id."),
    endpoint: httpUrl().optional().describe("Custom GCS endpoint URL, e.g. for an emulator."),
  })
  .prefault({})
  .describe("Google Cloud Storage backend, for gs:// destinations.");

const azureSchema = z
  .strictObject({
    account_name: z.string().min(1).optional().describe("Storage account name."),
    account_key: z
      .string()
      .min(1)
      .optional()
      .describe("Storage account key; prefer AZURE_STORAGE_KEY or a managed identity.")
      .meta({ secret: true }),
    sas_token: z
      .string()
      .min(1)
      .optional()
      .describe("Shared access signature token, used when account_key is unset.")
      .meta({ secret: true }),
    container: z.string().min(1).optional().describe("Blob container; overrides the container in the destination URL."),
    endpoint: httpUrl().optional().describe("Custom Blob service endpoint URL, e.g. for Azurite."),
  })
  .prefault({})
  .describe("Azure Blob Storage backend, for az:// destinations.");

const archiveSchema = z
  .strictObject({
    destination: z
      .string()
      .superRefine(checkDestination)
      .optional()
      .describe(
        "Where archive files go: file:///path, s3://bucket/prefix, minio://bucket/prefix, gs://bucket/prefix or az://container/prefix; unset idles.",
      )
      .meta({ env: "DFE_ARCHIVER_DESTINATION" }),
    path_template: z
      .string()
      .min(1)
      .superRefine(checkPathTemplate)
      .default("{year}/{month}/{day}/{hour}")
      .describe(
        `Path under each routed destination, from the tokens ${PATH_TOKENS.map((t) => `{${t}}`).join(" ")} (UTC).`,
      ),
    roll_size_bytes: count()
      .default(1073741824)
      .describe("Compressed file size at which an archive file rolls (closes and a new one opens)."),
    roll_interval_secs: count()
      .optional()
      .describe(
        "File age at which an archive file rolls; above 900 s while offsets are held warns of the memory it costs.",
      )
      .meta({ derivedDefault: "300 while offsets are held (kafka with acknowledgements) or on grpc, else 3600" }),
    max_writers: count()
      .default(1024)
      .describe(
        "Archive writers holding a file descriptor, one per destination; past it the least recently used one parks: its descriptor closes and its file stays in progress until it rolls.",
      ),
    multipart_chunk_size: z
      .number()
      .int()
      .min(MIN_MULTIPART_CHUNK, `must be at least ${MIN_MULTIPART_CHUNK} (5 MiB), the smallest part S3 accepts`)
      .default(8 * MIB)
      .describe(
        "Bytes in each multipart upload part; four are in flight per upload. A file of this size or less goes in one request.",
      )
      .meta({ env: "DFE_ARCHIVER_MULTIPART_CHUNK_SIZE" }),
    s3: s3Schema,
    minio: minioSchema,
    gcs: gcsSchema,
    azure: azureSchema,
  })
  .prefault({})
  .describe("Archive files: destination, layout, rolling and the storage backends.");

const bufferSchema = z
  .strictObject({
    flush_bytes: count()
      .default(MIB)
      .describe(
        "Size at which a destination's hot buffer flushes into its file; a buffer holds up to this plus one record.",
      )
      .meta({ env: "DFE_ARCHIVER_FLUSH_BYTES" }),
    flush_records: count().default(100000).describe("Record count at which a hot buffer flushes, whatever its size."),
    flush_age_secs: count()
      .default(60)
      .describe(
        "Age in seconds at which a hot buffer flushes, whatever its size. On kafka, while more destinations are buffered than the writers keep files for (archive.max_writers x 17), a buffer still short of flush_bytes goes to the spill then instead, and flushes once its oldest record is archive.roll_interval_secs old.",
      )
      .meta({ env: "DFE_ARCHIVER_FLUSH_INTERVAL_SECS" }),
    writer_parallelism: count()
      .default(2)
      .describe("Object-store uploads at once, each holding four parts of archive.multipart_chunk_size."),
    spool_dir: z
      .string()
      .min(1)
      .default("/var/spool/dfe/archiver")
      .describe("Parent of the staging directory (uploads/) and its quarantine.")
      .meta({ env: "DFE_ARCHIVER_SPOOL_DIR" }),
    staged_bytes_cap: z
      .number()
      .int()
      .gt(0, "must be above 0; unset it to use 8/9 of the spool budget")
      .optional()
      .describe("Staged bytes past which intake pauses, through the self-regulation latch.")
      .meta({ derivedDefault: "8/9 of the spool budget (8 GiB with no volume limit declared)" }),
    min_free_spool_bytes: bytes()
      .optional()
      .describe("Free bytes the spool volume needs at startup when staging holds nothing to upload.")
      .meta({ derivedDefault: "1/9 of the spool budget (1 GiB with no volume limit declared)" }),
    quarantine_bytes_cap: bytes()
      .optional()
      .describe("Bytes the quarantine directory may hold; a file past it is removed and counted.")
      .meta({ derivedDefault: "1/9 of the spool budget (1 GiB with no volume limit declared)" }),
  })
  .prefault({})
  .describe("Hot buffers and local staging.");

const compressionSchema = z
  .strictObject({
    codec: z
      .enum(CODECS)
      .default("zstd")
      .describe("Codec of every archive file; each flush appends one complete frame.")
      .meta({ env: "DFE_ARCHIVER_COMPRESSION_CODEC" }),
    level: z
      .number()
      .int()
      .optional()
      .describe("Compression level: zstd 1-22, gzip 1-9, lz4 1-12; snappy takes none.")
      .meta({ derivedDefault: "zstd 3, gzip 6, lz4 1" }),
  })
  .superRefine((v, ctx) => {
    if (v.level === undefined) return;
    const range = CODEC_LEVELS[v.codec];
    if (range === undefined)
      ctx.addIssue({
        code: "custom",
        path: ["level"],
        input: v.level,
        message: `is not taken by ${v.codec}; unset it`,
      });
    else if (v.level < range.min || v.level > range.max)
      ctx.addIssue({
        code: "custom",
        path: ["level"],
        input: v.level,
        message: `must be ${range.min}-${range.max} for ${v.codec}`,
      });
  })
  .prefault({})
  .describe("Compression of archive files.");

const routingSchema = z
  .strictObject({
    mode: z
      .enum(["expression", "topic"])
      .default("expression")
      .describe("Routes each record by JSON field values (expression) or by its topic alone (topic)."),
    expression_fields: z
      .array(
        z
          .string()
          .refine(
            (v) => v.split(".").every((s) => s !== ""),
            "must be a field path in dot notation, e.g. tags.category",
          ),
      )
      .min(1, "must name at least one field; use routing.mode topic to route by topic alone")
      .optional()
      .describe("Fields, in dot notation, whose values become path segments under the topic, in order.")
      .meta({ derivedDefault: '`["_org_id"]` on kafka, `["_source","_org_id"]` on grpc' }),
    default_segment: z
      .string()
      .min(1)
      .default("default")
      .describe("Segment for a field the record lacks or carries null or blank, and for a record with no topic."),
  })
  .prefault({})
  .describe("Routing of records to destinations; nesting past 64 levels is refused, a fixed limit.");

const dlqSchema = z
  .strictObject({
    enabled: z
      .boolean()
      .optional()
      .describe("Sends records refused for good to the DLQ topic; off, they are dropped and counted.")
      .meta({ derivedDefault: "true on kafka, false on grpc" }),
    topic: topicName().default("dfe-archiver-dlq").describe("Kafka topic dead letters are written to."),
    brokers: z
      .array(hostPort())
      .min(1)
      .optional()
      .describe("Brokers of the DLQ topic, as host:port.")
      .meta({ derivedDefault: "`kafka.brokers`" }),
    message_max_bytes: count()
      .default(1000000)
      .describe(
        "Largest DLQ entry the producer sends (Kafka's message.max.bytes); a record whose entry, payload in base64, is larger is dropped and counted dlq_too_large.",
      ),
  })
  .prefault({})
  .describe("Dead-letter queue, a Kafka topic, for records refused for good.");

const metricsSchema = z
  .strictObject({
    namespace: z
      .string()
      .regex(
        /^[A-Za-z_][A-Za-z0-9_]*$/,
        "must be a Prometheus name prefix: letters, digits and _, not starting with a digit",
      )
      .optional()
      .describe("Prefix for every metric name (namespace_name); unset leaves the names bare."),
    addr: hostPort(0)
      .default("0.0.0.0:9090")
      .describe(
        "Address of the /metrics, /livez, /readyz and /scaling/pressure server; port 0 takes any free port, which the log line `serving /metrics ...` names.",
      )
      .meta({ env: "METRICS_ADDR", cli: "--metrics-addr" }),
  })
  .prefault({})
  .describe("Prometheus metrics and health server.");

const loggerSchema = z
  .strictObject({
    level: z
      .enum(LOG_LEVELS)
      .default("info")
      .describe("Least severe level logged.")
      .meta({ env: "LOG_LEVEL", cli: "--log-level" }),
    format: z
      .enum(["json", "text"])
      .default("json")
      .describe("Log line format: json for collectors, text for a terminal.")
      .meta({ cli: "--log-format" }),
  })
  .prefault({})
  .describe("Log level and line format.");

const selfRegulationSchema = z
  .strictObject({
    enabled: z
      .boolean()
      .default(true)
      .describe("Pauses intake while a pressure source (memory, held records, staged bytes) runs high."),
    pause_above: ratio().default(0.8).describe("Pressure ratio above which the latch pauses intake."),
    resume_below: z
      .number()
      .min(0)
      .lt(1)
      .default(0.6)
      .describe("Pressure ratio below which a paused latch resumes intake; must be below pause_above."),
  })
  .superRefine((v, ctx) => {
    if (v.resume_below >= v.pause_above)
      ctx.addIssue({
        code: "custom",
        path: ["resume_below"],
        input: v.resume_below,
        message: `must be below self_regulation.pause_above (${v.pause_above}), or the latch never resumes`,
      });
  })
  .prefault({})
  .describe("Self-regulation latch that pauses partitions under pressure.");

const scalingSchema = z
  .strictObject({
    enabled: z.boolean().default(true).describe("Serves the scaling_pressure composite for KEDA."),
    memory_gate_threshold: ratio()
      .default(0.8)
      .describe("Memory ratio at which scaling pressure is forced to 100.")
      .meta({ env: "DFE_ARCHIVER_SCALING__MEMORY_GATE_THRESHOLD" }),
  })
  .prefault({})
  .describe("Scaling pressure for KEDA.");

const versionCheckSchema = z
  .strictObject({
    enabled: z
      .boolean()
      .default(true)
      .describe("Checks for a newer release at startup; false disables it.")
      .meta({ env: "DFE_ARCHIVER_VERSION_CHECK__ENABLED" }),
  })
  .prefault({})
  .describe("Startup check for a newer release.");

export const configShape = {
  transport: z
    .enum(TRANSPORTS)
    .default("kafka")
    .describe("How records arrive: kafka (a consumer group) or grpc (the Push listener).")
    .meta({ env: "DFE_ARCHIVER_TRANSPORT" }),
  kafka: kafkaSchema,
  grpc: grpcSchema,
  archive: archiveSchema,
  buffer: bufferSchema,
  compression: compressionSchema,
  routing: routingSchema,
  dlq: dlqSchema,
  metrics: metricsSchema,
  logger: loggerSchema,
  self_regulation: selfRegulationSchema,
  scaling: scalingSchema,
  version_check: versionCheckSchema,
};

type Sections = { -readonly [K in keyof typeof configShape]?: z.output<(typeof configShape)[K]> };

export interface CrossFault {
  path: (string | number)[];
  message: string;
  input: unknown;
}

/**
 * Faults that span sections. Each check runs only when the sections it reads are present (valid), so the loader can
 * run it on a partly invalid config and still report every fault at once.
 */
export function crossSectionFaults(c: Sections): CrossFault[] {
  const out: CrossFault[] = [];
  if (c.transport === "grpc" && c.grpc && c.grpc.listen === undefined)
    out.push({
      path: ["grpc", "listen"],
      input: undefined,
      message: "is required when transport is grpc; set grpc.listen or DFE_ARCHIVER_GRPC_LISTEN to host:port",
    });
  if (c.transport === "kafka" && c.kafka && c.kafka.brokers.length === 0)
    out.push({
      path: ["kafka", "brokers"],
      input: c.kafka.brokers,
      message: "must list at least one broker when transport is kafka; set kafka.brokers or DFE_ARCHIVER_KAFKA_BROKERS",
    });
  // On kafka an empty kafka.brokers is refused above; dlq.brokers, when set, lists at least one.
  if (c.transport === "grpc" && c.dlq?.enabled && c.dlq.brokers === undefined && c.kafka?.brokers.length === 0)
    out.push({
      path: ["dlq", "brokers"],
      input: undefined,
      message: "must list at least one broker while the DLQ is enabled (unset, it takes kafka.brokers, which is empty)",
    });
  return out;
}

export const configSchema = z
  .strictObject(configShape)
  .superRefine((v, ctx) => {
    for (const f of crossSectionFaults(v)) ctx.addIssue({ code: "custom", ...f });
  })
  .describe("dfe-archiver runtime configuration.");

export type ConfigInput = z.input<typeof configSchema>;
export type Config = z.output<typeof configSchema>;

/** The memory guard: read from DFE_ARCHIVER_MEMORY_* only, never from the config file. */
export const memorySchema = z
  .strictObject({
    limit_bytes: bytes()
      .default(0)
      .describe(
        "Memory guard cap in bytes; 0 detects it from the cgroup limit, and with none sizes the runtime as if given 1 GiB (or cgroup_headroom of the host's memory where that is less). Fetch sizes, the hot buffers' cap (a quarter), V8's young generation and the memory latch all follow it.",
      )
      .meta({ env: "DFE_ARCHIVER_MEMORY_LIMIT_BYTES" }),
    pressure_threshold: z
      .number()
      .min(0)
      .max(1)
      .default(0.8)
      .describe("Memory ratio, 0.0-1.0, at which back-pressure starts.")
      .meta({ env: "DFE_ARCHIVER_MEMORY_PRESSURE_THRESHOLD" }),
    cgroup_headroom: ratio()
      .default(0.85)
      .describe("Fraction of the cgroup memory limit the guard treats as the cap.")
      .meta({ env: "DFE_ARCHIVER_MEMORY_CGROUP_HEADROOM" }),
  })
  .describe("Memory guard, read from the environment only.");

export type MemoryConfig = z.output<typeof memorySchema>;

/** One configurable key: its dotted path, its schema as declared (wrappers included) and its metadata. */
export interface Leaf {
  path: string[];
  key: string;
  schema: z.ZodType;
  meta: z.GlobalMeta;
}

/** The object schema a declared field wraps (through default, prefault and optional), if it is one. */
export function objectOf(schema: z.ZodType): z.ZodObject | undefined {
  let s: z.ZodType = schema;
  for (;;) {
    if (s instanceof z.ZodObject) return s;
    if (s instanceof z.ZodDefault || s instanceof z.ZodPrefault || s instanceof z.ZodOptional)
      s = s.unwrap() as z.ZodType;
    else return undefined;
  }
}

/** The base type of a leaf, through its wrappers: what an environment value is coerced to. */
export function baseType(schema: z.ZodType): "string" | "number" | "boolean" | "enum" | "array" | "other" {
  let s: z.ZodType = schema;
  while (s instanceof z.ZodDefault || s instanceof z.ZodPrefault || s instanceof z.ZodOptional)
    s = s.unwrap() as z.ZodType;
  if (s instanceof z.ZodString) return "string";
  if (s instanceof z.ZodNumber) return "number";
  if (s instanceof z.ZodBoolean) return "boolean";
  if (s instanceof z.ZodEnum) return "enum";
  if (s instanceof z.ZodArray) return "array";
  return "other";
}

/** Every leaf key under `schema`, depth first in declaration order. */
export function leavesOf(schema: z.ZodObject, prefix: string[] = []): Leaf[] {
  const out: Leaf[] = [];
  for (const [name, field] of Object.entries(schema.shape) as [string, z.ZodType][]) {
    const path = [...prefix, name];
    const obj = objectOf(field);
    if (obj) out.push(...leavesOf(obj, path));
    else out.push({ path, key: path.join("."), schema: field, meta: field.meta() ?? {} });
  }
  return out;
}

export const CONFIG_LEAVES: readonly Leaf[] = leavesOf(configSchema);
/** Dotted keys of every section (kafka, kafka.tls, archive.s3, ...). */
export const SECTION_KEYS: ReadonlySet<string> = new Set(
  CONFIG_LEAVES.flatMap((l) => l.path.slice(1).map((_, i) => l.path.slice(0, i + 1).join("."))),
);
export const MEMORY_LEAVES: readonly Leaf[] = leavesOf(memorySchema, ["memory"]);

/** Dotted paths of every secret key: redacted in logs and never echoed in a refusal. */
export const SECRET_PATHS: readonly string[] = CONFIG_LEAVES.filter((l) => l.meta.secret).map((l) => l.key);
