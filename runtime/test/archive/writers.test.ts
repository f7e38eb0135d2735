import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Counter } from "prom-client";
import { parsePathTemplate, type TemplatePart } from "../../src/archive/path.ts";
import {
  createWriterPool,
  PARKED_PER_WRITER,
  type CompletedFile,
  type WriterPoolOptions,
} from "../../src/archive/writers.ts";
import { ArchiverError, ConfigError } from "../../src/errors.ts";
import { createMetrics } from "../../src/observe/metrics.ts";
import { createFileStore } from "../../src/store/file.ts";
import type { Codec } from "../../src/codec/index.ts";
import { once, type ArchiveFile, type ArchiveStore, type FileMeta, type Retry } from "../../src/store/types.ts";

// ---- an in-memory store whose every step a test can delay or fail ----

interface Hooks {
  open?: (relPath: string) => Promise<void> | void;
  append?: (f: MemFile, frame: Buffer) => Promise<void> | void;
  truncate?: (f: MemFile) => void;
  complete?: (f: MemFile) => Promise<void> | void;
  park?: (f: MemFile) => Promise<void> | void;
}

class MemFile implements ArchiveFile {
  readonly relPath: string;
  readonly #store: MemStore;
  data = Buffer.alloc(0);
  appending = 0;
  maxAppending = 0;
  state: "open" | "done" | "failed" | "abandoned" = "open";
  /** Its descriptor is closed (parked); the next append, truncate or complete opens it again. */
  parked = false;
  /** Times it was opened again after a park (to cut it back or to complete it). */
  reopens = 0;
  /** Frames it took while parked: by its path, with no descriptor kept. */
  parkedAppends = 0;
  meta: FileMeta | undefined;

  constructor(store: MemStore, relPath: string) {
    this.#store = store;
    this.relPath = relPath;
  }

  get size(): number {
    return this.data.length;
  }

  async append(frame: Buffer): Promise<void> {
    assert.equal(this.state, "open", `append to ${this.state} ${this.relPath}`);
    if (this.parked) this.parkedAppends++;
    this.maxAppending = Math.max(this.maxAppending, ++this.appending);
    try {
      await this.#store.hooks.append?.(this, frame);
      this.data = Buffer.concat([this.data, frame]);
    } finally {
      this.appending--;
    }
  }

  async appendCompressed(codec: Codec, raw: readonly Buffer[]): Promise<number> {
    const frame = await codec.compress(Buffer.concat(raw));
    await this.append(frame);
    return frame.length;
  }

  #reopen(): void {
    if (!this.parked) return;
    this.parked = false;
    this.reopens++;
    this.#store.countOpen();
  }

  async park(): Promise<void> {
    assert.equal(this.state, "open");
    await this.#store.hooks.park?.(this);
    this.parked = true;
    this.#store.log.push(`park ${this.relPath}`);
  }

  async truncate(size: number): Promise<void> {
    this.#reopen();
    this.#store.hooks.truncate?.(this);
    this.data = this.data.subarray(0, size);
  }

  /** Its completion is one step a failure can leave to be done again: the hook runs through `retry`. */
  async complete(meta: FileMeta, retry: Retry = once): Promise<void> {
    assert.equal(this.state, "open");
    assert.equal(this.appending, 0, "complete while an append is in flight");
    this.#reopen();
    this.#store.log.push(`complete ${this.relPath}`);
    try {
      await retry(async () => this.#store.hooks.complete?.(this));
    } catch (err) {
      this.state = "failed";
      throw err;
    }
    this.meta = meta;
    this.state = "done";
    this.#store.log.push(`durable ${this.relPath}`);
  }

  async abandon(): Promise<void> {
    this.state = "abandoned";
  }
}

class MemStore implements ArchiveStore {
  readonly kind = "object";
  readonly files: MemFile[] = [];
  readonly log: string[] = [];
  hooks: Hooks = {};
  /** Most files holding a descriptor (open, not parked) at once. */
  maxOpen = 0;

