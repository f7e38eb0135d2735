// Shared by the runtime benchmarks: the workload (about 700-byte JSON records over orgs x event types, produced with
// kcat in lz4 batches) and a run of the real runtime as a child process, measured from outside (/proc and /metrics).
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { createWriteStream, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { once } from "node:events";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { stringify } from "yaml";
import { kafka, need, uniqueName } from "../e2e/support/testbed.ts";
import { freePort, nodeBin, sumMetric } from "../e2e/support/archiver.ts";

export const PARTITIONS = 6;
export const MB = 1e6;

/**
 * The runtime as the image runs it: the build in dist/ (npm run bench builds it first). The sources run through Node's
 * type stripping, which the image never does: 60-90 ms of CPU in each isolate at start, on the event loop and on each
 * lane, 5% of the 2M-record run's wall time on a 2-core machine.
 */
const builtMain = join(import.meta.dirname, "..", "dist/runtime/src/main.js");

/** Refuses a missing build, or one older than a source file, so no bench measures code that is not the checkout's. */
function checkBuild(): void {
  const sources = join(import.meta.dirname, "..", "runtime/src");
  let built: number;
  try {
    built = statSync(builtMain).mtimeMs;
  } catch {
    throw new Error(`${builtMain} is missing: run npm run build (npm run bench builds it)`);
  }
  const stale = readdirSync(sources, { recursive: true, encoding: "utf8" }).find(
    (f) => f.endsWith(".ts") && statSync(join(sources, f)).mtimeMs > built,
  );
  if (stale !== undefined) throw new Error(`runtime/src/${stale} is newer than ${builtMain}: run npm run build`);
}

/** Which destination record i goes to: its org and event type. */
export type KeyPick = (i: number) => { org: number; type: number };

/** Every (org, type) pair in turn, so the traffic is even over orgs x types destinations. */
export function uniformKeys(orgs: number, types: number): KeyPick {
  // The type advances once per `orgs` records, so every (org, type) pair occurs.
  return (i) => ({ org: (i * 7919) % orgs, type: Math.floor(i / orgs) % types });
}

/**
 * Orgs by a Zipf law of exponent `s` (org k's share of the records goes as 1/k^s), each org's event types even: the
 * way real tenants look, a few large and a long tail. Seeded, so every run produces the same records.
 */
export function zipfKeys(orgs: number, types: number, s: number, seed = 1): KeyPick {
  const cdf = new Float64Array(orgs);
  let sum = 0;
  for (let k = 0; k < orgs; k++) cdf[k] = sum += 1 / Math.pow(k + 1, s);
  for (let k = 0; k < orgs; k++) cdf[k] = (cdf[k] ?? 0) / sum;
  let state = seed >>> 0 || 1;
  const next = (): number => {
    // xorshift32
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 4294967296;
  };
  return () => {
    const u = next();
    let lo = 0;
    let hi = orgs - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((cdf[mid] ?? 1) < u) lo = mid + 1;
      else hi = mid;
    }
    return { org: lo, type: Math.floor(next() * types) };
  };
}

export function makeRecord(i: number, pick: KeyPick): string {
  const key = pick(i);
  const base = {
    _org_id: `org-${key.org}`,
    event_type: `type-${key.type}`,
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

/** Writes `count` records as JSON lines, by default even over orgs x types destinations; returns their bytes. */
export async function writeData(
  file: string,
  count: number,
  orgs: number,
  types: number,
  pick: KeyPick = uniformKeys(orgs, types),
): Promise<number> {
  const out = createWriteStream(file);
  let bytes = 0;
  for (let i = 0; i < count; i++) {
    const line = makeRecord(i, pick) + "\n";
    bytes += line.length;
    if (!out.write(line)) await once(out, "drain");
  }
  out.end();
  await once(out, "finish");
  return bytes;
}

export async function createTopic(): Promise<string> {
  const topic = uniqueName("bench");
  const admin = kafka().admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions: PARTITIONS }], waitForLeaders: true });
  await admin.disconnect();
  created.push(topic);
  return topic;
}

/** Topics createTopic made in this process, deleted by deleteTopics. */
const created: string[] = [];

/**
 * Deletes the topics this process created (call as a bench ends): each holds up to 1.4 GB, and a hundred runs left on
 * the testbed's broker filled the disk under it.
 */
export async function deleteTopics(): Promise<void> {
  const topics = created.splice(0);
  if (topics.length === 0) return;
  const admin = kafka().admin();
  await admin.connect();
  try {
    await admin.deleteTopics({ topics });
  } finally {
    await admin.disconnect();
  }
}

/** Produces a JSON-lines file to a new topic with kcat, lz4 batches. */
export function produceFile(topic: string, file: string, extra: string[] = []): void {
  execFileSync("kcat", ["-P", "-b", need("TESTBED_KAFKA_BROKERS"), "-t", topic, "-z", "lz4", ...extra, "-l", file]);
}

/** CPU seconds (user + system) in a /proc stat file of a process or one of its threads. */
function cpuSeconds(statPath: string): number {
  const stat = readFileSync(statPath, "utf8").split(") ")[1]?.split(" ") ?? [];
  return (Number(stat[11]) + Number(stat[12])) / 100;
}

