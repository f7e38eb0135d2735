import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseConfigText } from "../../src/config/load.ts";
import { ConfigFaultsError } from "../../src/config/validate.ts";
import { ConfigError } from "../../src/errors.ts";
import { onlyFault, refusal } from "./helpers.ts";

interface Case {
  name: string;
  yaml?: string;
  env?: NodeJS.ProcessEnv;
  key: string;
  /** Every one of these must appear in the fault's message. */
  says: string[];
}

const cases: Case[] = [
  { name: "unknown transport", yaml: "transport: http", key: "transport", says: ["kafka, grpc", 'got "http"'] },
  {
    name: "unknown codec",
    env: { DFE_ARCHIVER_COMPRESSION_CODEC: "brotli" },
    key: "compression.codec",
    says: ["zstd, lz4, snappy, gzip", 'got "brotli"', "DFE_ARCHIVER_COMPRESSION_CODEC"],
  },
  {
    name: "unknown routing mode",
    yaml: "routing: { mode: regex }",
    key: "routing.mode",
    says: ["expression, topic", 'got "regex"'],
  },
  {
    name: "unknown path_template token",
    yaml: 'archive: { path_template: "{year}/{topic}/{hour}" }',
    key: "archive.path_template",
    says: ["{topic}", "{year}, {month}, {day}, {hour}, {minute}, {timestamp}, {seq}"],
  },
  {
    name: "unclosed path_template token",
    yaml: 'archive: { path_template: "{year}/{month" }',
    key: "archive.path_template",
    says: ["{month", "allowed tokens"],
  },
  {
    name: "path_template climbing out of its destination",
    yaml: 'archive: { path_template: "../{year}" }',
    key: "archive.path_template",
    says: ["relative, with no . or .. segment"],
  },
  {
    name: "rebalance_timeout_ms below session_timeout_ms",
    yaml: "kafka: { session_timeout_ms: 45000, rebalance_timeout_ms: 30000 }",
    key: "kafka.rebalance_timeout_ms",
    says: ["is 30000, below session_timeout_ms (45000)", "at least 45000"],
  },
  {
    name: "multipart_chunk_size under 5 MiB, from the file",
    yaml: "archive: { multipart_chunk_size: 5242879 }",
    key: "archive.multipart_chunk_size",
    says: ["at least 5242880 (5 MiB)", "got 5242879"],
  },
  {
    name: "multipart_chunk_size under 5 MiB, from the env",
    env: { DFE_ARCHIVER_MULTIPART_CHUNK_SIZE: "1048576" },
    key: "archive.multipart_chunk_size",
    says: ["5242880", "got 1048576", "DFE_ARCHIVER_MULTIPART_CHUNK_SIZE"],
  },
  {
    name: "grpc with no listen address",
    yaml: "transport: grpc",
    key: "grpc.listen",
    says: ["required when transport is grpc", "DFE_ARCHIVER_GRPC_LISTEN", "host:port"],
  },
  {
    name: "grpc listen that is not host:port",
    yaml: 'transport: grpc\ngrpc: { listen: "50051" }',
    key: "grpc.listen",
    says: ["host:port", 'got "50051"'],
  },
  {
    name: "kafka with no brokers",
    env: { DFE_ARCHIVER_KAFKA_BROKERS: "" },
    key: "kafka.brokers",
    says: ["at least one broker", "DFE_ARCHIVER_KAFKA_BROKERS"],
  },
  {
    name: "a broker that is not host:port",
    yaml: "kafka: { brokers: [kafka] }",
    key: "kafka.brokers[0]",
    says: ["host:port", 'got "kafka"'],
  },
  {
    name: "an enabled DLQ with no brokers",
    yaml: 'transport: grpc\ngrpc: { listen: "0.0.0.0:1" }\nkafka: { brokers: [] }\ndlq: { enabled: true }',
    key: "dlq.brokers",
    says: ["at least one broker while the DLQ is enabled", "kafka.brokers"],
  },
  {
    name: "invalid include regex",
    yaml: 'kafka: { topic_include: ["^ok", "(unclosed"] }',
    key: "kafka.topic_include[1]",
    says: ["not a valid regular expression", '"(unclosed"'],
  },
  {
    name: "invalid exclude regex from the env",
    env: { DFE_ARCHIVER_KAFKA_TOPIC_EXCLUDE: "[a" },
    key: "kafka.topic_exclude[0]",
    says: ["not a valid regular expression", "DFE_ARCHIVER_KAFKA_TOPIC_EXCLUDE"],
  },
  {
    name: "bad destination scheme",
    env: { DFE_ARCHIVER_DESTINATION: "ftp://host/x" },
    key: "archive.destination",
    says: ["ftp://", "file://, s3://, minio://, gs://, az://", "DFE_ARCHIVER_DESTINATION"],
  },
  {
    name: "destination that is no URL",
    yaml: "archive: { destination: my-bucket/prefix }",
    key: "archive.destination",
    says: ["not a destination URL", "file://, s3://, minio://, gs://, az://"],
  },
  {
    name: "object destination with no bucket",
    yaml: "archive: { destination: 's3:///prefix' }",
    key: "archive.destination",
    says: ["names no bucket", "s3://bucket-name/prefix"],
  },
  {
    name: "file destination that is not absolute",
    yaml: "archive: { destination: 'file://var/data' }",
    key: "archive.destination",
    says: ["absolute directory", "file:///var/data/archive"],
  },
  {
    name: "zstd level out of range",
    yaml: "compression: { codec: zstd, level: 23 }",
    key: "compression.level",
    says: ["1-22 for zstd", "got 23"],
  },
  {
    name: "gzip level out of range",
    yaml: "compression: { codec: gzip, level: 0 }",
    key: "compression.level",
    says: ["1-9 for gzip", "got 0"],
  },
  {
    name: "lz4 level out of range",
    yaml: "compression: { codec: lz4, level: 13 }",
    key: "compression.level",
    says: ["1-12 for lz4", "got 13"],
  },
  {
    name: "a level for snappy",
    yaml: "compression: { codec: snappy, level: 1 }",
    key: "compression.level",
    says: ["not taken by snappy", "unset it"],
  },
  {
    name: "staged_bytes_cap of 0",
    yaml: "buffer: { staged_bytes_cap: 0 }",
    key: "buffer.staged_bytes_cap",
    says: ["above 0", "got 0"],
  },
  {
    name: "resume_below at pause_above",
    yaml: "self_regulation: { pause_above: 0.7, resume_below: 0.7 }",
    key: "self_regulation.resume_below",
    says: ["below self_regulation.pause_above (0.7)", "got 0.7"],
  },
  {
    name: "a fractional count",
    yaml: "buffer: { flush_records: 1.5 }",
    key: "buffer.flush_records",
    says: ["must be an integer", "got 1.5"],
  },
  {
    name: "a zero count",
    yaml: "archive: { max_writers: 0 }",
    key: "archive.max_writers",
    says: ["at least 1", "got 0"],
  },
  {
    name: "a string where a number goes",
    yaml: "buffer: { flush_bytes: 1MiB }",
    key: "buffer.flush_bytes",
    says: ["must be a number", 'got "1MiB"'],
  },
  {
    name: "unknown SASL mechanism",
    yaml: "kafka: { sasl_mechanism: gssapi }",
    key: "kafka.sasl_mechanism",
    says: ["plain, scram-sha-256, scram-sha-512", 'got "gssapi"'],
  },
  {
    name: "SASL with no password",
    yaml: "kafka: { sasl_mechanism: plain, sasl_username: u }",
    key: "kafka.sasl_password",
    says: ["required when sasl_mechanism is set", "DFE_ARCHIVER_KAFKA_SASL_PASSWORD"],
  },
  {
    name: "a client certificate without its key",
    yaml: "kafka: { tls: { enabled: true, cert_path: /c.pem } }",
    key: "kafka.tls.key_path",
    says: ["required when cert_path is set"],
  },
  {
    name: "a KMS key without aws:kms",
    yaml: "archive: { s3: { sse_kms_key_id: k, server_side_encryption: AES256 } }",
    key: "archive.s3.server_side_encryption",
    says: ["must be aws:kms when sse_kms_key_id is set", 'got "AES256"'],
  },
  {
    name: "an endpoint that is not an http URL",
    yaml: "archive: { minio: { endpoint: 'minio:9000' } }",
    key: "archive.minio.endpoint",
    says: ["http:// or https:// URL"],
  },
  {
    name: "no expression fields",
    yaml: "routing: { expression_fields: [] }",
    key: "routing.expression_fields",
    says: ["at least one field", "routing.mode topic"],
  },
  {
    name: "an empty expression field segment",
    yaml: "routing: { expression_fields: [tags..category] }",
    key: "routing.expression_fields[0]",
    says: ["dot notation"],
  },
  {
    name: "a metrics address out of range",
    env: { METRICS_ADDR: "0.0.0.0:99999" },
    key: "metrics.addr",
    says: ["port from 1 to 65535", "METRICS_ADDR"],
  },
  {
    name: "unknown log level",
    env: { LOG_LEVEL: "verbose" },
    key: "logger.level",
    says: ["trace, debug, info, warn, error, fatal", "LOG_LEVEL"],
  },
  {
    name: "a misspelt key",
    yaml: "kafka: { groupid: x }",
    key: "kafka.groupid",
    says: ["not a known key", "did you mean kafka.group_id?"],
  },
  {
    name: "a key in the wrong section",
    yaml: "destination: s3://b/p",
    key: "destination",
    says: ["did you mean archive.destination?"],
  },
  {
    name: "a made-up section",
    yaml: "compresion: { codec: zstd }",
    key: "compresion",
    says: ["did you mean compression?"],
  },
  {
    name: "max_depth, which is fixed",
    yaml: "routing: { max_depth: 128 }",
    key: "routing.max_depth",
    says: ["not a known key"],
  },
];

