// The runtime beside a peer users already run, the OpenTelemetry Collector (e2e/testbed/peers/otelcol, built by
// `e2e/testbed/up peers`), on the same topic in the same run: each round runs both, in alternating order, and the
// ratio is the median of the rounds' ratios (the machines here are shared and their speed drifts; see
// pipeline.bench.ts). The collector reads with its Kafka receiver (text encoding, one log record per Kafka record),
// batches, and writes with the file exporter (zstd as one stream: the exporter.file.nativeCompression gate; without it
// each batch is its own length-prefixed frame, which no zstd tool reads).
//   1. topic only, to local files: against our topic routing.
//   2. routed by _org_id and event_type to 1,000 destinations: the transform processor parses each body and sets the
//      two as one attribute, groupbyattrs makes it the resource's (the file exporter groups by a resource attribute
//      only), and the file exporter writes one file per value; against our expression routing.
//   3. the same routing into the testbed's MinIO, a bucket of each run's own: the S3 exporter (records' bodies one a
//      line, zstd, its default partition format under the destination as prefix, a sending queue of 16 consumers
//      that blocks when full rather than drop) against our minio:// destination with writer_parallelism 16. Every
//      run's bucket is copied back and checked, after its time is taken; a record the collector reports dropped is
//      counted as dropped.
// Each row: records/s until every record was received and until every record was durable (the process exited
// cleanly, its files complete or its objects put), CPU seconds per GB produced, peak RSS, files (objects) written,
// archive bytes per record, and whether the archive holds the records as the producer sent them (every record
// counted and compared).
// Usage: node bench/peer.bench.ts [records] [rounds]   (default 1,000,000 of about 700 bytes, rounds 1,2,3)
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { stringify } from "yaml";
import { CreateBucketCommand, DeleteBucketCommand } from "@aws-sdk/client-s3";
import { emptyBucket, minioArchive, need, s3Client, uniqueName } from "../e2e/support/testbed.ts";
import { archiveFiles, downloadBucket, freePort, sumMetric } from "../e2e/support/archiver.ts";
import {
  createTopic,
  deleteTopics,
  makeRecord,
  MB,
  median,
  PARTITIONS,
  procStats,
  produceFile,
  runArchiver,
  uniformKeys,
  stopReading,
  writeData,
} from "./support.ts";

const N = Number(process.argv[2] ?? 1_000_000);
const ONLY = (process.argv[3] ?? "1,2,3").split(",").map(Number);
const ORGS = 100;
const TYPES = 10;
const PICK = uniformKeys(ORGS, TYPES);
const brokers = need("TESTBED_KAFKA_BROKERS");
const otelcol = need("TESTBED_OTELCOL");
const s3 = s3Client();
/** Uploads at once on both sides of the object round: our writer_parallelism, the collector's queue consumers. */
const UPLOADS_AT_ONCE = 16;
/**
 * The collector's batch in the object round, in records: its S3 exporter puts one object per batch and destination,
 * so about N / COLLECTOR_BATCH objects a destination. With its default batch (8,192 records, about 8 a destination)
 * 20,000 records did not finish in 300 s; with the default sending queue (1,000 requests, dropping when full) it
 * dropped batches, their offsets already committed.
 */
const COLLECTOR_BATCH = 100_000;
const work = mkdtempSync(join(tmpdir(), "dfe-bench-peer-"));

/** One run of either side: times from the spawn, measured from outside. */
interface Run {
  receivedSeconds: number;
  /** Until every record was durable: the clean exit after every record was received (or exported), files complete. */
  seconds: number;
  cpu: number;
  peakRss: number;
  /** The run's archive directory (for an object round, the bucket's objects copied there under their keys). */
  root: string;
  /** Records the collector reported failed to send or to enqueue: dropped, their offsets already committed. */
  dropped: number;
  /** The collector stopped making progress before every record was sent or dropped. */
  stalled: boolean;
  /** Records not in the archive as produced, once checked (every run of an object round; 0 until then). */
  lost: number;
}

/** To the clean exit, with the records its archive lacks. */
const exitSeconds = (r: Run): string => `${r.seconds.toFixed(2)}${r.lost > 0 ? ` (${r.lost} missing)` : ""}`;