  async open(relPath: string): Promise<ArchiveFile> {
    await this.hooks.open?.(relPath);
    assert.ok(!this.files.some((f) => f.relPath === relPath), `name reused: ${relPath}`);
    const f = new MemFile(this, relPath);
    this.files.push(f);
    this.log.push(`open ${relPath}`);
    this.countOpen();
    return f;
  }

  countOpen(): void {
    this.maxOpen = Math.max(this.maxOpen, this.files.filter((x) => x.state === "open" && !x.parked).length);
  }

  file(prefix: string): MemFile[] {
    return this.files.filter((f) => f.relPath.startsWith(prefix));
  }
}

const turns = async (n = 50) => {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
};

const parts = (template: string): TemplatePart[] => {
  const parsed = parsePathTemplate(template);
  assert.ok("parts" in parsed);
  return parsed.parts;
};

async function value(counter: Counter<string>, labels: Record<string, string> = {}): Promise<number> {
  const { values } = await counter.get();
  const hit = values.find((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l));
  return hit?.value ?? 0;
}

const T0 = Date.UTC(2026, 11, 2, 13, 59, 59);

function setup(over: Partial<WriterPoolOptions<number>> = {}, store: ArchiveStore = new MemStore()) {
  const metrics = createMetrics({ defaultMetrics: false });
  const completed: CompletedFile<number>[] = [];
  let now = T0;
  const pool = createWriterPool<number>({
    store,
    parts: parts("{year}/{month}/{day}/{hour}"),
    codecSuffix: ".zst",
    rollSizeBytes: 1 << 20,
    rollIntervalSecs: 300,
    maxWriters: 8,
    instanceId: "k3x9a2",
    codecName: "zstd",
    metrics,
    onComplete: (f) => completed.push(f),
    now: () => now,
    ...over,
  });
  return { pool, metrics, completed, advance: (ms: number) => (now += ms) };
}

const frame = (s: string) => Buffer.from(s);

// ---- naming ----

test("a file is named <destination>/<template>-<seq>-<writer id><extension><codec suffix>, UTC at its open time", async () => {
  const store = new MemStore();
  const { pool, advance } = setup({ rollSizeBytes: 1 }, store);
  await pool.append("events/acme/login", frame("a"), 1, 1, 0);
  advance(2000); // into the next hour: the second file's template expands at its own open time
  await pool.append("events/acme/login", frame("b"), 1, 1, 1);
  await pool.append("events/acme/logout", frame("c"), 1, 1, 2);
  await pool.closeAll();
  assert.deepEqual(
    store.files.map((f) => f.relPath),
    [
      "events/acme/login/2026/12/02/13-000001-k3x9a2_1.jsonl.zst",
      "events/acme/login/2026/12/02/14-000002-k3x9a2_1.jsonl.zst",
      "events/acme/logout/2026/12/02/14-000001-k3x9a2_2.jsonl.zst",
    ],
  );
});

test("every token expands, and the extension and suffix are the caller's", async () => {
  const store = new MemStore();
  const { pool } = setup(
    { parts: parts("{timestamp}/{minute}_{seq}"), extension: ".ndjson", codecSuffix: ".lz4", rollSizeBytes: 1 },
    store,
  );
  await pool.append("logs", frame("a"), 1, 1, 0);
  await pool.append("logs", frame("b"), 1, 1, 1);
  await pool.closeAll();
  assert.deepEqual(
    store.files.map((f) => f.relPath),
    ["logs/1796219999/59_000001-000001-k3x9a2_1.ndjson.lz4", "logs/1796219999/59_000002-000002-k3x9a2_1.ndjson.lz4"],
  );
});