describe("refusals", () => {
  for (const c of cases)
    it(`refuses ${c.name}, naming the key and the fix`, () => {
      const fault = onlyFault(c.yaml ?? "", c.env);
      assert.equal(fault.key, c.key, fault.message);
      for (const text of c.says) assert.ok(fault.message.includes(text), `"${text}" missing from: ${fault.message}`);
    });

  it("names the file a bad value came from", () => {
    const fault = onlyFault("transport: http");
    assert.match(fault.message, /\(from test\.yaml\)$/);
  });

  it("never echoes a secret's value", () => {
    const fault = onlyFault("kafka: { sasl_password: 12345678 }");
    assert.equal(fault.key, "kafka.sasl_password");
    assert.ok(!fault.message.includes("12345678"), fault.message);
    assert.match(fault.message, /got <redacted>/);
    const key = onlyFault('archive: { gcs: { service_account_key: "not json hunter2" } }');
    assert.ok(!key.message.includes("hunter2"), key.message);
    const creds = onlyFault("archive: { destination: 's3://AKIA:hunter2@bucket/p' }");
    assert.match(creds.message, /must not carry credentials; set them under archive\.s3/);
  });

  it("collects every fault into one ConfigError", () => {
    const err = refusal(() =>
      parseConfigText(
        [
          "transport: grpc",
          "kafka: { batch_size: 1.5, groupid: x }",
          "archive: { destination: 'ftp://x', path_template: '{nope}', multipart_chunk_size: 1 }",
          "compression: { codec: brotli }",
          "routing: { mode: regex }",
          "buffer: { staged_bytes_cap: 0 }",
          "self_regulation: { pause_above: 0.5, resume_below: 0.9 }",
        ].join("\n"),
        { env: { DFE_ARCHIVER_FLUSH_BYTES: "lots" }, sourceName: "c.yaml" },
      ),
    );
    assert.ok(err instanceof ConfigFaultsError);
    assert.ok(err instanceof ConfigError);
    assert.equal(err.code, "config_invalid");
    assert.equal(err.kind, "permanent");
    const keys = err.faults.map((f) => f.key).sort();
    assert.deepEqual(keys, [
      "archive.destination",
      "archive.multipart_chunk_size",
      "archive.path_template",
      "buffer.flush_bytes",
      "buffer.staged_bytes_cap",
      "compression.codec",
      "grpc.listen",
      "kafka.batch_size",
      "kafka.groupid",
      "routing.mode",
      "self_regulation.resume_below",
    ]);
    assert.match(err.message, /^config: 11 faults refuse the boot:\n {2}- /);
    for (const f of err.faults) assert.ok(err.message.includes(`  - ${f.key}: ${f.message}`));
  });

  it("keeps a single fault's ConfigError keyed by its key", () => {
    const err = refusal(() => parseConfigText("transport: http", {}));
    assert.equal(err.key, "transport");
    assert.match(err.message, /^transport: must be one of: kafka, grpc; got "http"/);
  });

  it("accepts the edges of each range", () => {
    for (const yaml of [
      "compression: { codec: zstd, level: 1 }",
      "compression: { codec: zstd, level: 22 }",
      "compression: { codec: gzip, level: 9 }",
      "compression: { codec: lz4, level: 12 }",
      "compression: { codec: snappy }",
      "archive: { multipart_chunk_size: 5242880 }",
      "buffer: { staged_bytes_cap: 1, min_free_spool_bytes: 0, quarantine_bytes_cap: 0 }",
      "self_regulation: { pause_above: 1, resume_below: 0 }",
      "transport: grpc\ngrpc: { listen: '[::]:50051' }\nkafka: { brokers: [] }",
      "archive: { destination: 'file:///var/data/archive' }",
      "archive: { destination: 'az://container/prefix' }",
      "kafka: { sasl_mechanism: SCRAM-SHA-512, sasl_username: u, sasl_password: p }",
    ])
      assert.doesNotThrow(() => parseConfigText(yaml, {}), yaml);
  });
});
