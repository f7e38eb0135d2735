// The MinIO destination beside the local one, on the pipeline bench's workload (about 700-byte records, 100 orgs x 10
// event types) in the same run. Each run is timed until the store confirmed every record (messages_archived_total),
// so both include making the files durable: fsync for the local destination; staging, then a whole-file multipart
// upload to the testbed's MinIO for the object one (the time until every record was received is shown too). Files
// roll every 10 s in both, so uploads run beside intake rather than all at shutdown. Upload memory: each run's peak RSS and their difference, the most staged bytes and pending
// uploads seen, beside the bound the design gives (writer_parallelism x 4 parts x multipart_chunk_size).
// Usage: node bench/object.bench.ts [records] [roll_interval_secs]   (default 2,000,000 and 10)
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CreateBucketCommand, DeleteBucketCommand } from "@aws-sdk/client-s3";
import { emptyBucket, minioArchive, s3Client, uniqueName } from "../e2e/support/testbed.ts";
import { PARTS_IN_FLIGHT } from "../runtime/src/store/object/staged.ts";
import {
  createTopic,
  deleteTopics,
  MB,
  PARTITIONS,
  produceFile,
  runArchiver,
  writeData,
  type RunResult,
} from "./support.ts";

const N = Number(process.argv[2] ?? 2_000_000);
const ROLL_SECS = Number(process.argv[3] ?? 10);
const WRITER_PARALLELISM = 2;
const CHUNK = 8 * 1024 * 1024;
const work = mkdtempSync(join(tmpdir(), "dfe-bench-object-"));
const MiB = 1024 * 1024;

async function main(): Promise<void> {
  console.log(
    `workload: ${N} records, 100 orgs x 10 event types, ${PARTITIONS} partitions, zstd -3, roll every ${ROLL_SECS} s; ` +
      `timed until every record is confirmed by its store`,
  );
  const data = join(work, "data.jsonl");
  const bytes = await writeData(data, N, 100, 10);
  const topic = await createTopic();
  produceFile(topic, data, ["-X", "linger.ms=50"]);
  console.log(`produced ${(bytes / MB).toFixed(0)} MB (${(bytes / N).toFixed(0)} bytes/record avg)`);

  // The last records of each destination wait in their hot buffer for flush_age_secs, then in their file for the roll:
  // both short, so the time measures the work rather than those waits.
  const buffer = { flush_age_secs: 1, writer_parallelism: WRITER_PARALLELISM };
  const s3 = s3Client();
  const bucket = uniqueName("bench");
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  let local: RunResult;
  let minio: RunResult;
  try {
    local = await runArchiver(work, topic, N, {
      until: "archived",
      buffer,
      archive: () => ({ roll_interval_secs: ROLL_SECS }),
    });
    minio = await runArchiver(work, topic, N, {
      until: "archived",
      buffer,
      archive: () => ({
        ...minioArchive(bucket, "bench"),
        roll_interval_secs: ROLL_SECS,
        multipart_chunk_size: CHUNK,
      }),
    });
  } finally {
    await emptyBucket(s3, bucket);
    await s3.send(new DeleteBucketCommand({ Bucket: bucket }));
    s3.destroy();
  }

  const rate = (s: number) => (N / s / 1e3).toFixed(0);
  const mbs = (s: number) => (bytes / MB / s).toFixed(1);
  const row = (what: string, r: RunResult) =>
    `| ${what} | ${r.receivedSeconds.toFixed(2)} | ${rate(r.receivedSeconds)} | ${r.seconds.toFixed(2)} | ` +
    `${rate(r.seconds)} | ${mbs(r.seconds)} | ${(r.cpu / (bytes / 1e9)).toFixed(1)} | ` +
    `${(r.peakRss / MiB).toFixed(0)} | ${(r.maxStagedBytes / MiB).toFixed(1)} | ${r.maxUploadsPending} |`;
  console.log(
    "\n| destination | received, s | k records/s received | archived, s | k records/s archived | MB/s archived | " +
      "CPU s/GB | peak RSS MiB | max staged MiB | max uploads pending |",
  );
  console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
  console.log(row("file:// (local)", local));
  console.log(row("minio:// (testbed MinIO)", minio));
  const bound = WRITER_PARALLELISM * PARTS_IN_FLIGHT * CHUNK;
  console.log(
    `\nMinIO throughput as a ratio to local: ${(local.seconds / minio.seconds).toFixed(2)} until archived, ` +
      `${(local.receivedSeconds / minio.receivedSeconds).toFixed(2)} until received` +
      `\nupload memory: peak RSS ${((minio.peakRss - local.peakRss) / MiB).toFixed(0)} MiB above the local run's; ` +
      `the design's bound for part buffers is ${WRITER_PARALLELISM} uploads x ${PARTS_IN_FLIGHT} parts x ` +
      `${CHUNK / MiB} MiB = ${bound / MiB} MiB`,
  );
  await deleteTopics();
  rmSync(work, { recursive: true, force: true });
}

await main();