/** Until durable, in seconds: never for a run whose archive lacks records. */
const durableSeconds = (r: Run): number => (r.lost > 0 ? Infinity : r.seconds);

/** Where a round archives: local files, or the testbed's MinIO (a bucket of each run's own). */
type Target = "local" | "minio";

/** A bucket of its own for one run. */
async function newBucket(): Promise<string> {
  const bucket = uniqueName("peer");
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  return bucket;
}

/**
 * Copies the run's bucket under `root`, every object under its key (listed page by page), then removes the bucket.
 * Outside the timed run.
 */
async function fetchBucket(bucket: string, root: string): Promise<void> {
  mkdirSync(root, { recursive: true });
  await downloadBucket(s3, bucket, root);
  await emptyBucket(s3, bucket);
  await s3.send(new DeleteBucketCommand({ Bucket: bucket }));
}

/** What an archive holds against what the producer sent. */
interface Check {
  files: number;
  /** Compressed bytes of every file. */
  bytes: number;
  /** Decompressed bytes, and of those the records' own (the rest is the archive's envelope). */
  plainBytes: number;
  bodyBytes: number;
  records: number;
  missing: number;
  duplicates: number;
  /** Records whose bytes differ from what was produced. */
  altered: number;
  /** Records in a file whose path does not name their _org_id and event_type (routed rounds). */
  misplaced: number;
}

/**
 * The lines of zstd files, decompressed end to end by one zstd process and streamed (a whole archive exceeds a
 * string's limit), counting the decompressed bytes. The zstd CLI, not node:zlib: Node 24's stream stops after the
 * first frame, and both archives hold several.
 */
async function* zstdLines(files: readonly string[], plain: { bytes: number }): AsyncGenerator<string> {
  const unzstd = spawn("zstd", ["-dc", "--", ...files], { stdio: ["ignore", "pipe", "inherit"] });
  const exited = once(unzstd, "exit");
  unzstd.stdout.on("data", (c: Buffer) => (plain.bytes += c.length));
  yield* createInterface({ input: unzstd.stdout, crlfDelay: Infinity });
  const [code] = (await exited) as [number | null];
  if (code !== 0) throw new Error(`zstd -dc ${files.join(" ")} exited ${code}`);
}

/** Records of archive files one a line, as produced: ours, and the collector's S3 exporter with its body marshaler. */
async function* lineRecords(files: readonly string[], plain: { bytes: number }): AsyncGenerator<string> {
  yield* zstdLines(files, plain);
}

interface OtlpLogs {
  resourceLogs?: { scopeLogs?: { logRecords?: { body?: { stringValue?: string } }[] }[] }[];
}

/** The records of the collector's file exporter: one OTLP JSON export request per line, each record a log body. */
async function* otlpRecords(files: readonly string[], plain: { bytes: number }): AsyncGenerator<string> {
  for await (const line of zstdLines(files, plain)) {
    const req = JSON.parse(line) as OtlpLogs;
    for (const rl of req.resourceLogs ?? [])
      for (const sl of rl.scopeLogs ?? []) for (const lr of sl.logRecords ?? []) yield lr.body?.stringValue ?? "";
  }
}

type Records = (files: readonly string[], plain: { bytes: number }) => AsyncGenerator<string>;

/** Files a zstd process reads at once: a directory's, so a record's destination is its directory's. */
const FILES_A_PROCESS = 256;

