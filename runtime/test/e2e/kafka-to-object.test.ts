// Kafka -> staged files -> whole-file uploads to the testbed's real MinIO, fake-gcs-server and Azurite. Offsets are
// committed only once the store confirmed the object holding the records.
import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { ListObjectsV2Command, GetObjectCommand, HeadObjectCommand } from "@aws-sdk/client-s3";
import {
  azureContainer,
  blobService,
  gcsBucket,
  gcsStorage,
  kafkaTopic,
  minioArchive,
  minioBucket,
  need,
  s3Client,
  uniqueName,
} from "../../../e2e/support/testbed.ts";
import {
  decompressWithCli,
  produce,
  startArchiver,
  tempDir,
  waitCommittedToEnd,
} from "../../../e2e/support/archiver.ts";

interface StoredObject {
  key: string;
  body: Buffer;
  records: number;
}

interface Backend {
  name: string;
  prepare(
    t: Parameters<typeof minioBucket>[0],
  ): Promise<{ archive: Record<string, unknown>; list(): Promise<StoredObject[]> }>;
}

const backends: Backend[] = [
  {
    name: "minio",
    async prepare(t) {
      const bucket = await minioBucket(t);
      const s3 = s3Client();
      t.after(() => s3.destroy());
      return {
        archive: minioArchive(bucket, "archive"),
        async list() {
          const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket }));
          return Promise.all(
            (page.Contents ?? []).map(async (o) => {
              const Key = o.Key ?? "";
              const head = await s3.send(new HeadObjectCommand({ Bucket: bucket, Key }));
              const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key }));
              const body = Buffer.from((await got.Body?.transformToByteArray()) ?? []);
              return { key: Key, body, records: Number(head.Metadata?.["records"]) };
            }),
          );
        },
      };
    },
  },
  {
    name: "gcs",
    async prepare(t) {
      const bucket = await gcsBucket(t);
      return {
        archive: {
          destination: `gs://${bucket}/archive`,
          gcs: { endpoint: need("TESTBED_GCS_ENDPOINT"), project_id: "testbed" },
        },
        async list() {
          const [files] = await gcsStorage().bucket(bucket).getFiles();
          return Promise.all(
            files.map(async (f) => {
              const [body] = await f.download();
              return { key: f.name, body, records: Number(f.metadata.metadata?.["records"]) };
            }),
          );
        },
      };
    },
  },
  {
    name: "azure",
    async prepare(t) {
      const name = await azureContainer(t);
      const container = blobService().getContainerClient(name);
      return {
        archive: {
          destination: `az://${name}/archive`,
          azure: {
            account_name: need("TESTBED_AZURITE_ACCOUNT"),
            account_key: need("TESTBED_AZURITE_KEY"),
            endpoint: need("TESTBED_AZURITE_BLOB_ENDPOINT"),
          },
        },
        async list() {
          const out: StoredObject[] = [];
          for await (const b of container.listBlobsFlat({ includeMetadata: true })) {
            const body = await container.getBlockBlobClient(b.name).downloadToBuffer();
            out.push({ key: b.name, body, records: Number(b.metadata?.["records"]) });
          }
          return out;
        },
      };
    },
  },
];

for (const backend of backends) {
  test(`${backend.name}: files land under the right keys, decode with zstd, and offsets commit after the upload`, async (t) => {
    const N = 20_000;
    const dir = tempDir(t);
    const topic = await kafkaTopic(t, { partitions: 2 });
    const groupId = uniqueName("g");
    const store = await backend.prepare(t);
    await produce(topic, N, (i) => ({
      value: JSON.stringify({ id: i, _org_id: `org-${i % 5}`, pad: "x".repeat(100) }),
    }));
    const a = await startArchiver(t, {
      kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: groupId, topics: [topic] },
      archive: { ...store.archive, roll_interval_secs: 3, multipart_chunk_size: 5 * 1024 * 1024 },
      buffer: { spool_dir: join(dir, "spool"), flush_age_secs: 1 },
      routing: { mode: "expression", expression_fields: ["_org_id"] },
      dlq: { enabled: false },
      logger: { level: "warn" },
    });
    await waitCommittedToEnd(
      groupId,
      topic,
      90_000,
      () => `offsets not committed to the end; output:\n${a.output().slice(-4000)}`,
    );
    // Committed means uploaded: every record is already in the store.
    const objects = await store.list();
    assert.equal(
      objects.reduce((n, o) => n + o.records, 0),
      N,
      "the records metadata adds up",
    );
    const ids = new Set<number>();
    for (const o of objects) {
      assert.match(
        o.key,
        new RegExp(`^archive/${topic}/org-[0-4]/\\d{4}/\\d{2}/\\d{2}/\\d{2}-\\d{6}-[0-9a-z_]+\\.jsonl\\.zst$`),
      );
      const file = join(dir, `obj-${ids.size}.zst`);
      writeFileSync(file, o.body);
      const lines = decompressWithCli(file).toString().trimEnd().split("\n");
      assert.equal(lines.length, o.records, `${o.key}: lines against its records metadata`);
      for (const l of lines) ids.add((JSON.parse(l) as { id: number }).id);
    }
    assert.equal(ids.size, N);
    assert.equal(await a.metric("messages_archived_total"), N);
    assert.equal(await a.metric("uploads_pending"), 0);
    assert.equal(await a.stop(), 0);
  });
}
