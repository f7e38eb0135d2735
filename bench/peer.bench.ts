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
// Each row: records/s until every record was received and until every record was durable (the process exited
// cleanly, its files complete), CPU seconds per GB produced, peak RSS, files written, archive bytes per record, and
// whether the archive holds the records as the producer sent them (every record counted and compared).
// Usage: node bench/peer.bench.ts [records] [rounds]   (default 1,000,000 of about 700 bytes, rounds 1,2)
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { stringify } from "yaml";
import { need, uniqueName } from "../e2e/support/testbed.ts";
import { archiveFiles, freePort, sumMetric } from "../e2e/support/archiver.ts";
import {
  createTopic,
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
const ONLY = (process.argv[3] ?? "1,2").split(",").map(Number);
const ORGS = 100;
const TYPES = 10;
const PICK = uniformKeys(ORGS, TYPES);
const brokers = need("TESTBED_KAFKA_BROKERS");
const otelcol = need("TESTBED_OTELCOL");
const work = mkdtempSync(join(tmpdir(), "dfe-bench-peer-"));

/** One run of either side: times from the spawn, measured from outside. */
interface Run {
  receivedSeconds: number;
  /** Until every record was durable: the clean exit after every record was received (or exported), files complete. */
  seconds: number;
  cpu: number;
  peakRss: number;
  /** The run's archive directory. */
  root: string;
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
 * The lines of a zstd file, streamed (a whole archive exceeds a string's limit), counting the decompressed bytes. The
 * zstd CLI, not node:zlib: Node 24's stream stops after the first frame, and both archives hold several.
 */
async function* zstdLines(file: string, plain: { bytes: number }): AsyncGenerator<string> {
  const unzstd = spawn("zstd", ["-dc", "--", file], { stdio: ["ignore", "pipe", "inherit"] });
  const exited = once(unzstd, "exit");
  unzstd.stdout.on("data", (c: Buffer) => (plain.bytes += c.length));
  yield* createInterface({ input: unzstd.stdout, crlfDelay: Infinity });
  const [code] = (await exited) as [number | null];
  if (code !== 0) throw new Error(`zstd -dc ${file} exited ${code}`);
}

/** The records of our archive: one per line, as produced. */
async function* ourRecords(file: string, plain: { bytes: number }): AsyncGenerator<string> {
  yield* zstdLines(file, plain);
}

interface OtlpLogs {
  resourceLogs?: { scopeLogs?: { logRecords?: { body?: { stringValue?: string } }[] }[] }[];
}

/** The records of the collector's archive: one OTLP JSON export request per line, each record a log body. */
async function* collectorRecords(file: string, plain: { bytes: number }): AsyncGenerator<string> {
  for await (const line of zstdLines(file, plain)) {
    const req = JSON.parse(line) as OtlpLogs;
    for (const rl of req.resourceLogs ?? [])
      for (const sl of rl.scopeLogs ?? []) for (const lr of sl.logRecords ?? []) yield lr.body?.stringValue ?? "";
  }
}

/** Counts every record of the archive under root and compares each with the one produced under its id. */
async function check(
  root: string,
  records: (file: string, plain: { bytes: number }) => AsyncGenerator<string>,
  routed: boolean,
): Promise<Check> {
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
  for (const f of archiveFiles(root)) {
    c.files++;
    c.bytes += f.size;
    for await (const body of records(join(root, f.path), plain)) {
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
      if (routed && !`/${f.path}`.includes(`/${dest?.[1]}/${dest?.[2]}/`)) c.misplaced++;
    }
  }
  c.plainBytes = plain.bytes;
  for (const s of seen) if (!s) c.missing++;
  return c;
}

async function runOurs(topic: string, routing: Record<string, unknown>): Promise<Run> {
  const r = await runArchiver(work, topic, N, { routing });
  const root = join(r.dir, "archive");
  return { receivedSeconds: r.receivedSeconds, seconds: r.seconds, cpu: r.cpu, peakRss: r.peakRss, root };
}

const DESTINATIONS = ORGS * TYPES;

/** What a round adds to the collector's kafka -> batch -> file pipeline. */
interface CollectorPipeline {
  /** After batch, in order. */
  processors: Record<string, unknown>;
  /** The resource attribute the file exporter writes one file per value of. */
  groupBy?: string;
}

const RECEIVED = "otelcol_receiver_accepted_log_records";
const EXPORTED = "otelcol_exporter_sent_log_records";
const POLL_MS = 50;

/**
 * The collector on `topic` from the beginning, a group of its own, its internal metrics on a free port: the time runs
 * until its exporter reported every record sent, then SIGTERM, and on to its clean exit (the receiver stops, the
 * batch processor flushes, the file exporter closes its zstd stream).
 */
async function runCollector(topic: string, pipeline: CollectorPipeline): Promise<Run> {
  const dir = mkdtempSync(join(work, "otelcol-"));
  const root = join(dir, "archive");
  mkdirSync(root);
  const port = await freePort();
  const config = join(dir, "config.yaml");
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
      processors: { batch: {}, ...pipeline.processors },
      exporters: {
        file: {
          path: join(root, pipeline.groupBy ? "*/logs.jsonl.zst" : "logs.jsonl.zst"),
          format: "json",
          compression: "zstd",
          compression_params: { level: 3 },
          ...(pipeline.groupBy && {
            group_by: { enabled: true, resource_attribute: pipeline.groupBy, max_open_files: DESTINATIONS },
          }),
        },
      },
      service: {
        telemetry: {
          logs: { level: "warn" },
          metrics: { readers: [{ pull: { exporter: { prometheus: { host: "127.0.0.1", port } } } }] },
        },
        pipelines: {
          logs: {
            receivers: ["kafka"],
            processors: ["batch", ...Object.keys(pipeline.processors)],
            exporters: ["file"],
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
  for (;;) {
    await sleep(POLL_MS);
    if (proc.exitCode !== null) throw new Error(`otelcol exited ${proc.exitCode}`);
    last = procStats(pid);
    const text = await fetch(`http://127.0.0.1:${port}/metrics`).then(
      (r) => r.text(),
      () => "",
    );
    if (receivedSeconds === 0 && sumMetric(text, RECEIVED) >= N) receivedSeconds = since();
    if (sumMetric(text, EXPORTED) >= N) break;
  }
  const code = await stopReading(proc, () => {
    const s = procStats(pid);
    if (s.rss > 0) last = s;
  });
  if (code !== 0) throw new Error(`otelcol exited ${code} after SIGTERM`);
  return { receivedSeconds, seconds: since(), cpu: last.cpu, peakRss: last.rss, root };
}

interface Round {
  title: string;
  ours: { name: string; routing: Record<string, unknown> };
  collector: { name: string; pipeline: CollectorPipeline };
  routed: boolean;
}

/** The destination of a record as the collector's file exporter names it: <_org_id>/<event_type>. */
const DEST_STATEMENTS = [
  'merge_maps(log.cache, ParseJSON(log.body), "upsert")',
  'set(log.attributes["dest"], Concat([log.cache["_org_id"], log.cache["event_type"]], "/"))',
];

const ROUNDS: Round[] = [
  {
    title: "1: topic only, local files, zstd",
    ours: { name: "dfe-archiver, routing.mode topic", routing: { mode: "topic" } },
    collector: { name: "otelcol: kafka (text) -> batch -> file (json, zstd)", pipeline: { processors: {} } },
    routed: false,
  },
  {
    title: `2: by _org_id and event_type to ${DESTINATIONS} destinations`,
    ours: { name: "dfe-archiver, routing by _org_id, event_type", routing: {} },
    collector: {
      name: "otelcol: ... -> transform (ParseJSON) -> groupbyattrs -> file group_by",
      pipeline: {
        processors: {
          transform: { error_mode: "propagate", log_statements: [{ statements: DEST_STATEMENTS }] },
          groupbyattrs: { keys: ["dest"] },
        },
        groupBy: "dest",
      },
    },
    routed: true,
  },
];

/** Three rounds of both sides over `topic`, alternating which goes first; prints the round's table and ratios. */
async function runRound(topic: string, bytes: number, round: Round): Promise<void> {
  const sides = [
    { name: round.ours.name, run: () => runOurs(topic, round.ours.routing), records: ourRecords },
    { name: round.collector.name, run: () => runCollector(topic, round.collector.pipeline), records: collectorRecords },
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
  const byTime = (xs: Run[]) => [...xs].sort((a, b) => a.seconds - b.seconds)[1] as Run;
  const rate = (s: number) => (N / s / 1e3).toFixed(0);
  console.log(
    `\n| round ${round.title} | k records/s received | k records/s durable | CPU s/GB | peak RSS MB | files | archive B/record | archive holds |`,
  );
  console.log("| --- | --- | --- | --- | --- | --- | --- | --- |");
  for (const [i, side] of sides.entries()) {
    const r = byTime(runs.map((x) => x[i] as Run));
    const c = await check(r.root, side.records, round.routed);
    console.log(
      `| ${side.name} | ${rate(r.receivedSeconds)} | ${rate(r.seconds)} | ${(r.cpu / (bytes / 1e9)).toFixed(1)} | ${(r.peakRss / MB).toFixed(0)} | ${c.files} | ${(c.bytes / N).toFixed(1)} | ${holds(c, round.routed)} |`,
    );
  }
  const ratio = (f: (r: Run) => number) => median(runs.map(([o, p]) => f(p) / f(o)));
  console.log(
    `ours / collector, median of ${runs.length} rounds: rate until durable ${ratio((r) => r.seconds).toFixed(2)}x, until received ${ratio((r) => r.receivedSeconds).toFixed(2)}x (goal >= 1.50); peak RSS ${median(runs.map(([o, p]) => o.peakRss / p.peakRss)).toFixed(2)}x (goal <= 1.00)`,
  );
  console.log(
    `rounds (ours s, collector s, until durable): ${runs.map(([o, p]) => `${o.seconds.toFixed(2)}, ${p.seconds.toFixed(2)}`).join("; ")}`,
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
  console.log(`produced ${(bytes / MB).toFixed(0)} MB (${(bytes / N).toFixed(0)} bytes/record avg)`);

  for (const [i, round] of ROUNDS.entries()) if (ONLY.includes(i + 1)) await runRound(topic, bytes, round);
  console.log(
    "guarantees: ours commits an offset once its record is durable; the collector's Kafka receiver commits (autocommit, message_marking.after false) on receipt, before the export, and its file exporter never fsyncs",
  );
  rmSync(work, { recursive: true, force: true });
}

await main();