/** Counts every record of the archive under root and compares each with the one produced under its id. */
async function check(root: string, records: Records, routed: boolean): Promise<Check> {
  const seen = new Uint8Array(N);
  const plain = { bytes: 0 };
  const c: Check = {
    files: 0,
    bytes: 0,
    plainBytes: 0,
    bodyBytes: 0,
    records: 0,
    missing: 0,
    duplicates: 0,
    altered: 0,
    misplaced: 0,
  };
  // By directory: one zstd process for a directory's files (the collector's S3 exporter writes 10,000 objects).
  const dirs = new Map<string, string[]>();
  for (const f of archiveFiles(root)) {
    c.files++;
    c.bytes += f.size;
    const dir = dirname(f.path);
    const inDir = dirs.get(dir) ?? [];
    if (inDir.length === 0) dirs.set(dir, inDir);
    inDir.push(join(root, f.path));
  }
  for (const [dir, files] of dirs)
    for (let i = 0; i < files.length; i += FILES_A_PROCESS)
      for await (const body of records(files.slice(i, i + FILES_A_PROCESS), plain)) {
        c.records++;
        c.bodyBytes += Buffer.byteLength(body);
        const id = Number(/"id":(\d+)/.exec(body)?.[1] ?? -1);
        if (id < 0 || id >= N || body !== makeRecord(id, PICK)) {
          c.altered++;
          continue;
        }
        if (seen[id]) c.duplicates++;
        seen[id] = 1;
        const dest = /"_org_id":"([^"]*)","event_type":"([^"]*)"/.exec(body);
        if (routed && !`/${dir}/`.includes(`/${dest?.[1]}/${dest?.[2]}/`)) c.misplaced++;
      }
  c.plainBytes = plain.bytes;
  for (const s of seen) if (!s) c.missing++;
  return c;
}

/**
 * Ours on `topic`: the time runs to the clean exit. For MinIO that exit is not proof: files still uploading when the
 * drain's 20 s grace ends keep their staged copies and offsets, and the exit is 0 all the same (the restart reads those
 * records again). So every object run's bucket is checked, and a run missing records is not counted durable.
 */
async function runOurs(topic: string, routing: Record<string, unknown>, target: Target): Promise<Run> {
  const bucket = target === "minio" ? await newBucket() : undefined;
  const r = await runArchiver(work, topic, N, {
    routing,
    ...(bucket !== undefined && {
      archive: () => minioArchive(bucket, "archive"),
      buffer: { writer_parallelism: UPLOADS_AT_ONCE },
    }),
  });
  const root = join(r.dir, "archive");
  if (bucket !== undefined) await fetchBucket(bucket, root);
  const { receivedSeconds, seconds, cpu, peakRss } = r;
  return { receivedSeconds, seconds, cpu, peakRss, root, dropped: 0, stalled: false, lost: 0 };
}

const DESTINATIONS = ORGS * TYPES;

/** What a round adds to the collector's kafka -> batch -> exporter pipeline. */
interface CollectorPipeline {
  /** After batch, in order. */
  processors: Record<string, unknown>;
  /** The batch processor's settings; its defaults (8,192 records or 200 ms) when absent. */
  batch?: Record<string, unknown>;
  /** The resource attribute the exporter writes one file (object prefix) per value of. */
  groupBy?: string;
}

const RECEIVED = "otelcol_receiver_accepted_log_records";
const EXPORTED = "otelcol_exporter_sent_log_records";
const DROPPED = ["otelcol_exporter_send_failed_log_records", "otelcol_exporter_enqueue_failed_log_records"];
const POLL_MS = 50;
/** No record sent or dropped for this long: the collector is stuck, and the run is reported so. */
const STALL_MS = 120_000;

/**
 * The exporter of a round: the file exporter into `root`, or the S3 exporter into `bucket` of the testbed's MinIO,
 * with the records' bodies one a line (the `body` marshaler: the records as produced) in zstd, keyed
 * <group>/year=/month=/day=/hour=/minute=/logs_<random>.txt.zst (its default partition format), one object per batch
 * and group. Its sending queue blocks when full rather than drop, with UPLOADS_AT_ONCE consumers.
 */
function exporter(pipeline: CollectorPipeline, root: string, bucket: string | undefined): Record<string, unknown> {
  if (bucket === undefined)
    return {
      file: {
        path: join(root, pipeline.groupBy ? "*/logs.jsonl.zst" : "logs.jsonl.zst"),
        format: "json",
        compression: "zstd",
        compression_params: { level: 3 },
        ...(pipeline.groupBy && {
          group_by: { enabled: true, resource_attribute: pipeline.groupBy, max_open_files: DESTINATIONS },
        }),
      },
    };
  return {
    awss3: {
      s3uploader: {
        endpoint: need("TESTBED_MINIO_ENDPOINT"),
        region: need("TESTBED_MINIO_REGION"),
        s3_bucket: bucket,
        s3_force_path_style: true,
        disable_ssl: true,
        access_key: need("TESTBED_MINIO_ACCESS_KEY"),
        secret_key: need("TESTBED_MINIO_SECRET_KEY"),
        compression: "zstd",
      },
      marshaler: "body",
      ...(pipeline.groupBy && { resource_attrs_to_s3: { s3_prefix: pipeline.groupBy } }),
      sending_queue: {
        enabled: true,
        num_consumers: UPLOADS_AT_ONCE,
        sizer: "requests",
        queue_size: 4 * DESTINATIONS,
        block_on_overflow: true,
      },
    },
  };
}

