// The Kafka client alone: one topic of 6 partitions and about 700-byte JSON records (lz4 batches, as kcat produces
// them), consumed to the last record through each Transport implementation with a sink that only counts, beside kcat
// consuming the same topic to /dev/null. Each in-process run is a child process of its own (fresh heap, no JIT shared
// between clients); the figures are the median of 3 runs, taken in turn.
// @confluentinc/kafka-javascript is not measured: its install script (node-pre-gyp) downloads the native binary from
// GitHub releases or builds librdkafka from source, so it does not install from the npm registry alone.
// Usage: node bench/transport.bench.ts [records]   (default 1,000,000)
import { execFileSync } from "node:child_process";
import { createWriteStream, mkdtempSync, rmSync } from "node:fs";
import { once } from "node:events";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { pino } from "pino";
import { recordsOf } from "../e2e/support/batches.ts";
import type * as testbed from "../e2e/support/testbed.ts";
import { KafkaTransport } from "../runtime/src/transport/kafka.ts";
import { PlatformaticKafkaTransport } from "../runtime/src/transport/platformatic.ts";
import type { InboundBatch } from "../runtime/src/records.ts";
import type { KafkaTransportOptions, Transport, TransportSink } from "../runtime/src/transport/types.ts";

const PARTITIONS = 6;
const RUNS = 3;

const CLIENTS: Record<string, (opts: KafkaTransportOptions) => Transport> = {
  kafkajs: (o) => new KafkaTransport(o),
  "@platformatic/kafka": (o) => new PlatformaticKafkaTransport(o),
};

interface Result {
  seconds: number;
  cpu: number;
  rssMB: number;
}

/** Counts records, and checks each partition's batches continue where its last one ended. */
class CountingSink implements TransportSink {
  count = 0;
  gaps = 0;
  readonly #next = new Map<number, number>();
  readonly #target: number;
  readonly #done: () => void;

  constructor(target: number, done: () => void) {
    this.#target = target;
    this.#done = done;
  }

  async onBatch(b: InboundBatch): Promise<void> {
    const records = recordsOf(b);
    const first = records[0];
    const last = records.at(-1);
    if (first === undefined || last === undefined) return;
    const expected = this.#next.get(b.partition) ?? 0;
    if (first.offset !== expected || last.offset - expected + 1 !== records.length) this.gaps++;
    this.#next.set(b.partition, last.offset + 1);
    this.count += records.length;
    if (this.count >= this.#target) this.#done();
  }
  onAssigned(): void {}
  onRevoked(): void {}
}

/** In a child process: consume the whole topic through one client, print the figures as JSON. */
async function child(client: string, brokers: string, topic: string, records: number): Promise<void> {
  const make = CLIENTS[client];
  if (make === undefined) throw new Error(`unknown client ${client}`);
  let resolve = (): void => undefined;
  const done = new Promise<void>((r) => (resolve = r));
  const sink = new CountingSink(records, () => resolve());
  const transport = make({
    brokers: brokers.split(","),
    clientId: "dfe-bench",
    groupId: `${topic}-${client}-${process.pid}`,
    topics: [topic],
    sessionTimeoutMs: 30_000,
    rebalanceTimeoutMs: 60_000,
    // What the runtime's defaults give (batch_size 10,000 at about a kilobyte a record).
    maxBytesPerPartition: 10_000 * 1024,
    batchRecords: 10_000,
    maxBytes: 64 << 20,
    log: pino({ level: "warn" }),
  });
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  await transport.start(sink);
  await done;
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const used = process.cpuUsage(cpu0);
  await transport.stopReceiving();
  await transport.close();
  if (sink.count !== records || sink.gaps > 0) {
    throw new Error(`${client}: ${sink.count} of ${records} records, ${sink.gaps} batches out of sequence`);
  }
  const result: Result = {
    seconds,
    cpu: (used.user + used.system) / 1e6,
    rssMB: process.resourceUsage().maxRSS / 1024,
  };
  process.stdout.write(JSON.stringify(result) + "\n");
}

function runChild(client: string, brokers: string, topic: string, records: number): Result {
  const out = execFileSync(
    process.execPath,
    // kafkajs's idle request queues schedule negative timeouts on Node 24 (tulios/kafkajs#1751), a warning per run;
    // the transport quiets its own (transport/kafkajs-queue.ts), not those of the clients the bench makes.
    [
      "--disable-warning=TimeoutNegativeWarning",
      fileURLToPath(import.meta.url),
      "--child",
      client,
      brokers,
      topic,
      String(records),
    ],
    { stdio: ["ignore", "pipe", "inherit"], encoding: "utf8" },
  );
  return JSON.parse(out.trim().split("\n").at(-1) ?? "") as Result;
}

function runKcat(brokers: string, topic: string): Result {
  const t0 = process.hrtime.bigint();
  execFileSync("kcat", ["-C", "-b", brokers, "-t", topic, "-o", "beginning", "-e", "-q"], {
    stdio: ["ignore", "ignore", "inherit"],
  });
  return { seconds: Number(process.hrtime.bigint() - t0) / 1e9, cpu: Number.NaN, rssMB: Number.NaN };
}

function record(i: number): string {
  const r = {
    _org_id: `org-${(i * 7919) % 100}`,
    event_type: `type-${(i * 31) % 10}`,
    id: i,
    ts: 1764676800000 + i,
    host: `host-${i % 257}.example.internal`,
    http: { method: i % 5 ? "GET" : "POST", status: 200 + (i % 7) * 50, path: `/api/v2/items/${i % 10007}` },
    msg: "",
  };
  r.msg = "m".repeat(Math.max(0, 700 - JSON.stringify(r).length - (i % 40)));
  return JSON.stringify(r);
}

async function produce(tb: typeof testbed, records: number): Promise<{ topic: string; bytes: number; work: string }> {
  const brokers = tb.need("TESTBED_KAFKA_BROKERS");
  const work = mkdtempSync(join(tmpdir(), "dfe-transport-bench-"));
  const file = join(work, "data.jsonl");
  const out = createWriteStream(file);
  let bytes = 0;
  for (let i = 0; i < records; i++) {
    const line = record(i) + "\n";
    bytes += line.length;
    if (!out.write(line)) await once(out, "drain");
  }
  out.end();
  await once(out, "finish");
  const topic = tb.uniqueName("bench-transport");
  const admin = tb.kafka().admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: PARTITIONS }], waitForLeaders: true });
  await admin.disconnect();
  execFileSync("kcat", ["-P", "-b", brokers, "-t", topic, "-z", "lz4", "-X", "linger.ms=50", "-l", file]);
  return { topic, bytes, work };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;