/** CPU seconds so far and peak RSS (VmHWM) of a process (the runtime's, or a peer's in bench/peer.bench.ts). */
export function procStats(pid: number): { cpu: number; rss: number } {
  const cpu = cpuSeconds(`/proc/${pid}/stat`);
  const hwm = /VmHWM:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  return { cpu, rss: Number(hwm ?? 0) * 1024 };
}

/** What each of the runtime's threads is, by the name Linux gives it. */
const THREAD_KINDS: Record<string, ThreadKind> = {
  MainThread: "event loop",
  WorkerThread: "lanes",
  V8Worker: "V8 helpers (GC, compilers)",
  "libuv-worker": "libuv pool (files)",
};
export type ThreadKind = "event loop" | "lanes" | "V8 helpers (GC, compilers)" | "libuv pool (files)" | "other";

/** A run's CPU seconds by kind of thread, largest first: "event loop 9.90, V8 helpers (GC, compilers) 7.89, ...". */
export function cpuByThread(r: Pick<RunResult, "threads">): string {
  return Object.entries(r.threads)
    .sort((a, b) => b[1] - a[1])
    .map(([kind, cpu]) => `${kind} ${cpu.toFixed(2)}`)
    .join(", ");
}

/**
 * Each thread's CPU seconds (user + system) by id, merged into `seen`: a thread that ends (a lane at shutdown) keeps
 * its last reading. The process total alone hid where the time went: V8's GC threads and libuv's pool took a third of
 * it.
 */
function readThreads(pid: number, seen: Map<string, { kind: ThreadKind; cpu: number }>): void {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return;
  }
  for (const tid of tids) {
    try {
      const comm = readFileSync(`/proc/${pid}/task/${tid}/comm`, "utf8").trim();
      seen.set(tid, { kind: THREAD_KINDS[comm] ?? "other", cpu: cpuSeconds(`/proc/${pid}/task/${tid}/stat`) });
    } catch {
      // the thread ended between the listing and the read: its last reading stands
    }
  }
}

const POLL_MIN_MS = 100;
const POLL_MAX_MS = 1000;
/** The last stretch: a run is seen ending within this much of it (see nextPoll). */
const POLL_END_MS = 10;

/**
 * The next scrape: every POLL_MIN_MS until the first record, else half the time the rate so far leaves, at most
 * POLL_MAX_MS, and every POLL_END_MS once that is under POLL_MIN_MS: the run's end is seen when the last scrape sees
 * it, and the time runs until then. A scrape asks for the bench's metrics alone (SCRAPED), about 0.1 ms of the
 * runtime's event loop; the whole registry cost it about 5 ms (its process metrics read /proc/self/fd with a
 * thousand files open, and the heap's spaces), which is why a scrape every 10 ms throughout was out.
 */
function nextPoll(reached: number, count: number, firstSeconds: number, nowSeconds: number): number {
  if (firstSeconds === 0 || reached === 0) return POLL_MIN_MS;
  const leftMs = ((count - reached) / reached) * (nowSeconds - firstSeconds) * 1000;
  if (leftMs / 2 < POLL_MIN_MS) return POLL_END_MS;
  return Math.min(POLL_MAX_MS, leftMs / 2);
}

/** The metrics a run reads, and all a scrape asks the runtime for (its /metrics takes name[] parameters). */
const SCRAPED = [
  "held_records",
  "held_offset_bytes",
  "staged_bytes",
  "uploads_pending",
  "messages_received_total",
  "messages_archived_total",
  "flush_operations_total",
];
const SCRAPE_QUERY = SCRAPED.map((n) => `name[]=${n}`).join("&");

export interface RunResult {
  /** The run's own directory: its config, and its local archive under archive/. */
  dir: string;
  seconds: number;
  /** Until every record was received. */
  receivedSeconds: number;
  /** Until the first record was received: start-up and joining the group. */
  firstSeconds: number;
  cpu: number;
  /** CPU seconds by kind of thread (see THREAD_KINDS), summing to about `cpu`. */
  threads: Partial<Record<ThreadKind, number>>;
  peakRss: number;
  heldBytesPerRecord: number;
  /** The most staged_bytes and uploads_pending seen (object destinations). */
  maxStagedBytes: number;
  maxUploadsPending: number;
  /** flush_operations_total once every record was counted: with more destinations than hot buffers, most evict. */
  flushes: number;
}

export interface RunOptions {
  env?: Record<string, string>;
  client?: string;
  /** archive: keys over the local destination; `dir` is the run's own directory. */
  archive?: (dir: string) => Record<string, unknown>;
  /** buffer: keys over the defaults. */
  buffer?: Record<string, unknown>;
  /** routing: keys over the bench's (expression routing by _org_id and event_type). */
  routing?: Record<string, unknown>;
  /**
   * received (default): the time runs to the clean exit after every record was received, the drain completing the
   * files. archived: the time runs until the store confirmed every record (messages_archived_total), then it stops.
   */
  until?: "received" | "archived";
}

