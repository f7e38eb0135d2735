import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { z } from "zod";
import { CONFIG_LEAVES, SECTION_KEYS, configShape, objectOf } from "../../../runtime/src/config/schema.ts";
import { camelKey, camelText, camelToSnake, snakeToCamel } from "../../src/api/keys.ts";

const names = new Set([...SECTION_KEYS, ...CONFIG_LEAVES.map((l) => l.key)].flatMap((k) => k.split(".")));

describe("camelCase <-> snake_case", () => {
  it("round-trips every key name of the runtime schema", () => {
    assert.ok(names.size > 50, `only ${names.size} key names found`);
    for (const name of names) {
      const camel = snakeToCamel(name);
      assert.doesNotMatch(camel, /_/, name);
      assert.equal(camelToSnake(camel), name, `${name} -> ${camel} does not map back`);
    }
  });

  it("never maps two keys of one section to the same field", () => {
    const walk = (shape: Record<string, z.ZodType>, at: string) => {
      const seen = new Map<string, string>();
      for (const [name, field] of Object.entries(shape)) {
        const camel = snakeToCamel(name);
        assert.equal(seen.get(camel), undefined, `${at}${name} and ${at}${seen.get(camel)} both map to ${camel}`);
        seen.set(camel, name);
        const obj = objectOf(field);
        if (obj) walk(obj.shape as Record<string, z.ZodType>, `${at}${name}.`);
      }
    };
    walk(configShape as Record<string, z.ZodType>, "");
  });

  it("spells the seed's keys as Kubernetes conventions want", () => {
    assert.equal(snakeToCamel("multipart_chunk_size"), "multipartChunkSize");
    assert.equal(snakeToCamel("self_regulation"), "selfRegulation");
    assert.equal(snakeToCamel("sse_kms_key_id"), "sseKmsKeyId");
    assert.equal(snakeToCamel("s3"), "s3");
    assert.equal(camelKey("kafka.topic_include[2]"), "kafka.topicInclude[2]");
    assert.equal(camelKey("archive.s3.access_key_id"), "archive.s3.accessKeyId");
  });
});

describe("camelText", () => {
  it("respells key references and leaves other words alone", () => {
    assert.equal(
      camelText("re-read every topic_refresh_secs, four parts of archive.multipart_chunk_size."),
      "re-read every topicRefreshSecs, four parts of archive.multipartChunkSize.",
    );
    // Record fields, metric names, env vars and URLs are not keys.
    for (const text of [
      '`["_org_id"]` on kafka',
      "the scaling_pressure composite",
      "set DFE_ARCHIVER_KAFKA_SASL_PASSWORD",
      "e.g. file:///var/data/archive_dir or http://minio:9000",
    ])
      assert.equal(camelText(text), text);
  });
});
