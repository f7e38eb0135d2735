// The runtime end to end (Kafka -> route -> buffer -> zstd -> local files) beside its two limits, measured in the same
// run on the same data: kcat consuming the topic to /dev/null (transport) and `zstd -3 -T1` over the same bytes
// (codec). Then 10,000 destinations under a 512 MiB memory limit: peak RSS must stay under it.
// Usage: node bench/pipeline.bench.ts [records]   (default 2,000,000 of about 700 bytes)
import { execFileSync, spawn } from "node:child_process";
import { createWriteStream, readFileSync, rmSync, mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { once } from "node:events";
import { setTimeout as sleep } from "node:timers/promises";
import { stringify } from "yaml";
import { kafka, need, uniqueName } from "../e2e/support/testbed.ts";
import { freePort, mainTs, nodeBin, sumMetric } from "../e2e/support/archiver.ts";

const N = Number(process.argv[2] ?? 2_000_000);
const PARTITIONS = 6;
const brokers = need("TESTBED_KAFKA_BROKERS");
const work = mkdtempSync(join(tmpdir(), "dfe-bench-"));
const MB = 1e6;

function makeRecord(i: number, orgs: number, types: number): string {
  const base = {
    _org_id: `org-${(i * 7919) % orgs}`,
    event_type: `type-${(i * 31) % types}`,
    id: i,
    ts: 1764676800000 + i,
    host: `host-${i % 257}.example.internal`,
    user: { name: `user-${i % 5003}`, roles: ["reader", i % 3 ? "writer" : "admin"], session: (i * 2654435761) >>> 0 },
    http: { method: i % 5 ? "GET" : "POST", status: 200 + (i % 7) * 50, path: `/api/v2/items/${i % 10007}` },
    msg: "",
  };
  const text = JSON.stringify(base);
  base.msg = "m".repeat(Math.max(0, 700 - text.length - (i % 40)));
  return JSON.stringify(base);
}

async function writeData(file: string, count: number, orgs: number, types: number): Promise<number> {
  const out = createWriteStream(file);
  let bytes = 0;
  for (let i = 0; i < count; i++) {
    const line = makeRecord(i, orgs, types) + "\n";
    bytes += line.length;
    if (!out.write(line)) await once(out, "drain");
  }
  out.end();
  await once(out, "finish");
  return bytes;
}

async function createTopic(): Promise<string> {
  const topic = uniqueName("bench");
  const admin = kafka().admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: PARTITIONS }], waitForLeaders: true });
  await admin.disconnect();
  return topic;
}

function timeCmd(cmd: string, args: string[], opts: { input?: string } = {}): number {
  const t0 = process.hrtime.bigint();
  execFileSync(cmd, args, {
    stdio: [opts.input ? "pipe" : "ignore", "ignore", "inherit"],
    ...(opts.input ? { input: readFileSync(opts.input) } : {}),
    maxBuffer: 1 << 30,
  });
  return Number(process.hrtime.bigint() - t0) / 1e9;
}

function procStats(pid: number): { cpu: number; rss: number } {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.split(" ") ?? [];
  const ticks = Number(stat[11]) + Number(stat[12]);
  const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  return { cpu: ticks / 100, rss: Number(hwm ?? 0) * 1024 };
}

interface RunResult {
  seconds: number;
  cpu: number;
  peakRss: number;
  heldBytesPerRecord: number;
}

async function runArchiver(
  topic: string,
  count: number,
  env: Record<string, string> = {},
  client = "kafkajs",
): Promise<RunResult> {
  const dir = mkdtempSync(join(work, "run-"));
  const config = join(dir, "config.yaml");
  writeFileSync(
    config,
    stringify({
      kafka: { brokers: brokers.split(","), group_id: uniqueName("bench"), topics: [topic], client },
      archive: { destination: `file://${join(dir, "archive")}` },
      buffer: { spool_dir: join(dir, "spool") },
      compression: { codec: "zstd", level: 3 },
      routing: { mode: "expression", expression_fields: ["_org_id", "event_type"] },
      dlq: { enabled: false },
      logger: { level: "warn" },
    }),
  );
  const addr = `127.0.0.1:${await freePort()}`;
  const t0 = process.hrtime.bigint();
  const proc = spawn(nodeBin, [mainTs, "run", "--config", config, "--metrics-addr", addr], {
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, ...env },
  });
  const pid = proc.pid ?? 0;
  let held = 0;
  let heldBytes = 0;
  let last: { cpu: number; rss: number };
  // Received everything: stop it, so the drain flushes, completes and commits; the time runs to the clean exit.
  for (;;) {
    await sleep(250);
    if (proc.exitCode !== null) throw new Error(`archiver exited ${proc.exitCode}`);
    last = procStats(pid);
    const text = await fetch(`http://${addr}/metrics`).then(
      (r) => r.text(),
      () => "",
    );
    const h = sumMetric(text, "held_records");
    if (h > held) {
      held = h;
      heldBytes = sumMetric(text, "held_offset_bytes");
    }
    if (sumMetric(text, "messages_received_total") >= count) break;
  }
  const exited = once(proc, "exit");
  proc.kill("SIGTERM");
  const poll = setInterval(() => {
    try {
      const s = procStats(pid);
      if (s.rss > 0) last = s;
    } catch {
      // gone: the last reading stands
    }
  }, 100);
  const [code] = (await exited) as [number | null];
  clearInterval(poll);
  if (code !== 0) throw new Error(`archiver exited ${code} after SIGTERM`);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  rmSync(dir, { recursive: true, force: true });
  return { seconds, cpu: last.cpu, peakRss: last.rss, heldBytesPerRecord: held ? heldBytes / held : 0 };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;