/**
 * The collector on `topic` from the beginning, a group of its own, its internal metrics on a free port: the time runs
 * until its exporter reported every record sent (or sent and dropped), then SIGTERM, and on to its clean exit (the
 * receiver stops, the batch processor flushes, the exporter finishes).
 */
async function runCollector(topic: string, pipeline: CollectorPipeline, target: Target): Promise<Run> {
  const dir = mkdtempSync(join(work, "otelcol-"));
  const root = join(dir, "archive");
  mkdirSync(root);
  const bucket = target === "minio" ? await newBucket() : undefined;
  const port = await freePort();
  const config = join(dir, "config.yaml");
  const exporters = exporter(pipeline, root, bucket);
  writeFileSync(
    config,
    stringify({
      receivers: {
        kafka: {
          brokers: brokers.split(","),
          group_id: uniqueName("bench-otelcol"),
          initial_offset: "earliest",
          logs: { topics: [topic], encoding: "text" },
        },
      },
      processors: { batch: pipeline.batch ?? {}, ...pipeline.processors },
      exporters,
      service: {
        telemetry: {
          logs: { level: "warn" },
          metrics: { readers: [{ pull: { exporter: { prometheus: { host: "127.0.0.1", port } } } }] },
        },
        pipelines: {
          logs: {
            receivers: ["kafka"],
            processors: ["batch", ...Object.keys(pipeline.processors)],
            exporters: Object.keys(exporters),
          },
        },
      },
    }),
  );
  const t0 = process.hrtime.bigint();
  const since = () => Number(process.hrtime.bigint() - t0) / 1e9;
  const proc = spawn(otelcol, ["--config", config, "--feature-gates=exporter.file.nativeCompression"], {
    stdio: ["ignore", "inherit", "inherit"],
  });
  const pid = proc.pid ?? 0;
  // VmHWM is the peak itself, so a reading every POLL_MS misses none of it; the CPU reading is the last before exit.
  let last: { cpu: number; rss: number };
  let receivedSeconds = 0;
  let dropped: number;
  let stalled = false;
  let progress = { done: 0, at: 0 };
  for (;;) {
    await sleep(POLL_MS);
    if (proc.exitCode !== null) throw new Error(`otelcol exited ${proc.exitCode}`);
    last = procStats(pid);
    const text = await fetch(`http://127.0.0.1:${port}/metrics`).then(
      (r) => r.text(),
      () => "",
    );
    if (receivedSeconds === 0 && sumMetric(text, RECEIVED) >= N) receivedSeconds = since();
    dropped = DROPPED.reduce((sum, name) => sum + sumMetric(text, name), 0);
    const done = sumMetric(text, EXPORTED) + dropped;
    if (done >= N) break;
    if (done > progress.done) progress = { done, at: since() };
    else if (since() - progress.at > STALL_MS / 1000) {
      stalled = true;
      console.log(`otelcol: no record sent or dropped for ${STALL_MS / 1000} s at ${done} of ${N}; stopping it`);
      break;
    }
  }
  const code = await stopReading(proc, () => {
    const s = procStats(pid);
    if (s.rss > 0) last = s;
  });
  if (code !== 0) throw new Error(`otelcol exited ${code} after SIGTERM`);
  const seconds = since();
  if (bucket !== undefined) await fetchBucket(bucket, root);
  return { receivedSeconds, seconds, cpu: last.cpu, peakRss: last.rss, root, dropped, stalled, lost: 0 };
}