export async function runArchiver(
  workDir: string,
  topic: string,
  count: number,
  o: RunOptions = {},
): Promise<RunResult> {
  const dir = mkdtempSync(join(workDir, "run-"));
  const config = join(dir, "config.yaml");
  writeFileSync(
    config,
    stringify({
      kafka: {
        brokers: need("TESTBED_KAFKA_BROKERS").split(","),
        group_id: uniqueName("bench"),
        topics: [topic],
        ...(o.client === undefined ? {} : { client: o.client }),
      },
      archive: { destination: `file://${join(dir, "archive")}`, ...o.archive?.(dir) },
      buffer: { spool_dir: join(dir, "spool"), ...o.buffer },
      compression: { codec: "zstd", level: 3 },
      routing: { mode: "expression", expression_fields: ["_org_id", "event_type"], ...o.routing },
      dlq: { enabled: false },
      logger: { level: "warn" },
    }),
  );
  const done = o.until === "archived" ? "messages_archived_total" : "messages_received_total";
  const addr = `127.0.0.1:${await freePort()}`;
  checkBuild();
  const t0 = process.hrtime.bigint();
  const proc = spawn(nodeBin, [builtMain, "run", "--config", config, "--metrics-addr", addr], {
    stdio: ["ignore", "inherit", "inherit"],
    env: { ...process.env, ...o.env },
  });
  const pid = proc.pid ?? 0;
  let held = 0;
  let heldBytes = 0;
  let maxStagedBytes = 0;
  let maxUploadsPending = 0;
  let last = { cpu: 0, rss: 0 };
  const threads = new Map<string, { kind: ThreadKind; cpu: number }>();
  let seconds = 0;
  let receivedSeconds = 0;
  let firstSeconds = 0;
  let flushes = 0;
  let wait = POLL_MIN_MS;
  let sampledAt = 0n;
  for (;;) {
    await sleep(wait);
    if (proc.exitCode !== null) throw new Error(`archiver exited ${proc.exitCode}`);
    // The threads' CPU and the RSS at the scrapes' usual pace: reading /proc costs this process too.
    if (Number(process.hrtime.bigint() - sampledAt) >= POLL_MIN_MS * 1e6) {
      sampledAt = process.hrtime.bigint();
      last = procStats(pid);
      readThreads(pid, threads);
    }
    const text = await fetch(`http://${addr}/metrics?${SCRAPE_QUERY}`).then(
      (r) => r.text(),
      () => "",
    );
    const h = sumMetric(text, "held_records");
    if (h > held) {
      held = h;
      heldBytes = sumMetric(text, "held_offset_bytes");
    }
    maxStagedBytes = Math.max(maxStagedBytes, sumMetric(text, "staged_bytes"));
    maxUploadsPending = Math.max(maxUploadsPending, sumMetric(text, "uploads_pending"));
    if (firstSeconds === 0 && sumMetric(text, "messages_received_total") > 0)
      firstSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
    if (receivedSeconds === 0 && sumMetric(text, "messages_received_total") >= count)
      receivedSeconds = Number(process.hrtime.bigint() - t0) / 1e9;
    flushes = Math.max(flushes, sumMetric(text, "flush_operations_total"));
    const reached = sumMetric(text, done);
    if (reached >= count) break;
    wait = nextPoll(reached, count, firstSeconds, Number(process.hrtime.bigint() - t0) / 1e9);
  }
  if (o.until === "archived") seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const code = await stopReading(proc, () => {
    const s = procStats(pid);
    if (s.rss > 0) last = s;
    readThreads(pid, threads);
  });
  if (code !== 0) throw new Error(`archiver exited ${code} after SIGTERM`);
  if (o.until !== "archived") seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  // The run's directory stays until the bench removes workDir at its end. Removed here, its 6,000 inodes slowed the
  // next run's: ext4 without a journal passes over inodes freed in the last 30 s when it allocates (recently_deleted,
  // seen in perf), which put 0.4-2.8 s of system CPU on libuv's pool, against 0.3-0.6 s with nothing removed.
  const byKind: Partial<Record<ThreadKind, number>> = {};
  for (const t of threads.values()) byKind[t.kind] = (byKind[t.kind] ?? 0) + t.cpu;
  return {
    dir,
    seconds,
    receivedSeconds,
    firstSeconds,
    cpu: last.cpu,
    threads: byKind,
    peakRss: last.rss,
    heldBytesPerRecord: held ? heldBytes / held : 0,
    maxStagedBytes,
    maxUploadsPending,
    flushes,
  };
}

/**
 * Sends SIGTERM and calls `read` every 100 ms until the process exits (its /proc readings through its drain);
 * resolves to its exit code.
 */
export async function stopReading(proc: ChildProcess, read: () => void): Promise<number | null> {
  const exited = once(proc, "exit");
  proc.kill("SIGTERM");
  const poll = setInterval(() => {
    try {
      read();
    } catch {
      // gone: the last reading stands
    }
  }, 100);
  const [code] = (await exited) as [number | null];
  clearInterval(poll);
  return code;
}

export const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? 0;
