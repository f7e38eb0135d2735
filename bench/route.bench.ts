// Route stage throughput: the byte-scan extractor against JSON.parse + lookup, and the whole router.route.
// Usage: node_modules/.bin/node bench/route.bench.ts [records]   (default 200000)
import { nestingDepthExceeds } from "../runtime/src/route/depth.ts";
import { compileExtractor } from "../runtime/src/route/extract.ts";
import { createRouter } from "../runtime/src/route/router.ts";

const RECORDS = Number(process.argv[2] ?? 200_000);
const RUNS = 7;
const FIELDS = ["_org_id", "event_type"];

let seed = 42;
function rnd(): number {
  seed = (seed * 1103515245 + 12345) & 0x7fffffff;
  return seed / 0x80000000;
}
const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)] as T;
const hex = (n: number) => Array.from({ length: n }, () => Math.floor(rnd() * 16).toString(16)).join("");
const ip = () => [10, Math.floor(rnd() * 256), Math.floor(rnd() * 256), Math.floor(rnd() * 256)].join(".");

const orgs = Array.from({ length: 50 }, (_, i) => `org-${i.toString(36)}-${hex(4)}`);
const events = ["login", "logout", "http_request", "file_access", "dns_query", "auth_failure", "config_change"];
const sources = ["cisco_ios.log", "nginx.access", "okta.system", "aws.cloudtrail", "linux.auditd"];
const words = "the quick brown fox jumps over lazy dog request accepted denied user session token".split(" ");

/** One realistic event of about 650-700 bytes: ~20 top-level fields, nested objects, an array, escapes. */
function record(i: number): string {
  const doc = {
    timestamp: new Date(1_760_000_000_000 + i * 37).toISOString(),
    _source: pick(sources),
    host: `host-${Math.floor(rnd() * 500)}.example.net`,
    severity: pick(["info", "warning", "error", "debug"]),
    user: { id: Math.floor(rnd() * 1e6), name: `user${Math.floor(rnd() * 1e4)}` },
    src: { ip: ip(), port: Math.floor(rnd() * 65535) },
    dst: { ip: ip(), port: pick([22, 80, 443, 8080]) },
    http: { method: pick(["GET", "POST", "PUT"]), status: pick([200, 301, 403, 404, 500]), url: `/api/${hex(8)}` },
    _org_id: pick(orgs),
    geo: { country: pick(["US", "DE", "JP", "BR"]), city: pick(["Austin", "Köln", "東京", "Recife"]) },
    duration_ms: Math.round(rnd() * 1e5) / 100,
    bytes: Math.floor(rnd() * 1e7),
    success: rnd() < 0.9,
    tags: [pick(words), pick(words)],
    trace_id: hex(32),
    span_id: hex(16),
    event_type: pick(events),
    session_id: hex(24),
    labels: { env: pick(["prod", "staging"]), team: pick(["core", "edge", "data"]) },
    message: "",
  };
  // A free-text message, with a quote and a tab to escape, brings the record to 650-700 bytes.
  const room = 650 + Math.floor(rnd() * 50) - JSON.stringify(doc).length;
  let msg = 'said "hi"\t';
  while (JSON.stringify(msg).length - 2 < room) msg += pick(words) + " ";
  doc.message = msg.slice(0, msg.length - (JSON.stringify(msg).length - 2 - room));
  return JSON.stringify(doc);
}

// One block with subarray views, as the transport hands over slices of a fetch response.
const texts = Array.from({ length: RECORDS }, (_, i) => record(i));
const block = Buffer.from(texts.join(""), "utf8");
const records: Buffer[] = [];
for (let off = 0, i = 0; i < RECORDS; i++) {
  const len = Buffer.byteLength(texts[i] as string);
  records.push(block.subarray(off, off + len));
  off += len;
}
const meanBytes = block.length / RECORDS;

const extractor = compileExtractor(FIELDS);
const out: (string | undefined)[] = [];
const router = createRouter({ mode: "expression", fields: FIELDS, defaultSegment: "default" });

function lookup(doc: unknown, path: string): unknown {
  let v = doc;
  for (const k of path.split(".")) {
    if (typeof v !== "object" || v === null || Array.isArray(v)) return undefined;
    v = (v as Record<string, unknown>)[k];
  }
  return v;
}

let sink = 0;
const variants: [string, () => void][] = [
  [
    "(a) byte-scan extractor",
    () => {
      for (const r of records) {
        if (extractor.extract(r, out)) sink += (out[0]?.length ?? 0) + (out[1]?.length ?? 0);
      }
    },
  ],
  [
    "(b) JSON.parse + lookup",
    () => {
      for (const r of records) {
        const doc: unknown = JSON.parse(r.toString("utf8"));
        for (const f of FIELDS) sink += String(lookup(doc, f)).length;
      }
    },
  ],
  [
    "(c) router.route",
    () => {
      for (const r of records) {
        const dest = router.route("events", r);
        if (typeof dest === "string") sink += dest.length;
      }
    },
  ],
  [
    "    nestingDepthExceeds alone",
    () => {
      for (const r of records) if (nestingDepthExceeds(r, 64)) sink++;
    },
  ],
];

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const rate = (ms: number) => Math.round(RECORDS / (ms / 1000));
const fmt = (n: number) => n.toLocaleString("en-US");

// The machine may be shared: CPU time of this process is the steadier basis, wall time is shown beside it.
console.log(`route bench: ${fmt(RECORDS)} records, ${meanBytes.toFixed(0)} bytes mean, median of ${RUNS} runs`);
console.log(
  "variant".padEnd(32) +
    "cpu ms".padStart(9) +
    "records/s cpu".padStart(15) +
    "MB/s".padStart(7) +
    "wall ms".padStart(10) +
    "records/s wall".padStart(16),
);
const cpuRates: number[] = [];
const wallRates: number[] = [];
for (const [name, run] of variants) {
  run(); // warm-up: let V8 optimize before timing
  const walls: number[] = [];
  const cpus: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const t0 = process.hrtime.bigint();
    const c0 = process.cpuUsage();
    run();
    const c = process.cpuUsage(c0);
    walls.push(Number(process.hrtime.bigint() - t0) / 1e6);
    cpus.push((c.user + c.system) / 1000);
  }
  const [cpu, wall] = [median(cpus), median(walls)];
  cpuRates.push(rate(cpu));
  wallRates.push(rate(wall));
  console.log(
    name.padEnd(32) +
      cpu.toFixed(0).padStart(9) +
      fmt(rate(cpu)).padStart(15) +
      (block.length / cpu / 1000).toFixed(0).padStart(7) +
      wall.toFixed(0).padStart(10) +
      fmt(rate(wall)).padStart(16),
  );
}
const ratio = (rates: number[], i: number, j: number) => ((rates[i] as number) / (rates[j] as number)).toFixed(2);
console.log(`ratio a/b (scan vs JSON.parse): ${ratio(cpuRates, 0, 1)}x cpu, ${ratio(wallRates, 0, 1)}x wall`);
console.log(
  `ratio c/b (whole route vs JSON.parse alone): ${ratio(cpuRates, 2, 1)}x cpu, ${ratio(wallRates, 2, 1)}x wall`,
);
const stats = router.drainStats();
console.log(`router over all runs: ${stats.errors} errors, ${stats.fallbacks.size} fields fell back (expect 0 and 0)`);
// Keeps every variant's result observable, so none of the loops can be optimized away.
if (sink === 0) console.log("no values seen");
