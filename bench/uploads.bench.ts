// Small-object uploads: 2,000 files of 4 KB (random bytes, as incompressible as a compressed archive), 16 uploads at
// once (writer_parallelism 16), to the testbed's MinIO, fake-gcs-server and Azurite: the shape of 10,000 destinations
// rolling at once. Each round of a store measures, on fresh files and a bucket of its own:
//   - the uploads alone: the backend's upload() of files written without a sync, 16 at once, as the staging store's
//     slots run them; with the HTTP requests they sent, counted on Node's own HTTP client channels (node:http for S3
//     and Azure, undici for GCS), retries included;
//   - through the staging store, as the runtime runs it: every file staged, then all completed at once, timed until
//     the store confirmed every object. Twice: as on kafka with acknowledgements (the default), whose restart removes
//     staged files unread, so nothing is synced; and as on grpc or without acknowledgements, whose restart uploads
//     them, so complete() syncs the file, writes and syncs its manifest and their directories.
// A row with no store (an upload that returns at once) is the staging store's own cost. The machine's disk is shared,
// so its syncs are noisy: the uploads-alone column is the one that compares backends across runs. Every object of
// each store's first round is read back and compared.
// Usage: node bench/uploads.bench.ts [files] [bytes] [rounds]   (default 2,000, 4,096, 3)
import { randomBytes } from "node:crypto";
import { subscribe } from "node:diagnostics_channel";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CreateBucketCommand, DeleteBucketCommand, GetObjectCommand } from "@aws-sdk/client-s3";
import pino from "pino";
import { parseConfigText } from "../runtime/src/config/load.ts";
import { createMetrics } from "../runtime/src/observe/metrics.ts";
import { openObjectBackend } from "../runtime/src/store/object/open.ts";
import type { ObjectBackend } from "../runtime/src/store/object/types.ts";
import { createStagingStore } from "../runtime/src/store/staging.ts";
import {
  blobService,
  emptyBucket,
  gcsStorage,
  minioArchive,
  need,
  s3Client,
  uniqueName,
} from "../e2e/support/testbed.ts";
import { median } from "./support.ts";

const FILES = Number(process.argv[2] ?? 2000);
const BYTES = Number(process.argv[3] ?? 4096);
const ROUNDS = Number(process.argv[4] ?? 3);
const WRITER_PARALLELISM = 16;
const work = mkdtempSync(join(tmpdir(), "dfe-bench-uploads-"));
const log = pino({ level: "warn" });

let requests = 0;
const count = () => void requests++;
subscribe("http.client.request.start", count);
subscribe("undici:request:create", count);

interface Store {
  readonly name: string;
  /** The archive section of a destination in a bucket (container) of its own; none for the staging-only row. */
  readonly archive?: (bucket: string) => Record<string, unknown>;
  readonly create: (bucket: string) => Promise<void>;
  readonly read?: (bucket: string, key: string) => Promise<Buffer>;
  readonly remove: (bucket: string) => Promise<void>;
}

/** An upload that returns at once: the staging row's backend. */
const NO_STORE: ObjectBackend = { scheme: "s3", bucket: "none", key: (rel) => rel, upload: async () => {} };

const s3 = s3Client();
const gcs = gcsStorage();
const azure = blobService();

const STORES: Store[] = [
  {
    name: "staging only (no store)",
    create: async () => {},
    remove: async () => {},
  },
  {
    name: "minio:// (testbed MinIO)",
    archive: (bucket) => minioArchive(bucket, "bench"),
    create: async (bucket) => void (await s3.send(new CreateBucketCommand({ Bucket: bucket }))),
    read: async (bucket, key) => {
      const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
      return Buffer.from(await (got.Body as { transformToByteArray(): Promise<Uint8Array> }).transformToByteArray());
    },
    remove: async (bucket) => {
      await emptyBucket(s3, bucket);
      await s3.send(new DeleteBucketCommand({ Bucket: bucket }));
    },
  },
  {
    name: "gs:// (fake-gcs-server)",
    archive: (bucket) => ({
      destination: `gs://${bucket}/bench`,
      gcs: { endpoint: need("TESTBED_GCS_ENDPOINT"), project_id: need("TESTBED_GCS_PROJECT") },
    }),
    create: async (bucket) => void (await gcs.createBucket(bucket)),
    read: async (bucket, key) => {
      const url = `${need("TESTBED_GCS_ENDPOINT")}/storage/v1/b/${bucket}/o/${encodeURIComponent(key)}?alt=media`;
      return Buffer.from(await (await fetch(url)).arrayBuffer());
    },
    remove: async (bucket) => {
      await gcs.bucket(bucket).deleteFiles({ force: true });
      await gcs.bucket(bucket).delete();
    },
  },
  {
    name: "az:// (Azurite)",
    archive: (bucket) => ({
      destination: `az://${bucket}/bench`,
      azure: { endpoint: need("TESTBED_AZURITE_BLOB_ENDPOINT"), account_key: need("TESTBED_AZURITE_KEY") },
    }),
    create: async (bucket) => void (await azure.getContainerClient(bucket).create()),
    read: (bucket, key) => azure.getContainerClient(bucket).getBlockBlobClient(key).downloadToBuffer(),
    remove: async (bucket) => void (await azure.getContainerClient(bucket).delete()),
  },
];

