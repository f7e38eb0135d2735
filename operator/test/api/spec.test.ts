import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CONFIG_LEAVES, SECRET_PATHS } from "../../../runtime/src/config/schema.ts";
import { validateConfig } from "../../../runtime/src/config/validate.ts";
import { camelKey } from "../../src/api/keys.ts";
import {
  DEFAULT_SPOOL_SIZE,
  OPERATOR_OWNED_KEYS,
  SECRET_ENV,
  SECRET_KEYS,
  operatorSpecShape,
  referencedSecretNames,
  runtimeSpecShape,
  validateSpec,
  type ArchivePipelineSpec,
  type ResolvedSpec,
} from "../../src/api/spec.ts";
import { specToRuntimeConfig } from "../../src/render/config.ts";
import { camelize } from "./helpers.ts";

function valid(spec: unknown): ResolvedSpec {
  const v = validateSpec(spec);
  assert.ok("spec" in v, `refused: ${JSON.stringify("faults" in v ? v.faults : undefined)}`);
  return v.spec;
}

function faultKeys(spec: unknown): string[] {
  const v = validateSpec(spec);
  return "faults" in v ? v.faults.map((f) => f.key).sort() : [];
}

const ref = (name: string, key: string) => ({ secretKeyRef: { name, key } });

describe("secrets", () => {
  it("SECRET_KEYS is the runtime's SECRET_PATHS", () => {
    assert.deepEqual([...SECRET_KEYS].sort(), [...SECRET_PATHS].sort());
  });

  it("reach the pods under the names the seed gives", () => {
    assert.equal(SECRET_ENV["archive.s3.access_key_id"], "DFE_ARCHIVER_S3_ACCESS_KEY_ID");
    assert.equal(SECRET_ENV["archive.s3.secret_access_key"], "DFE_ARCHIVER_S3_SECRET_ACCESS_KEY");
    assert.equal(SECRET_ENV["kafka.sasl_password"], "DFE_ARCHIVER_KAFKA_SASL_PASSWORD");
    assert.equal(SECRET_ENV["archive.azure.account_key"], "AZURE_STORAGE_KEY");
    // The rest under the runtime's nested names, which its env layer reads.
    assert.equal(SECRET_ENV["archive.minio.secret_key"], "DFE_ARCHIVER_ARCHIVE__MINIO__SECRET_KEY");
  });

  it("are Secret references in a spec, and a plain value is refused", () => {
    valid({ kafka: { saslMechanism: "PLAIN", saslUsername: "u", saslPassword: ref("kafka", "password") } });
    assert.deepEqual(faultKeys({ kafka: { saslMechanism: "PLAIN", saslUsername: "u", saslPassword: "hunter2" } }), [
      "kafka.saslPassword",
    ]);
    assert.deepEqual(faultKeys({ archive: { s3: { accessKeyId: { secretKeyRef: { name: "aws" } } } } }), [
      "archive.s3.accessKeyId.secretKeyRef.key",
    ]);
  });

  it("count as present for the runtime's checks, and as missing when unreferenced", () => {
    assert.deepEqual(faultKeys({ kafka: { saslMechanism: "PLAIN", saslUsername: "u" } }), ["kafka.saslPassword"]);
    // The runtime checks an inline GCS key is JSON; a referenced one is in a Secret the operator does not read.
    valid({ archive: { destination: "gs://b/p", gcs: { serviceAccountKey: ref("gcs", "key.json") } } });
  });

  it("never reach the runtime config", () => {
    const spec = {
      kafka: { saslMechanism: "PLAIN", saslUsername: "u", saslPassword: ref("k", "p") },
      archive: {
        s3: { accessKeyId: ref("aws", "id"), secretAccessKey: ref("aws", "secret"), sessionToken: ref("aws", "t") },
        minio: { accessKey: ref("m", "a"), secretKey: ref("m", "s") },
        gcs: { serviceAccountKey: ref("g", "k") },
        azure: { accountKey: ref("az", "k"), sasToken: ref("az", "s") },
      },
    } satisfies ArchivePipelineSpec;
    const config = specToRuntimeConfig(spec);
    for (const path of SECRET_PATHS) {
      let node: unknown = config;
      for (const seg of path.split(".")) node = (node as Record<string, unknown> | undefined)?.[seg];
      assert.equal(node, undefined, path);
    }
    assert.deepEqual(referencedSecretNames(spec), ["aws", "az", "g", "k", "m"]);
  });
});