test("two replicas, or a parked file rolled beside its destination's next file, never pick the same name", async () => {
  const store = new MemStore();
  const a = setup({ maxWriters: 1, instanceId: "aaaaaa", rollIntervalSecs: 60 }, store);
  const b = setup({ instanceId: "bbbbbb" }, store);
  let releaseClose!: () => void;
  const closeHeld = new Promise<void>((r) => (releaseClose = r));
  store.hooks.complete = (f) => (f.relPath.startsWith("d/") && f.relPath.includes("aaaaaa_1.") ? closeHeld : undefined);
  await a.pool.append("d", frame("1"), 1, 1, 0);
  await b.pool.append("d", frame("2"), 1, 1, 1);
  await a.pool.append("e", frame("3"), 1, 1, 2); // parks d's writer
  a.advance(61_000);
  a.pool.tick(); // d's parked file rolls, its complete held
  const again = a.pool.append("d", frame("4"), 1, 1, 3); // d's next file, behind that roll
  await turns();
  releaseClose();
  await again;
  await Promise.all([a.pool.closeAll(), b.pool.closeAll()]);
  const names = store.file("d/").map((f) => f.relPath);
  assert.deepEqual(names, [
    "d/2026/12/02/13-000001-aaaaaa_1.jsonl.zst",
    "d/2026/12/02/13-000001-bbbbbb_1.jsonl.zst",
    "d/2026/12/02/14-000001-aaaaaa_3.jsonl.zst",
  ]);
});

test("the pool refuses a cap below one writer and an instance id that is not letters and digits", () => {
  assert.throws(() => setup({ maxWriters: 0 }), ConfigError);
  assert.throws(
    () => setup({ instanceId: "a-b" }),
    (e: unknown) => e instanceof ArchiverError && e.kind === "permanent",
  );
});

// ---- rolling ----

test("a file rolls once its compressed size reaches roll_size_bytes, and the next append opens the next file", async () => {
  const store = new MemStore();
  const { pool, metrics, completed } = setup({ rollSizeBytes: 10 }, store);
  for (let i = 0; i < 7; i++) await pool.append("d", frame(`fr${i}.`), 100, 1000, i); // 4 bytes each
  await turns();
  assert.equal(completed.length, 2);
  assert.equal(store.files.length, 3);
  await pool.closeAll();
  assert.deepEqual(
    completed.map((c) => [c.tickets, c.bytes, c.records, c.rawBytes, c.outcome]),
    [
      [[0, 1, 2], 12, 300, 3000, "done"],
      [[3, 4, 5], 12, 300, 3000, "done"],
      [[6], 4, 100, 1000, "done"],
    ],
  );
  assert.deepEqual(
    store.files.map((f) => f.data.toString()),
    ["fr0.fr1.fr2.", "fr3.fr4.fr5.", "fr6."],
  );
  assert.deepEqual(store.files[0]?.meta, {
    records: 300,
    codec: "zstd",
    openedAt: T0,
    closedAt: T0,
    blockLengths: [4, 4, 4],
    blockRecords: [100, 100, 100],
  });
  assert.equal(await value(metrics.archiveRoll, { trigger: "size" }), 2);
  assert.equal(await value(metrics.archiveRoll, { trigger: "shutdown" }), 1);
  assert.equal(await value(metrics.filesCreated), 3);
  assert.equal(await value(metrics.filesClosed), 3);
  assert.equal(await value(metrics.bytesCompressed), 28);
});

test("a frame whose oldest record is older than the file rolls it by that record's age", async () => {
  const { pool, completed, advance } = setup({ rollIntervalSecs: 300 });
  // A frame that waited 250 s in the spill opens the file: it rolls 50 s later, not 300.
  await pool.append("d", frame("a"), 1, 1, 0, T0 - 250_000);
  advance(49_999);
  pool.tick();
  await turns();
  assert.equal(completed.length, 0);
  advance(1);
  pool.tick();
  await turns();
  assert.deepEqual(
    completed.map((c) => [c.tickets, c.openedAt]),
    [[[0], T0]],
    "named by its open time",
  );
  await pool.closeAll();
});

test("tick rolls a file once it is roll_interval_secs old, counted from its open time", async () => {
  const store = new MemStore();
  const { pool, metrics, completed, advance } = setup({ rollIntervalSecs: 300 }, store);
  await pool.append("d", frame("a"), 1, 1, 0);
  advance(200_000);
  await pool.append("d", frame("b"), 1, 1, 1); // a later append does not make the file younger
  advance(99_999);
  pool.tick();
  await turns();
  assert.equal(completed.length, 0);
  advance(1);
  pool.tick();
  pool.tick(); // a roll already queued is not queued twice
  await turns();
  assert.equal(completed.length, 1);
  assert.deepEqual(completed[0]?.tickets, [0, 1]);
  assert.equal(completed[0]?.openedAt, T0);
  assert.equal(completed[0]?.closedAt, T0 + 300_000);
  await pool.append("d", frame("c"), 1, 1, 2);
  assert.match(store.files[1]?.relPath ?? "", /\/14-000002-k3x9a2_1\.jsonl\.zst$/);
  await pool.closeAll();
  assert.equal(await value(metrics.archiveRoll, { trigger: "interval" }), 1);
  assert.deepEqual(
    completed.map((c) => c.tickets),
    [[0, 1], [2]],
  );
});