interface Result {
  /** The backend's uploads alone, WRITER_PARALLELISM at once, from files written without a sync. */
  uploadSeconds: number;
  /** HTTP requests the uploads alone sent. */
  requests: number;
  /** Through the staging store: from the first complete() until the store confirmed every object, unsynced. */
  stagingSeconds: number;
  /** The same, each file synced with its manifest (a recoverable staging store). */
  syncedSeconds: number;
}

const rel = (i: number) => `org-${i}/type-0/2026/12/06/18-000000-bench_${i}.jsonl.zst`;
const META = { records: 1, codec: "zstd", openedAt: Date.now(), closedAt: Date.now() };

/** The backend's uploads of `paths`, `n` at once, as the staging store's slots run them. */
async function uploadAll(backend: ObjectBackend, paths: readonly string[], n: number): Promise<void> {
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < paths.length; i = next++)
      await backend.upload({
        stagedPath: paths[i] as string,
        size: BYTES,
        key: backend.key(`alone/${rel(i)}`),
        meta: META,
      });
  };
  await Promise.all(Array.from({ length: n }, worker));
}

/**
 * FILES fresh files through a staging store in front of `backend`: each staged, then all completed at once; the
 * seconds until the store confirmed every object. `check`: every object read back and compared.
 */
async function throughStaging(
  store: Store,
  backend: ObjectBackend,
  bucket: string,
  recoverable: boolean,
  check: boolean,
): Promise<number> {
  const staging = createStagingStore({
    backend,
    spoolDir: mkdtempSync(join(work, "spool-")),
    recoverable,
    writerParallelism: WRITER_PARALLELISM,
    stagedBytesCap: 1 << 30,
    quarantineBytesCap: 1 << 30,
    metrics: createMetrics({ defaultMetrics: false }),
    log,
  });
  const bodies = Array.from({ length: FILES }, () => randomBytes(BYTES));
  const files = await Promise.all(
    bodies.map(async (body, i) => {
      const f = await staging.open(rel(i));
      await f.append(body);
      return f;
    }),
  );
  const t0 = process.hrtime.bigint();
  await Promise.all(files.map((f) => f.complete({ ...META, blockLengths: [BYTES], blockRecords: [1] })));
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  await staging.close();
  if (check && store.read !== undefined)
    for (const [i, body] of bodies.entries()) {
      const got = await store.read(bucket, backend.key(rel(i)));
      if (!got.equals(body)) throw new Error(`${store.name}: ${rel(i)} differs from the staged file`);
    }
  return seconds;
}

/** One round of a store: its uploads alone, then the same through the staging store, each of FILES fresh files. */
async function round(store: Store, check: boolean): Promise<Result> {
  const bucket = uniqueName("bench");
  await store.create(bucket);
  try {
    const backend =
      store.archive === undefined
        ? NO_STORE
        : await openObjectBackend(
            parseConfigText(JSON.stringify({ archive: store.archive(bucket) }), { env: {} }).config,
            {},
            log,
          );
    const plain = mkdtempSync(join(work, "plain-"));
    const paths = Array.from({ length: FILES }, (_, i) => join(plain, `${i}.zst`));
    for (const path of paths) writeFileSync(path, randomBytes(BYTES));
    const before = requests;
    const t0 = process.hrtime.bigint();
    await uploadAll(backend, paths, WRITER_PARALLELISM);
    const uploadSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
    const sent = requests - before;
    rmSync(plain, { recursive: true });

    const stagingSeconds = await throughStaging(store, backend, bucket, false, check);
    const syncedSeconds = await throughStaging(store, backend, bucket, true, false);
    return { uploadSeconds, requests: sent, stagingSeconds, syncedSeconds };
  } finally {
    await store.remove(bucket);
  }
}

async function main(): Promise<void> {
  console.log(
    `workload: ${FILES} files of ${BYTES} random bytes, ${WRITER_PARALLELISM} uploads at once ` +
      `(writer_parallelism), ${ROUNDS} rounds: the uploads alone, then the same through the staging store`,
  );
  const rows: { store: Store; runs: Result[] }[] = STORES.map((store) => ({ store, runs: [] }));
  // Alternating stores within each round: the machine's speed drifts over minutes.
  for (let r = 0; r < ROUNDS; r++)
    for (const row of rows) {
      const res = await round(row.store, r === 0);
      row.runs.push(res);
      console.log(
        `round ${r + 1}: ${row.store.name}: uploads alone ${res.uploadSeconds.toFixed(2)} s (${res.requests} requests), ` +
          `through staging ${res.stagingSeconds.toFixed(2)} s, synced ${res.syncedSeconds.toFixed(2)} s`,
      );
    }
  console.log(
    "\n| store | objects | uploads alone, objects/s | HTTP requests per object | through staging, objects/s | " +
      "through staging, synced with manifests, objects/s |",
  );
  console.log("| --- | --- | --- | --- | --- | --- |");
  for (const { store, runs } of rows) {
    const rate = (f: (r: Result) => number) => (FILES / median(runs.map(f))).toFixed(0);
    const perObject = median(runs.map((x) => x.requests / FILES));
    console.log(
      `| ${store.name} | ${FILES} | ${store.archive === undefined ? "-" : rate((x) => x.uploadSeconds)} | ${perObject.toFixed(2)} | ${rate((x) => x.stagingSeconds)} | ${rate((x) => x.syncedSeconds)} |`,
    );
  }
  console.log("medians of the rounds; every object of each store's first round read back equal to its staged file");
  s3.destroy();
  rmSync(work, { recursive: true, force: true });
}

await main();