describe("the runtime part of a spec", () => {
  it("holds every runtime key at its camelCase path, and no CR field shares a name with one", () => {
    for (const leaf of CONFIG_LEAVES) {
      if ((OPERATOR_OWNED_KEYS as readonly string[]).includes(leaf.key)) continue;
      assert.ok(camelKey(leaf.path[0]!) in runtimeSpecShape, leaf.key);
    }
    for (const key of Object.keys(operatorSpecShape)) assert.ok(!(key in runtimeSpecShape), key);
  });

  it("maps to runtime config and back for every key", () => {
    // Every non-secret key set, to a value naming it: the mapping must carry each to its own place.
    const config: Record<string, unknown> = {};
    for (const leaf of CONFIG_LEAVES) {
      if ((SECRET_PATHS as readonly string[]).includes(leaf.key)) continue;
      if ((OPERATOR_OWNED_KEYS as readonly string[]).includes(leaf.key)) continue;
      let node = config;
      for (const seg of leaf.path.slice(0, -1)) node = (node[seg] ??= {}) as Record<string, unknown>;
      node[leaf.path.at(-1)!] = `value of ${leaf.key}`;
    }
    assert.deepEqual(specToRuntimeConfig(camelize(config) as ArchivePipelineSpec), config);
  });

  it("writes config keys in the schema's order whatever order the spec has", () => {
    const a = specToRuntimeConfig({ archive: { maxWriters: 2, destination: "s3://b/p" }, transport: "kafka" });
    const b = specToRuntimeConfig({ transport: "kafka", archive: { destination: "s3://b/p", maxWriters: 2 } });
    assert.equal(JSON.stringify(a), JSON.stringify(b));
  });

  it("is judged as the runtime judges its config file", () => {
    const samples: Record<string, unknown>[] = [
      {},
      { transport: "grpc" },
      { transport: "grpc", grpc: { listen: "0.0.0.0:50051" } },
      { kafka: { brokers: [] } },
      { kafka: { brokers: ["no-port"] } },
      { kafka: { sasl_mechanism: "PLAIN" } },
      { kafka: { tls: { cert_path: "/c.pem" } } },
      { kafka: { topic_include: ["("] } },
      { kafka: { group_idd: "x" } },
      { archive: { destination: "foo://x" } },
      { archive: { destination: "s3://user@bucket/x" } },
      { archive: { destination: "s3:///x" } },
      { archive: { multipart_chunk_size: 1024 * 1024 } },
      { archive: { path_template: "{year}/{topic}" } },
      { archive: { path_template: "../x" } },
      { archive: { s3: { sse_kms_key_id: "k" } } },
      { compression: { codec: "snappy", level: 3 } },
      { compression: { codec: "gzip", level: 10 } },
      { self_regulation: { pause_above: 0.5, resume_below: 0.6 } },
      { transport: "grpc", grpc: { listen: "0.0.0.0:1" }, dlq: { enabled: true }, kafka: { brokers: [] } },
      { buffer: { staged_bytes_cap: 0 } },
      { routing: { expression_fields: [] } },
      { metrics: { namespace: "1x" } },
    ];
    for (const sample of samples) {
      const runtime = validateConfig(sample);
      const expected = "faults" in runtime ? runtime.faults.map((f) => camelKey(f.key)).sort() : [];
      assert.deepEqual(faultKeys(camelize(sample)), expected, JSON.stringify(sample));
    }
  });

  it("names fields in spec spelling in its refusals", () => {
    const v = validateSpec({ kafka: { grupId: "x" }, archive: { multipartChunkSize: 1 } });
    assert.ok("faults" in v);
    assert.deepEqual(
      v.faults.map((f) => f.key),
      ["kafka.grupId", "archive.multipartChunkSize"],
    );
    assert.match(v.faults[0]!.message, /did you mean kafka\.groupId\?/);
  });

  it("leaves the keys the operator sets to the operator", () => {
    assert.deepEqual(faultKeys({ metrics: { addr: "0.0.0.0:8080" } }), ["metrics.addr"]);
    assert.equal(
      specToRuntimeConfig({ metrics: { addr: "0.0.0.0:8080" } } as ArchivePipelineSpec)["metrics"],
      undefined,
    );
  });
});

describe("the operator's fields", () => {
  it("take the documented defaults", () => {
    const s = valid({});
    assert.equal(s.replicas, 1);
    assert.equal(s.spool.sizeLimit, DEFAULT_SPOOL_SIZE);
    assert.equal(s.resources, undefined);
    assert.deepEqual(s.keda, {
      enabled: true,
      minReplicaCount: 1,
      maxReplicaCount: 10,
      cpu: { target: 70 },
      pressure: { enabled: false, target: 70 },
    });
    assert.equal(s.buffer.spoolDir, "/var/spool/dfe/archiver");
  });

  it("refuse what cannot be deployed", () => {
    assert.deepEqual(faultKeys({ archive: { destination: "file:///var/data/archive" } }), ["archiveVolume"]);
    valid({ archive: { destination: "file:///var/data/archive" }, archiveVolume: { claimName: "archive" } });
    assert.deepEqual(faultKeys({ keda: { minReplicaCount: 5, maxReplicaCount: 2 } }), ["keda.minReplicaCount"]);
    assert.deepEqual(
      faultKeys({ keda: { pressure: { enabled: true }, triggers: [{ type: "cpu", metadata: { value: "50" } }] } }),
      ["keda.pressure.enabled"],
    );
    assert.deepEqual(faultKeys({ spool: { sizeLimit: "10 GB" } }), ["spool.sizeLimit"]);
    assert.deepEqual(faultKeys({ resources: { requests: { cpu: "lots" } } }), ["resources.requests.cpu"]);
    assert.deepEqual(faultKeys({ keda: { pressure: { shimAddress: "http://shim:8080" } } }), [
      "keda.pressure.shimAddress",
    ]);
    assert.deepEqual(faultKeys({ replicaz: 2 }), ["replicaz"]);
  });
});
