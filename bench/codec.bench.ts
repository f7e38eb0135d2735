// Compression throughput per codec at its default level, over generated JSON lines flushed 1 MiB at a time, one flush
// in flight and two (the pipeline's two cores), beside the reference `zstd -3 -T1` over the same bytes.
// Usage: node_modules/.bin/node bench/codec.bench.ts [corpus MB, default 200]
// MB is 10^6 bytes of uncompressed input; ratio is input / output. MB per CPU-s counts every thread's CPU (for the
// CLI, its own), so it holds on a shared, loaded machine where MB/s by the wall clock does not.

import { spawn } from "node:child_process";
import { closeSync, mkdtempSync, openSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { CODEC_NAMES, createCodec, type Codec } from "../runtime/src/codec/index.ts";
import { random } from "../e2e/support/random.ts";

const CORPUS_BYTES = Number(process.argv[2] ?? 200) * 1e6;
const FLUSH_BYTES = 1 << 20;

// Service logs of the kind an archiver sees: repeated keys and vocabularies, ids and numbers that do not repeat.
function corpus(bytes: number): { data: Buffer; lines: number } {
  const next = random(42);
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(xs: readonly T[]): T => xs[int(xs.length)] as T;
  const hex = (n: number) => {
    let s = "";
    while (s.length < n)
      s += int(2 ** 32)
        .toString(16)
        .padStart(8, "0");
    return s.slice(0, n);
  };
  const services = ["checkout", "payments", "search", "inventory", "auth", "gateway", "notifications", "catalog"];
  const methods = ["GET", "GET", "GET", "POST", "PUT", "DELETE"];
  const resources = ["orders", "users", "carts", "products", "sessions", "invoices"];
  const statuses = [200, 200, 200, 200, 201, 204, 304, 400, 404, 500, 503];
  const levels = ["info", "info", "info", "warn", "error", "debug"];
  const agents = [
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/124.0 Safari/537.36",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148",
    "okhttp/4.12.0",
    "python-requests/2.31.0",
    "Go-http-client/2.0",
  ];
  const countries = ["DE", "FR", "US", "GB", "NL", "ES", "IT", "PL", "SE", "BR", "JP", "IN"];
  const words =
    "the order was accepted retried after timeout cache miss upstream replied slowly token refreshed for user \
payment authorised inventory reserved shipment queued validation failed on field connection reset by peer".split(" ");
  const out = Buffer.allocUnsafe(bytes + 4096);
  let at = 0;
  let lines = 0;
  let t = Date.UTC(2025, 0, 1);
  while (at < bytes) {
    t += int(40);
    const service = pick(services);
    const line = JSON.stringify({
      "@timestamp": new Date(t).toISOString(),
      service,
      host: `${service}-${int(40)}.eu-west-1.internal`,
      level: pick(levels),
      trace_id: hex(32),
      span_id: hex(16),
      http: {
        method: pick(methods),
        path: `/api/v2/${pick(resources)}/${int(1e7)}`,
        status: pick(statuses),
        duration_ms: Math.round(next() * 900_000) / 1000,
        response_bytes: int(200_000),
        user_agent: pick(agents),
      },
      client: { ip: `10.${int(256)}.${int(256)}.${int(256)}`, country: pick(countries) },
      user: { id: `u_${int(500_000)}`, plan: pick(["free", "pro", "enterprise"]) },
      message: Array.from({ length: 6 + int(14) }, () => pick(words)).join(" "),
      k8s: {
        namespace: `prod-${service}`,
        pod: `${service}-${hex(10)}-${hex(5)}`,
        node: `ip-10-0-${int(64)}-${int(256)}`,
      },
      tags: ["env:prod", `region:eu-west-${1 + int(3)}`, `version:1.${int(30)}.${int(10)}`],
    });
    at += out.write(line, at, "latin1");
    out[at++] = 0x0a;
    lines++;
  }
  return { data: out.subarray(0, at), lines };
}

/** Cuts the corpus into flushes of at most 1 MiB that end at a line, as a hot buffer flushes whole records. */
function flushes(data: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let start = 0; start < data.length;) {
    const end = start + FLUSH_BYTES >= data.length ? data.length : data.lastIndexOf(0x0a, start + FLUSH_BYTES - 1) + 1;
    out.push(data.subarray(start, end));
    start = end;
  }
  return out;
}

interface Run {
  /** Input MB per wall-clock second. */
  mbps: number;
  /** Input MB per CPU second, all threads: what a shared, loaded machine cannot distort. */
  cpuMbps: number;
  ratio: number;
  /** The main thread's CPU as a share of wall time: how much of the event loop compression takes. */
  mainCpu: number;
}

const cpuSeconds = (u: NodeJS.CpuUsage) => (u.user + u.system) / 1e6;