// ---- the writer cap ----

test("past max_writers the least recently used writer parks: its file stays in progress and takes the next flush", async () => {
  const store = new MemStore();
  const { pool, metrics, completed } = setup({ maxWriters: 2 }, store);
  let t = 0;
  for (const d of ["d1", "d2", "d1", "d3", "d4", "d5", "d4", "d2", "d1"]) {
    await pool.append(d, frame(`${d};`), 1, 1, t++);
    assert.ok(pool.stats().writers + pool.stats().closing <= 2);
  }
  await turns();
  // Nothing completes on an eviction: one file per destination, parked and opened again as its flushes come.
  assert.equal(completed.length, 0);
  assert.equal(store.files.length, 5);
  assert.equal(store.maxOpen, 2);
  // d1 was used after d2, so d2 parks first (for d3), then d1 (for d4), then d3 (for d5); d2's and d1's last
  // flushes go to their parked files, taking no place.
  assert.equal(await value(metrics.writerEvictions), 3);
  assert.equal(await value(metrics.archiveRoll, { trigger: "evict" }), 0);
  assert.deepEqual(pool.stats(), { writers: 2, closing: 0, parked: 3 });
  assert.equal((await metrics.writersOpen.get()).values[0]?.value, 2);
  assert.equal((await metrics.writersParked.get()).values[0]?.value, 3);
  assert.deepEqual(
    store.files.filter((f) => f.parkedAppends > 0).map((f) => f.relPath.split("/")[0]),
    ["d1", "d2"],
  );
  await pool.closeAll();
  assert.deepEqual(completed.map((c) => [c.destination, c.tickets]).sort(), [
    ["d1", [0, 2, 8]],
    ["d2", [1, 7]],
    ["d3", [3]],
    ["d4", [4, 6]],
    ["d5", [5]],
  ]);
  assert.ok(store.files.every((f) => f.state === "done"));
  assert.deepEqual(pool.stats(), { writers: 0, closing: 0, parked: 0 });
});

test("a parked file rolls at its age like an open one, and its destination's next flush opens a new file", async () => {
  const store = new MemStore();
  const { pool, completed, advance } = setup({ maxWriters: 1, rollIntervalSecs: 60 }, store);
  await pool.append("d1", frame("1"), 1, 1, 0);
  await pool.append("d2", frame("2"), 1, 1, 1); // parks d1
  await turns();
  advance(61_000);
  pool.tick();
  await turns();
  assert.deepEqual(completed.map((c) => [c.destination, c.tickets]).sort(), [
    ["d1", [0]],
    ["d2", [1]],
  ]);
  // d1's parked file completed and the writer went; d2 keeps its place, its file rolled.
  assert.deepEqual(pool.stats(), { writers: 1, closing: 0, parked: 0 });
  await pool.append("d1", frame("3"), 1, 1, 2);
  await pool.closeAll();
  assert.equal(store.file("d1/").length, 2);
  assert.deepEqual(completed.at(-1)?.tickets, [2]);
  assert.equal(store.maxOpen, 1);
});

