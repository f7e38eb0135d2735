import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { parseConfigText } from "../../src/config/load.ts";
import { REDACTED, idleReason, redactConfig, resolveConfig } from "../../src/config/resolve.ts";
import { SECRET_PATHS, configSchema } from "../../src/config/schema.ts";
import { ConfigError } from "../../src/errors.ts";

const GRPC = "transport: grpc\ngrpc: { listen: '0.0.0.0:50051' }\n";
const parse = (yaml: string, env: NodeJS.ProcessEnv = {}) => parseConfigText(yaml, { env });

describe("roll interval", () => {
  it("is 300 while offsets are held or on grpc, else 3600", () => {
    assert.equal(parse("").config.archive.roll_interval_secs, 300);
    assert.equal(parse("").config.offsetsHeld, true);
    const off = parse("kafka: { acknowledgements: { enabled: false } }").config;
    assert.equal(off.offsetsHeld, false);
    assert.equal(off.archive.roll_interval_secs, 3600);
    const grpc = parse(GRPC).config;
    assert.equal(grpc.offsetsHeld, false);
    assert.equal(grpc.archive.roll_interval_secs, 300);
  });

  it("keeps a configured value whatever the transport", () => {
    assert.equal(parse("archive: { roll_interval_secs: 120 }").config.archive.roll_interval_secs, 120);
    assert.equal(
      parse("archive: { roll_interval_secs: 120 }\nkafka: { acknowledgements: { enabled: false } }").config.archive
        .roll_interval_secs,
      120,
    );
  });

  it("warns above 900 s while offsets are held, with the seed's cost figures", () => {
    assert.deepEqual(parse("archive: { roll_interval_secs: 900 }").warnings, []);
    const half = parse("archive: { roll_interval_secs: 1800 }").warnings;
    assert.equal(half.length, 1);
    assert.match(half[0] ?? "", /archive\.roll_interval_secs is 1800/);
    assert.match(half[0] ?? "", /about 32 bytes a record/);
    assert.match(half[0] ?? "", /at 10k records\/s an open file holds 576 MB \(96 MB at the default 300 s\)/);
    assert.match(parse("archive: { roll_interval_secs: 3600 }").warnings[0] ?? "", /holds 1\.15 GB/);
  });

  it("warns of the loss on grpc, and not at all when nothing is held on kafka", () => {
    const grpc = parse(`${GRPC}archive: { roll_interval_secs: 1800 }`).warnings;
    assert.equal(grpc.length, 1);
    assert.match(grpc[0] ?? "", /on grpc, where the archive copy is at-most-once: a kill loses up to 1800 s/);
    assert.deepEqual(
      parse("archive: { roll_interval_secs: 3600 }\nkafka: { acknowledgements: { enabled: false } }").warnings,
      [],
    );
  });
});