interface Round {
  title: string;
  target: Target;
  ours: { name: string; routing: Record<string, unknown> };
  collector: {
    name: string;
    pipeline: CollectorPipeline;
    /** How its archive holds the records: OTLP JSON export requests, or the bodies one a line as ours. */
    records: Records;
  };
  routed: boolean;
}

/** The destination of a record as the collector's file exporter names it: <_org_id>/<event_type>. */
const DEST_STATEMENTS = [
  'merge_maps(log.cache, ParseJSON(log.body), "upsert")',
  'set(log.attributes["dest"], Concat([log.cache["_org_id"], log.cache["event_type"]], "/"))',
];

/** Round 2's routing on the collector's side: each body parsed, its destination made the resource's attribute. */
const ROUTE_PROCESSORS = {
  transform: { error_mode: "propagate", log_statements: [{ statements: DEST_STATEMENTS }] },
  groupbyattrs: { keys: ["dest"] },
};

const ROUNDS: Round[] = [
  {
    title: "1: topic only, local files, zstd",
    target: "local",
    ours: { name: "dfe-archiver, routing.mode topic", routing: { mode: "topic" } },
    collector: {
      name: "otelcol: kafka (text) -> batch -> file (json, zstd)",
      pipeline: { processors: {} },
      records: otlpRecords,
    },
    routed: false,
  },
  {
    title: `2: by _org_id and event_type to ${DESTINATIONS} destinations`,
    target: "local",
    ours: { name: "dfe-archiver, routing by _org_id, event_type", routing: {} },
    collector: {
      name: "otelcol: ... -> transform (ParseJSON) -> groupbyattrs -> file group_by",
      pipeline: { processors: ROUTE_PROCESSORS, groupBy: "dest" },
      records: otlpRecords,
    },
    routed: true,
  },
  {
    title: `3: by _org_id and event_type to ${DESTINATIONS} destinations in MinIO`,
    target: "minio",
    ours: {
      name: `dfe-archiver, minio://, writer_parallelism ${UPLOADS_AT_ONCE}`,
      routing: {},
    },
    collector: {
      // The exporter writes one object per batch and destination: the default batch (8,192 records, about 8 a
      // destination) made 125 objects per 1,000 records, which the exporter could not put in 300 s.
      name:
        `otelcol: kafka -> batch (${COLLECTOR_BATCH} records or 10 s) -> transform -> groupbyattrs -> awss3 ` +
        `(body, zstd, s3_prefix from dest, queue of ${UPLOADS_AT_ONCE} consumers blocking when full)`,
      pipeline: {
        processors: ROUTE_PROCESSORS,
        batch: { send_batch_size: COLLECTOR_BATCH, send_batch_max_size: COLLECTOR_BATCH, timeout: "10s" },
        groupBy: "dest",
      },
      records: lineRecords,
    },
    routed: true,
  },
];