test("a destination's last append before shutdown completes its file right behind it, open or parked", async () => {
  const store = new MemStore();
  const { pool, completed, metrics } = setup({ maxWriters: 1 }, store);
  await pool.append("d1", frame("1"), 1, 1, 0);
  await pool.append("d2", frame("2"), 1, 1, 1); // parks d1
  await turns();
  await pool.append("d1", frame("3"), 1, 1, 2, undefined, true);
  await pool.append("d2", frame("4"), 1, 1, 3, undefined, true);
  await turns();
  // Both complete before closeAll: the parked one by its path, with no place taken; each opened again only to sync.
  assert.deepEqual(completed.map((c) => [c.destination, c.tickets]).sort(), [
    ["d1", [0, 2]],
    ["d2", [1, 3]],
  ]);
  assert.equal(await value(metrics.archiveRoll, { trigger: "shutdown" }), 2);
  assert.equal(store.files.length, 2);
  assert.deepEqual(
    store.files.map((f) => [f.relPath.split("/")[0], f.reopens]),
    [
      ["d1", 1],
      ["d2", 0],
    ],
    "the parked file opened once more, for its sync; the open one completed on its own descriptor",
  );
  await pool.closeAll();
  assert.equal(completed.length, 2, "closeAll finds nothing left to complete");
});

test("roll completes the files whose tickets match, open or parked, and waits for every file completing", async () => {
  const store = new MemStore();
  let release!: () => void;
  const slow = new Promise<void>((r) => (release = r));
  store.hooks.complete = (f) => (f.relPath.startsWith("d4/") ? slow : undefined);
  const { pool, completed, metrics } = setup({ maxWriters: 2, rollSizeBytes: 3 }, store);
  await pool.append("d1", frame("1"), 1, 1, 1);
  await pool.append("d2", frame("2"), 1, 1, 2);
  await pool.append("d3", frame("3"), 1, 1, 3); // parks d1
  await pool.append("d4", frame("444"), 1, 1, 4); // parks d2; rolls at its size, its complete held
  await turns();
  let rolled = false;
  const rolling = pool.roll((tickets) => tickets.some((t) => t % 2 === 1)).then(() => (rolled = true));
  await turns();
  assert.deepEqual(completed.map((c) => c.tickets).sort(), [[1], [3]], "d1 (parked) and d3 (open) rolled");
  assert.equal(rolled, false, "d4's file is still completing");
  release();
  await rolling;
  assert.deepEqual(completed.map((c) => c.tickets).sort(), [[1], [3], [4]]);
  assert.equal(await value(metrics.archiveRoll, { trigger: "revoke" }), 2);
  // d2's file holds no match and stays in progress; d1 and d3 take their next flush in new files.
  await pool.append("d3", frame("5"), 1, 1, 5);
  await pool.closeAll();
  assert.deepEqual(completed.map((c) => c.tickets).sort(), [[1], [2], [3], [4], [5]]);
});

test("a writer still parking keeps its place: a write for a new destination waits for that park", async () => {
  const store = new MemStore();
  const { pool, completed } = setup({ maxWriters: 2 }, store);
  let release!: () => void;
  store.hooks.park = (f) => (f.relPath.startsWith("d1/") ? new Promise<void>((r) => (release = r)) : undefined);
  await pool.append("d1", frame("1"), 1, 1, 0);
  await pool.append("d2", frame("2"), 1, 1, 1);
  let landed = false;
  const third = pool.append("d3", frame("3"), 1, 1, 2).then(() => (landed = true));
  await turns();
  assert.equal(landed, false);
  assert.deepEqual(pool.stats(), { writers: 1, closing: 1, parked: 1 });
  assert.equal(store.file("d3/").length, 0, "d3 opened while d1 was still parking");
  release();
  await third;
  const at = (line: string) => store.log.findIndex((l) => l.startsWith(line));
  assert.ok(at("park d1/") >= 0 && at("park d1/") < at("open d3/"));
  assert.equal(completed.length, 0);
  await pool.closeAll();
  assert.equal(completed.length, 3);
});

test("a file that cannot be parked is reported errored and given up; its destination starts a new file", async () => {
  const store = new MemStore();
  const { pool, completed, metrics } = setup({ maxWriters: 1 }, store);
  store.hooks.park = () => {
    throw new ArchiverError("EIO", "close failed", "retryable");
  };
  await pool.append("d1", frame("1"), 1, 1, 0);
  await pool.append("d2", frame("2"), 1, 1, 1);
  await turns();
  assert.deepEqual(
    completed.map((c) => [c.destination, c.outcome, c.tickets]),
    [["d1", "errored", [0]]],
  );
  assert.equal(store.file("d1/")[0]?.state, "abandoned");
  assert.equal(await value(metrics.archiveErrors), 1);
  store.hooks.park = undefined;
  await pool.append("d1", frame("3"), 1, 1, 2);
  await pool.closeAll();
  assert.equal(store.file("d1/").length, 2);
  assert.deepEqual(completed.filter((c) => c.destination === "d1").at(-1)?.tickets, [2]);
});

