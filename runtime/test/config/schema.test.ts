import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { z } from "zod";
import { parseConfigText } from "../../src/config/load.ts";
import {
  CONFIG_LEAVES,
  MEMORY_LEAVES,
  SECRET_PATHS,
  configSchema,
  leavesOf,
  memorySchema,
  objectOf,
} from "../../src/config/schema.ts";

describe("config defaults", () => {
  it("match the seed with nothing configured", () => {
    const { config: c, warnings } = parseConfigText("", { env: {} });
    assert.deepEqual(warnings, []);
    assert.equal(c.transport, "kafka");
    assert.deepEqual(c.kafka.brokers, ["localhost:9092"]);
    assert.equal(c.kafka.group_id, "dfe-archiver");
    assert.equal(c.kafka.client_id, "dfe-archiver");
    assert.deepEqual(c.kafka.topics, []);
    assert.equal(c.kafka.topic_include, undefined);
    assert.equal(c.kafka.topic_refresh_secs, 60);
    assert.equal(c.kafka.batch_size, 10000);
    assert.equal(c.kafka.session_timeout_ms, 30000);
    assert.equal(c.kafka.acknowledgements.enabled, true);
    assert.equal(c.kafka.tls.enabled, false);
    assert.equal(c.kafka.tls.reject_unauthorized, true);
    assert.equal(c.kafka.sasl_mechanism, undefined);
    assert.equal(c.grpc.listen, undefined);
    assert.equal(c.grpc.max_message_bytes, 64 * 1024 * 1024);
    assert.equal(c.grpc.queue_records, 100000);
    assert.equal(c.archive.destination, undefined);
    assert.equal(c.archive.path_template, "{year}/{month}/{day}/{hour}");
    assert.equal(c.archive.roll_size_bytes, 1073741824);
    assert.equal(c.archive.roll_interval_secs, 300);
    assert.equal(c.archive.max_writers, 1024);
    assert.equal(c.archive.multipart_chunk_size, 8388608);
    assert.equal(c.archive.minio.use_ssl, false);
    assert.equal(c.archive.minio.region, "us-east-1");
    assert.equal(c.buffer.flush_bytes, 1048576);
    assert.equal(c.buffer.flush_records, 100000);
    assert.equal(c.buffer.flush_age_secs, 60);
    assert.equal(c.buffer.writer_parallelism, 2);
    assert.equal(c.buffer.spool_dir, "/var/spool/dfe/archiver");
    assert.equal(c.buffer.staged_bytes_cap, undefined);
    assert.equal(c.compression.codec, "zstd");
    assert.equal(c.compression.level, 3);
    assert.equal(c.routing.mode, "expression");
    assert.deepEqual(c.routing.expression_fields, ["_org_id"]);
    assert.equal(c.routing.default_segment, "default");
    assert.equal(c.dlq.enabled, true);
    assert.equal(c.dlq.topic, "dfe-archiver-dlq");
    assert.deepEqual(c.dlq.brokers, ["localhost:9092"]);
    assert.equal(c.metrics.namespace, undefined);
    assert.equal(c.metrics.addr, "0.0.0.0:9090");
    assert.equal(c.logger.level, "info");
    assert.equal(c.logger.format, "json");
    assert.deepEqual(c.self_regulation, { enabled: true, pause_above: 0.8, resume_below: 0.6 });
    assert.deepEqual(c.scaling, { enabled: true, memory_gate_threshold: 0.8 });
    assert.deepEqual(c.version_check, { enabled: true });
    assert.deepEqual(c.memory, { limit_bytes: 0, pressure_threshold: 0.8, cgroup_headroom: 0.85 });
    assert.equal(c.offsetsHeld, true);
  });

  it("accept the seed's full config example", () => {
    const { config: c, warnings } = parseConfigText(
      `
kafka:
  brokers:
    - kafka:9092
  group_id: dfe-archiver
  topics:
    - events
    - logs
  sasl_mechanism: SCRAM-SHA-256
  sasl_username: archiver
  # sasl_password stays out of the file: set DFE_ARCHIVER_KAFKA_SASL_PASSWORD

archive:
  destination: s3://my-bucket/archives
  path_template: "{year}/{month}/{day}/{hour}"
  roll_size_bytes: 1073741824
  roll_interval_secs: 300

buffer:
  flush_bytes: 1048576
  flush_age_secs: 60
  writer_parallelism: 2

compression:
  codec: zstd
  level: 3

routing:
  mode: expression
  expression_fields:
    - _org_id
    - event_type
`,
      { env: { DFE_ARCHIVER_KAFKA_SASL_PASSWORD: "pw" } },
    );
    assert.deepEqual(warnings, []);
    assert.deepEqual(c.kafka.brokers, ["kafka:9092"]);
    assert.deepEqual(c.kafka.topics, ["events", "logs"]);
    assert.equal(c.kafka.sasl_mechanism, "scram-sha-256", "upper case is normalised");
    assert.equal(c.kafka.sasl_password, "pw");
    assert.equal(c.archive.destination, "s3://my-bucket/archives");
    assert.deepEqual(c.routing.expression_fields, ["_org_id", "event_type"]);
  });
});