async function main(): Promise<void> {
  const records = Number(process.argv[2] ?? 1_000_000);
  // Imported here, not in the child: the testbed helpers load every cloud SDK, which would count in its memory.
  const tb = await import("../e2e/support/testbed.ts");
  const brokers = tb.need("TESTBED_KAFKA_BROKERS");
  const { topic, bytes, work } = await produce(tb, records);
  console.log(`${records} records, ${(bytes / records).toFixed(0)} bytes avg, ${PARTITIONS} partitions, lz4 batches`);
  const names = ["kcat", ...Object.keys(CLIENTS)];
  const runs = new Map<string, Result[]>(names.map((n) => [n, []]));
  try {
    for (let i = 0; i < RUNS; i++) {
      for (const name of names) {
        const r = name === "kcat" ? runKcat(brokers, topic) : runChild(name, brokers, topic, records);
        runs.get(name)?.push(r);
        console.log(`  run ${i + 1} ${name}: ${r.seconds.toFixed(2)} s`);
      }
    }
  } finally {
    const admin = tb.kafka().admin();
    await admin.connect();
    await admin.deleteTopics({ topics: [topic] }).catch(() => undefined);
    await admin.disconnect();
    rmSync(work, { recursive: true, force: true });
  }
  const kcatRate = records / median((runs.get("kcat") ?? []).map((r) => r.seconds));
  const rows = names.map((name) => {
    const rs = runs.get(name) ?? [];
    const seconds = median(rs.map((r) => r.seconds));
    const rate = records / seconds;
    const cpu = name === "kcat" ? seconds : median(rs.map((r) => r.cpu));
    return {
      client: name,
      "records/s": Math.round(rate).toLocaleString("en-US"),
      "wall s": seconds.toFixed(2),
      "CPU s": name === "kcat" ? `${cpu.toFixed(2)} (wall)` : cpu.toFixed(2),
      "CPU µs/record": name === "kcat" ? "-" : ((cpu / records) * 1e6).toFixed(2),
      "peak RSS MB": name === "kcat" ? "-" : median(rs.map((r) => r.rssMB)).toFixed(0),
      "x kcat": (rate / kcatRate).toFixed(3),
    };
  });
  console.log(`median of ${RUNS} runs; in-process CPU is process.cpuUsage() from start() to the last record`);
  console.table(rows);
}

if (process.argv[2] === "--child") {
  await child(process.argv[3] ?? "", process.argv[4] ?? "", process.argv[5] ?? "", Number(process.argv[6]));
} else {
  await main();
}