async function main(): Promise<void> {
  console.log(`workload: ${N} records, 100 orgs x 10 event types, ${PARTITIONS} partitions, zstd -3, local files`);
  const data = join(work, "data.jsonl");
  const bytes = await writeData(data, N, 100, 10);
  const topic = await createTopic();
  execFileSync("kcat", ["-P", "-b", brokers, "-t", topic, "-z", "lz4", "-X", "linger.ms=50", "-l", data]);
  console.log(`produced ${(bytes / MB).toFixed(0)} MB (${(bytes / N).toFixed(0)} bytes/record avg)`);

  const kcat = median(
    [0, 1, 2].map(() => timeCmd("kcat", ["-C", "-b", brokers, "-t", topic, "-o", "beginning", "-e", "-q"])),
  );
  const zstd = median([0, 1, 2].map(() => timeCmd("zstd", ["-3", "-T1", "-c"], { input: data })));
  const run = await runArchiver(topic, N);
  const runP = await runArchiver(topic, N, {}, "platformatic");
  const rate = (s: number) => (N / s / 1e3).toFixed(0);
  const mbs = (s: number) => (bytes / MB / s).toFixed(1);
  const slower = Math.max(kcat, zstd);
  console.log("\n| what | seconds | k records/s | MB/s | CPU s/GB | peak RSS MB | held B/record |");
  console.log("| --- | --- | --- | --- | --- | --- | --- |");
  console.log(`| kcat -C to /dev/null (transport limit) | ${kcat.toFixed(2)} | ${rate(kcat)} | ${mbs(kcat)} | | | |`);
  console.log(`| zstd -3 -T1 (codec limit) | ${zstd.toFixed(2)} | ${rate(zstd)} | ${mbs(zstd)} | | | |`);
  console.log(
    `| dfe-archiver | ${run.seconds.toFixed(2)} | ${rate(run.seconds)} | ${mbs(run.seconds)} | ${(run.cpu / (bytes / 1e9)).toFixed(1)} | ${(run.peakRss / MB).toFixed(0)} | ${run.heldBytesPerRecord.toFixed(3)} |`,
  );
  console.log(
    `| dfe-archiver, kafka.client platformatic | ${runP.seconds.toFixed(2)} | ${rate(runP.seconds)} | ${mbs(runP.seconds)} | ${(runP.cpu / (bytes / 1e9)).toFixed(1)} | ${(runP.peakRss / MB).toFixed(0)} | ${runP.heldBytesPerRecord.toFixed(3)} |`,
  );
  console.log(
    `\nratio to the slower limit (${kcat > zstd ? "kcat" : "zstd"}): ${(slower / run.seconds).toFixed(2)} (goal >= 0.50); to kcat ${(kcat / run.seconds).toFixed(2)}, to zstd ${(zstd / run.seconds).toFixed(2)}`,
  );

  // 10,000 destinations under a 512 MiB memory limit.
  const M = Math.min(N, 1_000_000);
  const data2 = join(work, "data-10k.jsonl");
  await writeData(data2, M, 1000, 10);
  const topic2 = await createTopic();
  execFileSync("kcat", ["-P", "-b", brokers, "-t", topic2, "-z", "lz4", "-l", data2]);
  const limit = 512 * 1024 * 1024;
  const r2 = await runArchiver(topic2, M, { DFE_ARCHIVER_MEMORY_LIMIT_BYTES: String(limit) });
  console.log(
    `\n10,000 destinations, ${M} records, DFE_ARCHIVER_MEMORY_LIMIT_BYTES=512MiB: ${(M / r2.seconds / 1e3).toFixed(0)}k records/s, peak RSS ${(r2.peakRss / 1048576).toFixed(0)} MiB (${r2.peakRss < limit ? "under" : "OVER"} the limit)`,
  );
  rmSync(work, { recursive: true, force: true });
}

await main();