describe("config schema", () => {
  it("describes every key and section in one sentence", () => {
    const visit = (schema: z.ZodObject, prefix: string) => {
      for (const [name, field] of Object.entries(schema.shape) as [string, z.ZodType][]) {
        const key = `${prefix}${name}`;
        const description = field.meta()?.description;
        assert.ok(description && description.length > 10, `${key} has no description`);
        assert.match(description, /\.$/, `${key}'s description is not a sentence`);
        const obj = objectOf(field);
        if (obj) visit(obj, `${key}.`);
      }
    };
    visit(configSchema, "");
    visit(memorySchema, "memory.");
  });

  it("declares the seed's environment variables on the keys they set", () => {
    const declared = Object.fromEntries(
      [...CONFIG_LEAVES, ...MEMORY_LEAVES].filter((l) => l.meta.env).map((l) => [l.meta.env, l.key]),
    );
    assert.deepEqual(declared, {
      DFE_ARCHIVER_TRANSPORT: "transport",
      DFE_ARCHIVER_GRPC_LISTEN: "grpc.listen",
      DFE_ARCHIVER_KAFKA_BROKERS: "kafka.brokers",
      DFE_ARCHIVER_KAFKA_GROUP_ID: "kafka.group_id",
      DFE_ARCHIVER_KAFKA_TOPICS: "kafka.topics",
      DFE_ARCHIVER_KAFKA_TOPIC_INCLUDE: "kafka.topic_include",
      DFE_ARCHIVER_KAFKA_TOPIC_EXCLUDE: "kafka.topic_exclude",
      DFE_ARCHIVER_KAFKA_TOPIC_REFRESH_SECS: "kafka.topic_refresh_secs",
      DFE_ARCHIVER_KAFKA_SASL_MECHANISM: "kafka.sasl_mechanism",
      DFE_ARCHIVER_KAFKA_SASL_USER: "kafka.sasl_username",
      DFE_ARCHIVER_KAFKA_SASL_PASSWORD: "kafka.sasl_password",
      DFE_ARCHIVER_DESTINATION: "archive.destination",
      DFE_ARCHIVER_COMPRESSION_CODEC: "compression.codec",
      DFE_ARCHIVER_MULTIPART_CHUNK_SIZE: "archive.multipart_chunk_size",
      DFE_ARCHIVER_S3_BUCKET: "archive.s3.bucket",
      DFE_ARCHIVER_S3_REGION: "archive.s3.region",
      DFE_ARCHIVER_S3_ACCESS_KEY_ID: "archive.s3.access_key_id",
      DFE_ARCHIVER_S3_SECRET_ACCESS_KEY: "archive.s3.secret_access_key",
      DFE_ARCHIVER_S3_ENDPOINT: "archive.s3.endpoint",
      DFE_ARCHIVER_FLUSH_BYTES: "buffer.flush_bytes",
      DFE_ARCHIVER_FLUSH_INTERVAL_SECS: "buffer.flush_age_secs",
      DFE_ARCHIVER_SPOOL_DIR: "buffer.spool_dir",
      DFE_ARCHIVER_SCALING__MEMORY_GATE_THRESHOLD: "scaling.memory_gate_threshold",
      DFE_ARCHIVER_VERSION_CHECK__ENABLED: "version_check.enabled",
      METRICS_ADDR: "metrics.addr",
      LOG_LEVEL: "logger.level",
      DFE_ARCHIVER_MEMORY_LIMIT_BYTES: "memory.limit_bytes",
      DFE_ARCHIVER_MEMORY_PRESSURE_THRESHOLD: "memory.pressure_threshold",
      DFE_ARCHIVER_MEMORY_CGROUP_HEADROOM: "memory.cgroup_headroom",
    });
  });

  it("has no routing.max_depth or memory key in the file schema", () => {
    const keys = CONFIG_LEAVES.map((l) => l.key);
    assert.ok(!keys.includes("routing.max_depth"));
    assert.ok(!keys.some((k) => k.startsWith("memory.")));
  });

  it("derives SECRET_PATHS from metadata, covering every credential-like key", () => {
    assert.deepEqual([...SECRET_PATHS].sort(), [
      "archive.azure.account_key",
      "archive.azure.sas_token",
      "archive.gcs.service_account_key",
      "archive.minio.access_key",
      "archive.minio.secret_key",
      "archive.s3.access_key_id",
      "archive.s3.secret_access_key",
      "archive.s3.session_token",
      "kafka.sasl_password",
    ]);
    for (const l of CONFIG_LEAVES)
      if (/password|secret|token|access_key|account_key|service_account/.test(l.path.at(-1) ?? ""))
        assert.ok(SECRET_PATHS.includes(l.key), `${l.key} looks like a credential but is not marked secret`);
  });

  it("converts to JSON Schema both ways, strict, with bounds and defaults", () => {
    for (const io of ["input", "output"] as const) {
      const js = z.toJSONSchema(configSchema, { io }) as {
        additionalProperties: boolean;
        properties: Record<string, { properties: Record<string, Record<string, unknown>>; enum?: string[] }>;
      };
      assert.equal(js.additionalProperties, false);
      assert.deepEqual(js.properties.transport?.enum, ["kafka", "grpc"]);
      const archive = js.properties.archive?.properties;
      assert.equal(archive?.multipart_chunk_size?.minimum, 5242880);
      assert.equal(archive?.multipart_chunk_size?.default, 8388608);
      assert.equal(archive?.destination?.env, "DFE_ARCHIVER_DESTINATION");
      assert.ok(z.toJSONSchema(memorySchema, { io }));
    }
  });

  it("lists each leaf once, in declaration order", () => {
    const keys = leavesOf(configSchema).map((l) => l.key);
    assert.equal(new Set(keys).size, keys.length);
    assert.equal(keys[0], "transport");
    assert.ok(keys.indexOf("archive.s3.region") < keys.indexOf("archive.minio.endpoint"));
  });
});