// ---- ordering and reporting ----

test("appends for one destination land in call order, never interleaved, across rolls and evictions", async () => {
  const store = new MemStore();
  let seed = 7;
  const rand = (n: number) => {
    seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
    return (seed >>> 16) % n;
  };
  store.hooks.open = () => turns(rand(3));
  store.hooks.append = () => turns(rand(4));
  store.hooks.complete = () => turns(rand(4));
  const { pool, completed } = setup({ maxWriters: 2, rollSizeBytes: 20 }, store);
  const dests = ["a", "b", "c"];
  const sent = new Map<string, number[]>(dests.map((d) => [d, []]));
  const appends: Promise<void>[] = [];
  for (let i = 0; i < 90; i++) {
    const d = dests[rand(3)] ?? "a";
    sent.get(d)?.push(i);
    appends.push(pool.append(d, frame(`${i};`), 1, 1, i));
  }
  await Promise.all(appends);
  await pool.closeAll();

  assert.ok(store.files.length > 6, "the test should roll and evict");
  for (const f of store.files) {
    assert.equal(f.maxAppending, 1, `${f.relPath} took two appends at once`);
    assert.equal(f.state, "done");
  }
  const byPath = new Map(completed.map((c) => [c.relPath, c]));
  assert.equal(byPath.size, completed.length, "a file was reported twice");
  assert.equal(completed.length, store.files.length, "a file was not reported");
  const framesOf = (f: MemFile) => f.data.toString().split(";").slice(0, -1).map(Number);
  for (const d of dests) {
    // Each file holds a run of the destination's appends in call order: put end to end, the runs are every append.
    const files = store.file(`${d}/`).sort((x, y) => (framesOf(x)[0] ?? 0) - (framesOf(y)[0] ?? 0));
    assert.deepEqual(files.flatMap(framesOf), sent.get(d));
    for (const f of files) assert.deepEqual(byPath.get(f.relPath)?.tickets, framesOf(f), `tickets of ${f.relPath}`);
  }
});

test("a file whose complete fails is reported once, errored, with its tickets", async () => {
  const store = new MemStore();
  const { pool, metrics, completed } = setup({ rollSizeBytes: 4 }, store);
  const boom = new ArchiverError("EIO", "sync failed", "retryable");
  store.hooks.complete = (f) => {
    if (f.relPath.includes("-000001-")) throw boom;
  };
  await pool.append("d", frame("aa"), 1, 1, 0);
  await pool.append("d", frame("bb"), 1, 1, 1);
  await pool.append("d", frame("cccc"), 1, 1, 2);
  await pool.closeAll();
  assert.deepEqual(
    completed.map((c) => [c.tickets, c.outcome, c.error]),
    [
      [[0, 1], "errored", boom],
      [[2], "done", undefined],
    ],
  );
  assert.equal(await value(metrics.archiveErrors), 1);
});

test("a completion that fails is run again through the retry, each failed attempt counted, until it lands", async () => {
  const store = new MemStore();
  const full = new ArchiverError("ENOSPC", "disk full", "retryable");
  let failures = 2;
  store.hooks.complete = () => {
    if (failures-- > 0) throw full;
  };
  const retried: string[] = [];
  const { pool, metrics, completed } = setup(
    {
      retry: async (destination, attempt) => {
        for (;;) {
          try {
            return await attempt();
          } catch (err) {
            assert.equal(err, full);
            retried.push(destination);
          }
        }
      },
    },
    store,
  );
  await pool.append("d", frame("aa"), 1, 1, 0);
  await pool.closeAll();
  assert.deepEqual(retried, ["d", "d"]);
  assert.deepEqual(
    completed.map((c) => [c.tickets, c.outcome]),
    [[[0], "done"]],
  );
  assert.equal(store.files[0]?.state, "done");
  assert.equal(await value(metrics.archiveErrors), 2);
});

