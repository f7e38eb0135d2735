// Many destinations under a memory limit, beside the 1,000-destination rate of the same run: 10,000 destinations
// with even traffic, 100,000 (a long tail: about 20 records each), and a skewed workload (orgs by a Zipf law,
// s = 1.1, over 10,000 orgs x 10 event types). Every row runs under DFE_ARCHIVER_MEMORY_LIMIT_BYTES = 512 MiB but the
// reference, which runs unconstrained as the pipeline bench's headline does; the 1,000-destination row under the
// limit is there too, so the limit's own cost is seen apart from the destinations'. Per row: the rate and its ratio
// to the reference, peak RSS, held-offset bytes per record, flushes, files written with their median and p10 size,
// and the compression ratio against the 1,000-destination row. A sample of each row's files is read whole by the zstd
// CLI, so the files stay standard. Beside each row, the files alone: bench/files-floor.ts makes the row's archive
// tree again with no records behind it (each file written, synced and named, each directory synced), the part of the
// row's time this disk takes whatever the runtime does.
// Usage: node bench/destinations.bench.ts [records] [rows] [rounds]   (default 2,000,000 records of about 700 bytes;
// rows: a comma list of ref,1k,10k,zipf,100k, default all, the reference always in; rounds: default 3)
// DFE_BENCH_KEEP_TREES=1 leaves the run's archive trees in place (their path is printed) and waits for no earlier
// removal: for runs back to back, whose trees are removed by hand once done (see diskRest).
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { homedir, tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { nodeBin } from "../e2e/support/archiver.ts";
import {
  cpuByThread,
  createTopic,
  deleteTopics,
  median,
  produceFile,
  runArchiver,
  uniformKeys,
  writeData,
  zipfKeys,
  type KeyPick,
  type RunResult,
} from "./support.ts";

const N = Number(process.argv[2] ?? 2_000_000);
const ROUNDS = Number(process.argv[4] ?? 3);
const LIMIT = 512 * 1024 * 1024;
const KEEP = process.env.DFE_BENCH_KEEP_TREES === "1";
const work = mkdtempSync(join(tmpdir(), "dfe-bench-dest-"));
/** When this bench last removed its trees (epoch ms, in the file): see diskRest. */
const REMOVED_AT = join(
  process.env.DFE_ARCHIVER_CACHE ?? join(homedir(), ".cache", "dfe-archiver"),
  "bench-removed-at",
);
/**
 * How long a removal skews the next run (see diskProbe): 360 s, because the next run's own creates dirty the inode
 * table blocks again. 45-70 s after a run removed its trees, perf put 5.2 of the 10,000-destination row's 8.9 CPU s of
 * mkdir in find_inode_bit and recently_deleted, and the row took 17.95-19.01 s; six minutes on, with neither in the
 * profile, 13.09 s.
 */
const REST_MS = 360_000;

interface Workload {
  readonly name: string;
  readonly pick: KeyPick;
  readonly orgs: number;
  readonly types: number;
}

interface Row {
  readonly what: string;
  /** Its name on the command line. */
  readonly key: string;
  readonly workload: Workload;
  readonly limited: boolean;
  /** The rate's goal as a share of the reference's, when the issue sets one. */
  readonly goal?: number;
  readonly runs: RunResult[];
  topic?: string;
  rawBytes?: number;
}

const workloads = {
  k1: { name: "1,000 destinations (100 orgs x 10 types)", pick: uniformKeys(100, 10), orgs: 100, types: 10 },
  k10: { name: "10,000 destinations (1,000 orgs x 10 types)", pick: uniformKeys(1000, 10), orgs: 1000, types: 10 },
  k100: {
    name: "100,000 destinations (10,000 orgs x 10 types)",
    pick: uniformKeys(10_000, 10),
    orgs: 10_000,
    types: 10,
  },
  zipf: { name: "Zipf s=1.1 over 10,000 orgs x 10 types", pick: zipfKeys(10_000, 10, 1.1), orgs: 10_000, types: 10 },
} satisfies Record<string, Workload>;

/** Complete archive files under `dir` (a file still being written has a hidden name), with their sizes. */
function archiveFiles(dir: string): { path: string; size: number }[] {
  const out: { path: string; size: number }[] = [];
  for (const rel of readdirSync(dir, { recursive: true, encoding: "utf8" })) {
    if (!rel.endsWith(".zst") || rel.split("/").some((seg) => seg.startsWith("."))) continue;
    const path = join(dir, rel);
    out.push({ path, size: statSync(path).size });
  }
  return out;
}

const quantile = (sorted: readonly number[], q: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;

/** Reads `sample` files whole with the zstd CLI and counts their lines: files of complete frames, every record in. */
function checkStandard(files: readonly { path: string }[], sample: number): number {
  const step = Math.max(1, Math.floor(files.length / sample));
  let lines = 0;
  for (let i = 0; i < files.length; i += step) {
    const out = execFileSync("zstd", ["-dc", "--", (files[i] as { path: string }).path], { maxBuffer: 1 << 30 });
    for (let at = out.indexOf(0x0a); at >= 0; at = out.indexOf(0x0a, at + 1)) lines++;
  }
  return lines;
}

/**
 * What bench/files-floor.ts takes to make `files` (paths relative to the tree's root) under a new directory, with the
 * runtime's libuv pool size; the tree is removed after unless `keep`.
 */
function filesFloor(
  files: readonly { rel: string; size: number }[],
  keep = false,
): { files: number; dirs: number; seconds: number } {
  const list = join(work, "files.txt");
  writeFileSync(list, files.map((f) => `${f.size} ${f.rel}\n`).join(""));
  const root = mkdtempSync(join(work, "floor-"));
  const out = execFileSync(nodeBin, [join(import.meta.dirname, "files-floor.ts"), list, root], {
    env: { ...process.env, UV_THREADPOOL_SIZE: "16" },
    encoding: "utf8",
  });
  if (!keep && !KEEP) rmSync(root, { recursive: true, force: true });
  rmSync(list);
  return JSON.parse(out) as { files: number; dirs: number; seconds: number };
}

/** Seconds to make `files` (under `dir`) again: the file system's floor under a row. */
function filesAlone(dir: string, files: readonly { path: string; size: number }[]): number {
  return filesFloor(files.map((f) => ({ rel: relative(dir, f.path), size: f.size }))).seconds;
}

/**
 * The disk's cost for a new directory now, from 1,000 small files in a tree of the rows' shape (5,100 directories).
 * On an ext4 without a journal (this machine's), a new inode skips every inode freed in the last 60 s (360 s while
 * its inode table block is unwritten), each looked up in the buffer cache: after a run removed a tree of 50,000
 * directories, a directory cost 120-400 us of kernel CPU instead of about 25, and the 10,000-destination row's libuv
 * pool took 8 to 17 CPU s. The probe's tree stays until the bench ends, so it frees no inode before the rows.
 */
function diskProbe(): string {
  const files = Array.from({ length: 1000 }, (_, i) => ({ rel: `o${i % 100}/t${i}/2026/12/07/10/f.zst`, size: 4096 }));
  const r = filesFloor(files, true);
  return `${r.files} files in ${r.dirs} directories, ${r.seconds.toFixed(2)} s (${((r.seconds * 1e6) / r.dirs).toFixed(0)} us of wall a directory)`;
}

/** Waits out what remains of REST_MS since this bench last removed its trees (other removals are not known here). */
async function diskRest(): Promise<void> {
  if (KEEP) return;
  let at: number;
  try {
    at = Number(readFileSync(REMOVED_AT, "utf8"));
  } catch {
    return;
  }
  const wait = at + REST_MS - Date.now();
  if (!(wait > 0)) return;
  console.log(
    `waiting ${(wait / 1000).toFixed(0)} s: the last run removed its trees ${((Date.now() - at) / 1000).toFixed(0)} s ago, and new inodes skip freed ones for ${REST_MS / 1000} s on an ext4 without a journal (DFE_BENCH_KEEP_TREES=1 keeps the trees instead)`,
  );
  await sleep(wait);
}

async function main(): Promise<void> {
  await diskRest();
  console.log(`workload: ${N} records of about 700 bytes, zstd -3, local files, expression routing`);
  const all: Row[] = [
    { what: "1,000 destinations, no limit (reference)", key: "ref", workload: workloads.k1, limited: false, runs: [] },
    { what: "1,000 destinations", key: "1k", workload: workloads.k1, limited: true, runs: [] },
    { what: "10,000 destinations", key: "10k", workload: workloads.k10, limited: true, goal: 0.5, runs: [] },
    {
      what: "Zipf s=1.1, 10,000 orgs x 10 types",
      key: "zipf",
      workload: workloads.zipf,
      limited: true,
      goal: 0.7,
      runs: [],
    },
    { what: "100,000 destinations", key: "100k", workload: workloads.k100, limited: true, runs: [] },
  ];
  const picked = new Set(["ref", ...(process.argv[3] ?? all.map((r) => r.key).join(",")).split(",")]);
  const unknown = [...picked].filter((k) => !all.some((r) => r.key === k));
  if (unknown.length > 0)
    throw new Error(`unknown rows ${unknown.join(", ")}: pick from ${all.map((r) => r.key).join(",")}`);
  const rows = all.filter((r) => picked.has(r.key));
  const topics = new Map<Workload, { topic: string; bytes: number }>();
  for (const w of new Set(rows.map((r) => r.workload))) {
    const data = join(work, "data.jsonl");
    const bytes = await writeData(data, N, w.orgs, w.types, w.pick);
    const topic = await createTopic();
    produceFile(topic, data, ["-X", "linger.ms=50"]);
    rmSync(data);
    topics.set(w, { topic, bytes });
    console.log(`produced ${w.name}: ${(bytes / 1e6).toFixed(0)} MB`);
  }
  // Written back now, so no run's fsyncs wait behind the broker's dirty pages (see pipeline.bench.ts).
  execFileSync("sync");
  console.log(`disk probe: ${diskProbe()}`);
  const env = { DFE_ARCHIVER_MEMORY_LIMIT_BYTES: String(LIMIT) };
  // Alternating rows within each round: the machine's speed drifts over minutes, and a ratio is taken within a round.
  for (let round = 0; round < ROUNDS; round++) {
    for (const row of rows) {
      const { topic } = topics.get(row.workload) as { topic: string };
      // Interval rolls off: every file here rolls on size or at the drain, so file counts are the mechanism's own.
      const r = await runArchiver(work, topic, N, row.limited ? { env } : {});
      row.runs.push(r);
      console.log(
        `round ${round + 1}: ${row.what}: ${r.seconds.toFixed(2)} s, every record received at ${r.receivedSeconds.toFixed(2)} s, ${r.flushes} flushes`,
      );
    }
  }
  const ref = rows[0] as Row;
  const refSeconds = median(ref.runs.map((r) => r.seconds));
  const stats = rows.map((row) => {
    // The files of the round whose time was the median.
    const mid = [...row.runs].sort((a, b) => a.seconds - b.seconds)[Math.floor(row.runs.length / 2)] as RunResult;
    const files = archiveFiles(join(mid.dir, "archive"));
    const alone = filesAlone(join(mid.dir, "archive"), files);
    const sizes = files.map((f) => f.size).sort((a, b) => a - b);
    const compressed = sizes.reduce((a, b) => a + b, 0);
    const raw = topics.get(row.workload)?.bytes ?? 0;
    const lines = checkStandard(files, 20);
    return { row, mid, files: files.length, sizes, compressed, raw, lines, alone };
  });
  // The reference is 1,000 destinations too.
  const baseRatio = (stats[0]?.raw ?? 0) / (stats[0]?.compressed ?? 1);
  console.log(
    "\n| what | seconds | k records/s | rate / reference | goal | peak RSS MiB | held B/record | flushes | files | files alone s | median file KB | p10 file KB | compression | vs 1,000 |",
  );
  console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
  for (const s of stats) {
    const seconds = median(s.row.runs.map((r) => r.seconds));
    // The median over rounds of each round's ratio to that round's reference.
    const ratio = median(s.row.runs.map((r, i) => (ref.runs[i]?.seconds ?? 0) / r.seconds));
    const peak = Math.max(...s.row.runs.map((r) => r.peakRss));
    const held = Math.max(...s.row.runs.map((r) => r.heldBytesPerRecord));
    const ratioC = s.raw / s.compressed;
    const goal =
      s.row.goal === undefined ? "" : `>= ${s.row.goal.toFixed(2)} ${ratio >= s.row.goal ? "met" : "NOT met"}`;
    console.log(
      `| ${s.row.what}${s.row.limited ? ", 512 MiB limit" : ""} | ${seconds.toFixed(2)} | ${(N / seconds / 1e3).toFixed(0)} | ${ratio.toFixed(2)} | ${goal} | ${(peak / 1048576).toFixed(0)}${s.row.limited && peak >= LIMIT ? " OVER" : ""} | ${held.toFixed(3)} | ${s.mid.flushes} | ${s.files} | ${s.alone.toFixed(1)} (${((100 * s.alone) / seconds).toFixed(0)}%) | ${(quantile(s.sizes, 0.5) / 1024).toFixed(1)} | ${(quantile(s.sizes, 0.1) / 1024).toFixed(1)} | ${ratioC.toFixed(2)} | ${(ratioC / baseRatio).toFixed(2)} |`,
    );
  }
  // On a machine of two cores every thread's CPU costs the rate: the row's CPU beside the reference's is what a
  // change must cut, wherever its wall time falls on a busy machine.
  const refCpu = stats[0]?.mid.cpu ?? 0;
  console.log("\nCPU s by thread, each row's median round:");
  for (const s of stats) {
    console.log(
      `- ${s.row.what}: ${s.mid.cpu.toFixed(2)} (${(s.mid.cpu / refCpu).toFixed(2)}x the reference's): ${cpuByThread(s.mid)}`,
    );
  }
  console.log(
    `\nreference: ${refSeconds.toFixed(2)} s median; rounds (s): ${rows.map((r) => `${r.what}: ${r.runs.map((x) => x.seconds.toFixed(2)).join(", ")}`).join("; ")}`,
  );
  console.log(
    `standard files: ${stats.map((s) => `${s.row.what}: ${s.lines} records read back by zstd -dc from a sample of its ${s.files} files`).join("; ")}`,
  );
  await deleteTopics();
  if (KEEP) {
    console.log(`trees kept in ${work}`);
    return;
  }
  rmSync(work, { recursive: true, force: true });
  // The inode tables written back: inodes freed here are skipped for 60 s, not 360, until a new create dirties them.
  execFileSync("sync");
  mkdirSync(dirname(REMOVED_AT), { recursive: true });
  writeFileSync(REMOVED_AT, String(Date.now()));
}

await main();