async function measure(codec: Codec, batches: readonly Buffer[], inFlight: number): Promise<Run> {
  let next = 0;
  let input = 0;
  let output = 0;
  const lane = async () => {
    while (next < batches.length) {
      const batch = batches[next++] as Buffer;
      const frame = await codec.compress(batch);
      input += batch.length;
      output += frame.length;
    }
  };
  const main0 = process.threadCpuUsage();
  const all0 = process.cpuUsage();
  const t0 = performance.now();
  await Promise.all(Array.from({ length: inFlight }, lane));
  const seconds = (performance.now() - t0) / 1000;
  return {
    mbps: input / 1e6 / seconds,
    cpuMbps: input / 1e6 / cpuSeconds(process.cpuUsage(all0)),
    ratio: input / output,
    mainCpu: cpuSeconds(process.threadCpuUsage(main0)) / seconds,
  };
}

/** `zstd -3 -T1` over the corpus file on stdin, output counted by wc; bash's `times` gives the children's CPU. */
async function zstdCli(src: string, bytes: number): Promise<Run> {
  const stdin = openSync(src, "r");
  try {
    const t0 = performance.now();
    const stdout = await new Promise<string>((resolve, reject) => {
      const script = "set -o pipefail; zstd -3 -T1 -c -q | wc -c && times";
      const child = spawn("bash", ["-c", script], { stdio: [stdin, "pipe", "inherit"] });
      let text = "";
      child.stdout?.on("data", (chunk: Buffer) => (text += chunk.toString()));
      child.on("error", reject);
      child.on("close", (code) => (code === 0 ? resolve(text) : reject(new Error(`zstd -3 -T1 exited ${code}`))));
    });
    const seconds = (performance.now() - t0) / 1000;
    // wc's count, then `times`: the shell's own user and sys, then its children's (zstd and wc).
    const [count = "", , children = ""] = stdout.trim().split("\n");
    const cpu = [...children.matchAll(/(\d+)m([\d.]+)s/g)].reduce((t, m) => t + Number(m[1]) * 60 + Number(m[2]), 0);
    return {
      mbps: bytes / 1e6 / seconds,
      cpuMbps: bytes / 1e6 / cpu,
      ratio: bytes / Number(count),
      mainCpu: Number.NaN,
    };
  } finally {
    closeSync(stdin);
  }
}

const { data, lines } = corpus(CORPUS_BYTES);
const batches = flushes(data);
console.log(
  `corpus ${(data.length / 1e6).toFixed(0)} MB, ${batches.length} flushes of <= 1 MiB, ` +
    `~${Math.round(data.length / lines)} B/line; load average ${loadavg()[0]?.toFixed(1)}`,
);
console.log("codec   level  ratio   1 in flight  2 in flight   MB per CPU-s  main thread (2 in flight)");
const fmt = (n: number, w: number, d = 0) => n.toFixed(d).padStart(w);
const row = (name: string, level: string, one: Run, two?: Run) =>
  console.log(
    `${name.padEnd(7)} ${level.padStart(5)} ${fmt(one.ratio, 6, 2)} ${fmt(one.mbps, 7)} MB/s ` +
      (two ? `${fmt(two.mbps, 7)} MB/s` : " ".repeat(12)) +
      ` ${fmt(one.cpuMbps, 9)}` +
      (two ? `       ${fmt(two.mainCpu * 100, 3)}% of wall` : "       zstd -3 -T1, one stream"),
  );
// The CLI runs just before and just after node's zstd, so a shared machine's changing load shows as a spread.
const dir = mkdtempSync(join(tmpdir(), "codec-bench-"));
const corpusFile = join(dir, "corpus.jsonl");
writeFileSync(corpusFile, data);
const cli = [await zstdCli(corpusFile, data.length)];
let nodeZstd: Run | undefined;
for (const name of CODEC_NAMES) {
  const codec = createCodec(name);
  await measure(codec, batches.slice(0, 8), 2); // warm: starts workers, lets the JIT settle
  const one = await measure(codec, batches, 1);
  const two = await measure(codec, batches, 2);
  if (name === "zstd") {
    nodeZstd = one;
    cli.push(await zstdCli(corpusFile, data.length));
  }
  row(name, String(codec.level ?? "-"), one, two);
}
rmSync(dir, { recursive: true, force: true });
for (const run of cli) row("zstd", "CLI", run);
if (nodeZstd) {
  const wall = Math.max(...cli.map((r) => r.mbps));
  const cpu = Math.max(...cli.map((r) => r.cpuMbps));
  console.log(
    `node-zstd / CLI, 1 in flight against the better CLI run: ${(nodeZstd.mbps / wall).toFixed(2)} by wall clock, ` +
      `${(nodeZstd.cpuMbps / cpu).toFixed(2)} by CPU`,
  );
}