test("a completion the retry gives up on is reported errored, each failed attempt counted once", async () => {
  const store = new MemStore();
  const full = new ArchiverError("ENOSPC", "disk full", "retryable");
  store.hooks.complete = () => {
    throw full;
  };
  const { pool, metrics, completed } = setup(
    {
      retry: async (_destination, attempt) => {
        for (let tries = 1; ; tries++) {
          try {
            return await attempt();
          } catch (err) {
            if (tries === 3) throw err;
          }
        }
      },
    },
    store,
  );
  await pool.append("d", frame("aa"), 1, 1, 0);
  await pool.closeAll();
  assert.deepEqual(
    completed.map((c) => [c.tickets, c.outcome, c.error]),
    [[[0], "errored", full]],
  );
  assert.equal(await value(metrics.archiveErrors), 3);
});

test("a failed append is cut back to the last whole block and its ticket stays with the caller", async () => {
  const store = new MemStore();
  const { pool, metrics, completed } = setup({}, store);
  const full = new ArchiverError("ENOSPC", "disk full", "retryable");
  let failNext = false;
  store.hooks.append = (f, fr) => {
    if (!failNext) return;
    failNext = false;
    f.data = Buffer.concat([f.data, fr.subarray(0, 2)]); // a torn write
    throw full;
  };
  await pool.append("d", frame("one;"), 1, 1, 0);
  failNext = true;
  await assert.rejects(pool.append("d", frame("two;"), 1, 1, 1), full);
  assert.equal(store.files[0]?.data.toString(), "one;");
  await pool.append("d", frame("two;"), 1, 1, 1); // the caller's retry
  await pool.closeAll();
  assert.equal(store.files.length, 1);
  assert.equal(store.files[0]?.data.toString(), "one;two;");
  assert.deepEqual(store.files[0]?.meta?.blockLengths, [4, 4]);
  assert.deepEqual(store.files[0]?.meta?.blockRecords, [1, 1], "the cut-back append counted once");
  assert.deepEqual(completed[0]?.tickets, [0, 1]);
  assert.equal(await value(metrics.archiveErrors), 1);
});

test("a file that cannot be cut back is given up: errored with what it held, and the next append opens a new one", async () => {
  const store = new MemStore();
  const { pool, completed } = setup({}, store);
  const full = new ArchiverError("EIO", "io", "retryable");
  store.hooks.append = (f) => {
    if (f.data.length > 0) throw full;
  };
  store.hooks.truncate = () => {
    throw new ArchiverError("EIO", "truncate failed", "retryable");
  };
  await pool.append("d", frame("one;"), 1, 1, 0);
  await assert.rejects(pool.append("d", frame("two;"), 1, 1, 1), full);
  await turns();
  assert.equal(store.files[0]?.state, "abandoned");
  assert.deepEqual(
    completed.map((c) => [c.tickets, c.outcome]),
    [[[0], "errored"]],
  );
  await pool.append("d", frame("two;"), 1, 1, 1);
  await pool.closeAll();
  assert.match(store.files[1]?.relPath ?? "", /-000002-/);
  assert.deepEqual(
    completed.map((c) => [c.tickets, c.outcome]),
    [
      [[0], "errored"],
      [[1], "done"],
    ],
  );
});

test("a file whose only append failed holds nothing and is abandoned, not reported", async () => {
  const store = new MemStore();
  const { pool, completed } = setup({}, store);
  store.hooks.append = () => {
    throw new ArchiverError("ENOSPC", "full", "retryable");
  };
  await assert.rejects(pool.append("d", frame("x"), 1, 1, 0));
  await pool.closeAll();
  assert.equal(store.files[0]?.state, "abandoned");
  assert.equal(completed.length, 0);
});