describe("resolved defaults", () => {
  it("routes by _org_id on kafka and by _source then _org_id on grpc, unless set", () => {
    assert.deepEqual(parse("").config.routing.expression_fields, ["_org_id"]);
    assert.deepEqual(parse(GRPC).config.routing.expression_fields, ["_source", "_org_id"]);
    assert.deepEqual(parse(`${GRPC}routing: { expression_fields: [a.b] }`).config.routing.expression_fields, ["a.b"]);
  });

  it("turns the DLQ on for kafka and off for grpc, on kafka.brokers unless it names its own", () => {
    const kafka = parse("kafka: { brokers: ['k:1'] }").config;
    assert.equal(kafka.dlq.enabled, true);
    assert.deepEqual(kafka.dlq.brokers, ["k:1"]);
    assert.equal(parse(GRPC).config.dlq.enabled, false);
    const own = parse("dlq: { enabled: false, brokers: ['d:1'] }").config;
    assert.equal(own.dlq.enabled, false);
    assert.deepEqual(own.dlq.brokers, ["d:1"]);
  });

  it("excludes the DLQ topic and internal topics from discovery unless topic_exclude is set", () => {
    const exclude = parse("dlq: { topic: my.dlq }").config.kafka.topic_exclude.map((p) => new RegExp(p));
    const dropped = (t: string) => exclude.some((r) => r.test(t));
    for (const t of ["my.dlq", "__consumer_offsets", "__transaction_state", "_schemas", "_confluent-metrics"])
      assert.ok(dropped(t), `${t} should be excluded`);
    for (const t of ["events", "myXdlq", "my.dlq.v2", "logs_transformed"])
      assert.ok(!dropped(t), `${t} should be kept`);
    assert.deepEqual(parse("kafka: { topic_exclude: ['^test'] }").config.kafka.topic_exclude, ["^test"]);
  });

  it("warns that include/exclude go unused when topics are listed", () => {
    const w = parse("kafka: { topics: [a], topic_include: ['^a'] }").warnings;
    assert.equal(w.length, 1);
    assert.match(w[0] ?? "", /apply to discovery only/);
    assert.deepEqual(parse("kafka: { topics: [a] }").warnings, []);
  });

  it("takes each codec's default level, and none for snappy", () => {
    for (const [codec, level] of [
      ["zstd", 3],
      ["gzip", 6],
      ["lz4", 1],
      ["snappy", undefined],
    ] as const)
      assert.equal(parse(`compression: { codec: ${codec} }`).config.compression.level, level, codec);
    assert.equal(parse("compression: { codec: zstd, level: 19 }").config.compression.level, 19);
  });

  it("normalises the SASL mechanism to lower case", () => {
    const c = parse("kafka: { sasl_mechanism: SCRAM-SHA-512, sasl_username: u, sasl_password: p }").config;
    assert.equal(c.kafka.sasl_mechanism, "scram-sha-512");
  });

  it("warns when self-regulation is off", () => {
    const w = parse("self_regulation: { enabled: false }").warnings;
    assert.equal(w.length, 1);
    assert.match(w[0] ?? "", /self_regulation\.enabled is false: nothing pauses intake/);
  });

  it("refuses bad memory variables when resolving directly", () => {
    const config = configSchema.parse({});
    assert.throws(
      () => resolveConfig(config, { DFE_ARCHIVER_MEMORY_LIMIT_BYTES: "-1" }),
      (err: unknown) => err instanceof ConfigError && /memory\.limit_bytes: must be at least 0/.test(err.message),
    );
    assert.equal(resolveConfig(config, { DFE_ARCHIVER_MEMORY_LIMIT_BYTES: "42" }).config.memory.limit_bytes, 42);
  });
});

describe("idleReason", () => {
  it("names archive.destination and DFE_ARCHIVER_DESTINATION when there is no destination", () => {
    const reason = idleReason(parse("").config);
    assert.ok(reason);
    assert.match(reason, /archive\.destination/);
    assert.match(reason, /DFE_ARCHIVER_DESTINATION/);
  });

  it("is undefined once a destination is set, from the file or the env", () => {
    assert.equal(idleReason(parse("archive: { destination: 'file:///data' }").config), undefined);
    assert.equal(idleReason(parse("", { DFE_ARCHIVER_DESTINATION: "s3://b/p" }).config), undefined);
  });
});

describe("redactConfig", () => {
  it("hides every secret, from the file and the env, and changes nothing else", () => {
    const values = new Map(SECRET_PATHS.map((p, i) => [p, `SECRET-${i}-value`]));
    const file: Record<string, unknown> = {};
    for (const [path, value] of values) {
      const segs = path.split(".");
      let node = file;
      for (const s of segs.slice(0, -1)) node = (node[s] ??= {}) as Record<string, unknown>;
      node[segs.at(-1) as string] = path.endsWith("service_account_key") ? JSON.stringify({ key: value }) : value;
    }
    (file.kafka as Record<string, unknown>).sasl_mechanism = "plain";
    (file.kafka as Record<string, unknown>).sasl_username = "visible-user";
    const envSecret = "SECRET-from-env";
    const { config } = parseConfigText(JSON.stringify(file), {
      env: { DFE_ARCHIVER_S3_SECRET_ACCESS_KEY: envSecret },
    });
    const before = JSON.stringify(config);
    const redacted = redactConfig(config);
    const text = JSON.stringify(redacted);
    for (const value of [...values.values(), envSecret]) assert.ok(!text.includes(value), `${value} leaked`);
    for (const path of SECRET_PATHS) {
      const got = path.split(".").reduce<unknown>((n, s) => (n as Record<string, unknown>)[s], redacted);
      assert.equal(got, REDACTED, path);
    }
    assert.ok(text.includes("visible-user"));
    assert.equal(JSON.stringify(config), before, "the config itself is untouched");
  });

  it("leaves unset secrets unset", () => {
    const redacted = redactConfig(parse("").config) as { kafka: Record<string, unknown> };
    assert.equal(redacted.kafka.sasl_password, undefined);
  });
});