/** Three rounds of both sides over `topic`, alternating which goes first; prints the round's table and ratios. */
async function runRound(topic: string, bytes: number, round: Round): Promise<void> {
  const sides = [
    { name: round.ours.name, run: () => runOurs(topic, round.ours.routing, round.target), records: lineRecords },
    {
      name: round.collector.name,
      run: () => runCollector(topic, round.collector.pipeline, round.target),
      records: round.collector.records,
    },
  ] as const;
  const runs: [Run, Run][] = [];
  for (let i = 0; i < 3; i++) {
    // Alternating which side goes first, so neither always runs on the page cache the other left warm.
    if (i % 2 === 0) {
      const a = await sides[0].run();
      runs.push([a, await sides[1].run()]);
    } else {
      const b = await sides[1].run();
      runs.push([await sides[0].run(), b]);
    }
  }
  // An object round's every run is checked: a run is durable only with every record in the bucket as produced.
  const checked = new Map<Run, Check>();
  if (round.target === "minio")
    for (const pair of runs)
      for (const [i, side] of sides.entries()) {
        const r = pair[i] as Run;
        const c = await check(r.root, side.records, round.routed);
        checked.set(r, c);
        r.lost = c.missing;
      }
  const byTime = (xs: Run[]) => [...xs].sort((a, b) => durableSeconds(a) - durableSeconds(b))[1] as Run;
  const rate = (s: number) => (N / s / 1e3).toFixed(0);
  const durableRate = (r: Run) => (r.lost > 0 ? `none: ${r.lost} records missing` : rate(r.seconds));
  console.log(
    `\n| round ${round.title} | k records/s received | k records/s durable | CPU s/GB | peak RSS MB | ${round.target === "minio" ? "objects" : "files"} | archive B/record | archive holds |`,
  );
  console.log("| --- | --- | --- | --- | --- | --- | --- | --- |");
  for (const [i, side] of sides.entries()) {
    const r = byTime(runs.map((x) => x[i] as Run));
    const c = checked.get(r) ?? (await check(r.root, side.records, round.routed));
    const dropped = r.dropped > 0 || r.stalled ? `; ${r.dropped} reported dropped${r.stalled ? ", stalled" : ""}` : "";
    console.log(
      `| ${side.name} | ${rate(r.receivedSeconds)} | ${durableRate(r)} | ${(r.cpu / (bytes / 1e9)).toFixed(1)} | ${(r.peakRss / MB).toFixed(0)} | ${c.files} | ${(c.bytes / N).toFixed(1)} | ${holds(c, round.routed)}${dropped} |`,
    );
  }
  if (checked.size > 0)
    for (const [i, side] of sides.entries())
      console.log(
        `every run of ${side.name}: ${runs
          .map((x) => {
            const r = x[i] as Run;
            const c = checked.get(r) as Check;
            return `${c.files} objects, ${N - c.missing} of ${N} records as produced, ${r.dropped} dropped`;
          })
          .join("; ")}`,
      );
  const ratio = (f: (r: Run) => number) => median(runs.map(([o, p]) => f(p) / f(o)));
  console.log(
    `ours / collector, median of ${runs.length} rounds: rate until durable ${ratio(durableSeconds).toFixed(2)}x, until received ${ratio((r) => r.receivedSeconds).toFixed(2)}x (goal >= 1.50); peak RSS ${median(runs.map(([o, p]) => o.peakRss / p.peakRss)).toFixed(2)}x (goal <= 1.00)`,
  );
  console.log(
    `rounds (ours s, collector s, to the clean exit): ${runs.map((pair) => pair.map(exitSeconds).join(", ")).join("; ")}`,
  );
}

/** The archive against the producer's records, in words. */
function holds(c: Check, routed: boolean): string {
  const counted =
    `${c.records} records, ${c.missing} missing, ${c.duplicates} duplicated, ${c.altered} altered` +
    (routed ? `, ${c.misplaced} misplaced` : "");
  const envelope = (c.plainBytes - c.bodyBytes) / c.records;
  // Our files are the records, each followed by a newline: one byte of framing each.
  if (envelope <= 1.0001) return `${counted}; as produced, byte for byte`;
  return `${counted}; bodies as produced, wrapped in an envelope of ${envelope.toFixed(0)} B/record before compression (+${((100 * envelope) / (c.bodyBytes / c.records)).toFixed(0)}%)`;
}

async function main(): Promise<void> {
  console.log(`workload: ${N} records, ${ORGS} orgs x ${TYPES} event types, ${PARTITIONS} partitions, zstd -3`);
  const data = join(work, "data.jsonl");
  const bytes = await writeData(data, N, ORGS, TYPES, PICK);
  const topic = await createTopic();
  produceFile(topic, data, ["-X", "linger.ms=50"]);
  rmSync(data);
  console.log(`produced ${(bytes / MB).toFixed(0)} MB (${(bytes / N).toFixed(0)} bytes/record avg)`);

  try {
    for (const [i, round] of ROUNDS.entries()) if (ONLY.includes(i + 1)) await runRound(topic, bytes, round);
  } finally {
    // The disk here is shared and often nearly full: the topic and the runs' archives go either way.
    await deleteTopics().catch(() => undefined);
    s3.destroy();
    rmSync(work, { recursive: true, force: true });
  }
  console.log(
    "guarantees: ours commits an offset once its record is durable; the collector's Kafka receiver commits (autocommit, message_marking.after false) on receipt, before the export, its file exporter never fsyncs, and its S3 exporter's queue is in memory (a batch it holds or drops is lost with its offset committed)",
  );
}

await main();