test("closeAll lets accepted appends land, a waiting writer's included, completes every file, then refuses appends", async () => {
  const store = new MemStore();
  store.hooks.append = () => turns(3);
  const { pool, metrics, completed } = setup({ maxWriters: 1 }, store);
  const accepted = [
    pool.append("a", frame("a1"), 1, 1, 0),
    pool.append("b", frame("b1"), 1, 1, 1), // waits for a's place
    pool.append("a", frame("a2"), 1, 1, 2), // waits for b's
  ];
  await pool.closeAll();
  await Promise.all(accepted);
  assert.deepEqual(completed.map((c) => [c.destination, c.tickets]).sort(), [
    ["a", [0, 2]],
    ["b", [1]],
  ]);
  assert.ok(store.files.every((f) => f.state === "done"));
  assert.deepEqual(pool.stats(), { writers: 0, closing: 0, parked: 0 });
  assert.equal(await value(metrics.archiveRoll, { trigger: "shutdown" }), 2);
  await assert.rejects(pool.append("a", frame("late"), 1, 1, 3), { code: "writers_closed" });
});

// ---- against the local file store ----

test("with the file store, every completed file is on disk with exactly the frames appended to it", async () => {
  const dir = await mkdtemp(join(tmpdir(), "dfe-writers-"));
  try {
    const store = createFileStore(`file://${dir}/archive`);
    const { pool, completed } = setup({ rollSizeBytes: 16, maxWriters: 1 }, store);
    const sent = new Map<string, string[]>();
    for (let i = 0; i < 12; i++) {
      const d = i % 3 === 0 ? "events/acme/login" : "events/acme/logout";
      const body = `{"n":${i}}\n`;
      sent.set(d, [...(sent.get(d) ?? []), body]);
      await pool.append(d, Buffer.from(body), 1, body.length, i);
    }
    await pool.closeAll();
    assert.ok(completed.every((c) => c.outcome === "done"));
    for (const [d, bodies] of sent) {
      const files = completed
        .filter((c) => c.destination === d)
        .sort((x, y) => (x.tickets[0] ?? 0) - (y.tickets[0] ?? 0));
      let joined = "";
      for (const c of files) {
        const onDisk = await readFile(join(dir, "archive", c.relPath), "utf8");
        assert.equal(Buffer.byteLength(onDisk), c.bytes);
        joined += onDisk;
      }
      assert.equal(joined, bodies.join(""));
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("parked writers past PARKED_PER_WRITER per place: the least recently used parked file completes, as an eviction roll", async () => {
  const store = new MemStore();
  const { pool, metrics, completed } = setup({ maxWriters: 1 }, store);
  const P = PARKED_PER_WRITER;
  // d0..d(P+1): each new destination parks the one before; P parked at most for 1 place.
  for (let d = 0; d <= P + 1; d++) await pool.append(`d${d}`, frame(`${d};`), 1, 1, d);
  await pool.append("d1", frame("again;"), 1, 1, 100); // d1 now the most recently used parked writer
  await pool.append("last", frame("last;"), 1, 1, 101);
  await turns();
  assert.deepEqual(
    completed.map((c) => [c.destination, c.tickets]),
    [
      ["d0", [0]],
      ["d2", [2]],
    ],
  );
  assert.equal(await value(metrics.archiveRoll, { trigger: "evict" }), 2);
  assert.deepEqual(pool.stats(), { writers: 1, closing: 0, parked: P });
  await pool.closeAll();
  assert.equal(completed.length, P + 3);
  assert.deepEqual(completed.find((c) => c.destination === "d1")?.tickets, [1, 100]);
});

test("parked files rolling count in completing until their roll is done, and each done roll is told", async () => {
  const store = new MemStore();
  let release: () => void = () => undefined;
  const held = new Promise<void>((r) => (release = r));
  let rolled = 0;
  const { pool, advance } = setup({ maxWriters: 1, rollIntervalSecs: 60, onRolled: () => rolled++ }, store);
  await pool.append("d1", frame("1"), 1, 1, 0);
  await pool.append("d2", frame("2"), 1, 1, 1); // parks d1
  await turns();
  store.hooks.complete = () => held;
  advance(61_000);
  pool.tick(); // d1's parked file rolls (d2's open one too, which is not counted)
  await turns();
  assert.equal(pool.completing, 1);
  assert.equal(rolled, 0);
  release();
  await turns();
  assert.equal(pool.completing, 0);
  assert.equal(rolled, 1);
  await pool.closeAll();
});
