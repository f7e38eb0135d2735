// The pipeline takes a partition's next batch as soon as the one before is routed, while that one is still buffered
// (pipeline.ts onBatch). The transport here is a script that hands each partition's next batch the moment onBatch
// resolves, as the Kafka transport does; everything else is real: the route lanes, hot buffers, zstd, local files.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { readArchive } from "../../e2e/support/archiver.ts";
import { parseConfigText } from "../src/config/load.ts";
import type { CommitOffset, PartitionRef } from "../src/delivery/tracker.ts";
import { createMetrics } from "../src/observe/metrics.ts";
import { Pipeline, type PipelineExit } from "../src/pipeline.ts";
import { resolveMemoryLimit } from "../src/regulate/memory.ts";
import { openStore } from "../src/store/open.ts";
import type { InboundBatch } from "../src/records.ts";
import type { Transport, TransportSink } from "../src/transport/types.ts";

const TOPIC = "events";
const PARTITIONS = 2;
const BATCHES = 6;
/** Records per batch: with kafka.batch_size 100, 13 chunks (200 records each), buffered over two turns (1600 each). */
const PER_BATCH = 2500;

interface Script {
  /** Partition 0 is revoked while its batch of this index is buffered, and fed no more. */
  revokeAfter?: number;
  /** The revocation gives the pipeline 10 s to commit the partition first. */
  handOver?: boolean;
  /** Commits are refused for this long once the drain begins, as while a rebalance runs. */
  refuseCommitsAtDrainMs?: number;
}

/** Hands each partition's batches one after another, the next as soon as onBatch resolves for the one before. */
class ScriptedTransport implements Transport {
  readonly commits: CommitOffset[][] = [];
  /**
   * At each onBatch resolved: the records of every batch resolved so far, the records buffered by then, and the
   * flushes in flight (started, not yet written).
   */
  readonly resolvedAt: { resolved: number; received: number; flushing: number }[] = [];
  #resolved = 0;
  readonly replayable: boolean;
  readonly #received: () => Promise<number>;
  readonly #flushing: () => Promise<number>;
  /** Resolves once every batch was taken; set when the pipeline starts the transport. */
  handedAll: Promise<unknown> | undefined;

  readonly #revokeAfter: number | undefined;
  readonly #handOver: boolean;
  readonly #refuseAtDrainMs: number;
  #refusingUntil = -Infinity;
  refused = 0;
  /** Set once partition 0 is revoked (once its hand-over settled, with one): commits made from then on. */
  commitsAfterRevoke: CommitOffset[][] | undefined;

  constructor(replayable: boolean, received: () => Promise<number>, flushing: () => Promise<number>, opts: Script) {
    this.replayable = replayable;
    this.#received = received;
    this.#flushing = flushing;
    this.#revokeAfter = opts.revokeAfter;
    this.#handOver = opts.handOver ?? false;
    this.#refuseAtDrainMs = opts.refuseCommitsAtDrainMs ?? 0;
  }

  async #feed(sink: TransportSink, partition: number): Promise<void> {
    for (let b = 0; b < BATCHES; b++) {
      await sink.onBatch(batchOf(partition, b));
      if (partition === 0 && b === this.#revokeAfter) {
        // A few turns of the event loop on, its batch's last turn is being buffered, a slice at a time: the
        // revocation lands between slices, as a rebalance can (checked by hand: the slices skip the rest of it).
        for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r));
        const revoked = [{ topic: TOPIC, partition: 0 }];
        if (this.#handOver) await sink.onRevoked(revoked, AbortSignal.timeout(10_000));
        else sink.onRevoked(revoked);
        this.commitsAfterRevoke = [];
        return;
      }
      this.#resolved += PER_BATCH;
      this.resolvedAt.push({
        resolved: this.#resolved,
        received: await this.#received(),
        flushing: await this.#flushing(),
      });
    }
  }

  start(sink: TransportSink): Promise<void> {
    sink.onAssigned(Array.from({ length: PARTITIONS }, (_, partition): PartitionRef => ({ topic: TOPIC, partition })));
    this.handedAll = Promise.all(Array.from({ length: PARTITIONS }, (_, p) => this.#feed(sink, p)));
    return Promise.resolve();
  }

  commit(offsets: readonly CommitOffset[]): Promise<void> {
    if (performance.now() < this.#refusingUntil) {
      this.refused++;
      return Promise.reject(new Error("the group is rebalancing"));
    }
    this.commits.push([...offsets]);
    this.commitsAfterRevoke?.push([...offsets]);
    return Promise.resolve();
  }

  pause(): void {}
  resume(): void {}
  stopReceiving(): Promise<void> {
    if (this.#refuseAtDrainMs > 0) this.#refusingUntil = performance.now() + this.#refuseAtDrainMs;
    return Promise.resolve();
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

function batchOf(partition: number, b: number): InboundBatch {
  const records = Array.from({ length: PER_BATCH }, (_, i) => {
    const offset = b * PER_BATCH + i;
    return {
      offset: String(offset),
      value: Buffer.from(JSON.stringify({ p: partition, o: offset, pad: "x".repeat(40) })),
    };
  });
  return { topic: TOPIC, partition, records };
}

/** Every archived record's (partition, offset), read by zstd's own CLI, file by file in the order they rolled. */
function archived(root: string): { p: number; o: number }[] {
  // One writer, whose files' names carry its zero-padded sequence number: readArchive's order is the roll order.
  return readArchive(root).lines.map((line) => JSON.parse(line) as { p: number; o: number });
}

async function run(
  replayable: boolean,
  script: Script = {},
): Promise<{
  exit: PipelineExit;
  records: { p: number; o: number }[];
  transport: ScriptedTransport;
}> {
  const dir = mkdtempSync(join(tmpdir(), "pipeline-"));
  try {
    const yaml = [
      `kafka: { brokers: ["127.0.0.1:9"], topics: [${TOPIC}], batch_size: 100 }`,
      `archive: { destination: "file://${join(dir, "archive")}", path_template: "all", roll_size_bytes: 20000 }`,
      `buffer: { spool_dir: "${join(dir, "spool")}", flush_records: 700 }`,
      "routing: { mode: topic }",
      "dlq: { enabled: false }",
    ].join("\n");
    const { config } = parseConfigText(yaml, { env: {}, sourceName: "test.yaml" });
    const log = pino({ level: "silent" });
    const metrics = createMetrics({ defaultMetrics: false });
    const memory = resolveMemoryLimit(512 << 20, 0.85);
    const received = async () => (await metrics.messagesReceived.get()).values[0]?.value ?? 0;
    // Flushes started less those written (each written one observes its duration).
    const flushing = async () =>
      ((await metrics.flushOperations.get()).values[0]?.value ?? 0) -
      ((await metrics.flushDuration.get()).values.find((v) => v.metricName?.endsWith("_count"))?.value ?? 0);
    const transport = new ScriptedTransport(replayable, received, flushing, script);
    const pipeline = new Pipeline({
      config,
      transport,
      metrics,
      log,
      memory,
      store: await openStore(config, {}, metrics, log),
    });
    await pipeline.start();
    assert.ok(transport.handedAll, "the pipeline never started the transport");
    await transport.handedAll;
    // Drained the moment the last batch is taken: batches taken but still buffering must not be lost.
    const exit = await pipeline.drain();
    return { exit, records: archived(join(dir, "archive")), transport };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function assertInOrder(records: readonly { p: number; o: number }[]): void {
  const last = new Map<number, number>();
  for (const r of records) {
    const before = last.get(r.p) ?? -1;
    assert.ok(r.o > before, `partition ${r.p}: offset ${r.o} archived after ${before}`);
    last.set(r.p, r.o);
  }
}

test("a push source's batches are all archived once, each partition's in order, when the drain comes at once", async () => {
  const { exit, records, transport } = await run(false);
  assert.deepEqual(exit, { code: 0 });
  assert.equal(records.length, PARTITIONS * BATCHES * PER_BATCH);
  assertInOrder(records);
  // The next batch is taken before the one before is all buffered: some onBatch resolved with fewer records
  // received than the batches resolved so far hold.
  const early = transport.resolvedAt.filter((r) => r.received < r.resolved);
  assert.ok(
    early.length > 0,
    `every onBatch waited for its batch to be buffered: ${JSON.stringify(transport.resolvedAt)}`,
  );
});

test("one destination: intake waits while a few of its flushes are in flight, however fast it reads", async () => {
  const { transport } = await run(false);
  // Its flushes compress and append one after another: intake goes on only once fewer than 4 are in flight, and a
  // batch buffered then starts at most 4 more (2,500 records, flush_records 700).
  const most = Math.max(...transport.resolvedAt.map((r) => r.flushing));
  assert.ok(most <= 7, `${most} flushes of one destination in flight: ${JSON.stringify(transport.resolvedAt)}`);
});

test("on kafka, what the drain commits is archived, in order, whatever was still buffering", async () => {
  const { exit, records, transport } = await run(true);
  assert.deepEqual(exit, { code: 0 });
  assertInOrder(records);
  const committed = new Map<number, number>();
  for (const c of transport.commits.flat())
    committed.set(c.partition, Math.max(committed.get(c.partition) ?? 0, Number(c.offset)));
  for (let p = 0; p < PARTITIONS; p++) {
    const below = committed.get(p) ?? 0;
    const have = new Set(records.filter((r) => r.p === p).map((r) => r.o));
    for (let o = 0; o < below; o++) assert.ok(have.has(o), `partition ${p}: offset ${o} committed but not archived`);
  }
});

test("a partition revoked while its batch is buffered: nothing of it is committed after, the other is all archived", async () => {
  const { exit, records, transport } = await run(true, { revokeAfter: 1 });
  assert.deepEqual(exit, { code: 0 });
  assertInOrder(records);
  assert.ok(transport.commitsAfterRevoke, "partition 0 was never revoked");
  const late = transport.commitsAfterRevoke.flat().filter((c) => c.partition === 0);
  assert.deepEqual(late, [], "offsets of the revoked partition committed after its revocation");
  const other = records.filter((r) => r.p === 1).map((r) => r.o);
  assert.deepEqual(
    other,
    Array.from({ length: BATCHES * PER_BATCH }, (_, o) => o),
    "partition 1's records not all archived once",
  );
  // What partition 0 left on file is a run from its start, each record once: no gap, whatever the revocation cut.
  const first = records.filter((r) => r.p === 0).map((r) => r.o);
  assert.ok(first.length <= 2 * PER_BATCH, `partition 0: ${first.length} records archived from 2 batches`);
  assert.deepEqual(
    first,
    Array.from({ length: first.length }, (_, o) => o),
  );
});

test("a partition revoked with a hand-over: all it received is archived once and committed before it goes", async () => {
  const { exit, records, transport } = await run(true, { revokeAfter: 1, handOver: true });
  assert.deepEqual(exit, { code: 0 });
  assertInOrder(records);
  assert.ok(transport.commitsAfterRevoke, "partition 0 was never revoked");
  const committed = Math.max(
    ...transport.commits
      .flat()
      .filter((c) => c.partition === 0)
      .map((c) => Number(c.offset)),
  );
  // Its two batches were taken, the second one still buffering as the revocation came: both are archived and
  // committed, so its next owner reads on from offset 5000 and archives nothing of them again.
  assert.equal(committed, 2 * PER_BATCH, "partition 0 committed to all it received");
  assert.deepEqual(
    records.filter((r) => r.p === 0).map((r) => r.o),
    Array.from({ length: 2 * PER_BATCH }, (_, o) => o),
  );
  assert.deepEqual(
    transport.commitsAfterRevoke.flat().filter((c) => c.partition === 0),
    [],
  );
  assert.equal(records.filter((r) => r.p === 1).length, BATCHES * PER_BATCH);
});

test("the drain's last commit, refused for a while, is retried until it lands", async () => {
  const { exit, records, transport } = await run(true, { refuseCommitsAtDrainMs: 1_500 });
  assert.deepEqual(exit, { code: 0 });
  assert.ok(transport.refused > 0, "no commit was refused");
  // Everything archived is committed: the partitions' next owners read none of it again.
  const last = new Map(transport.commits.flat().map((c) => [c.partition, Number(c.offset)]));
  for (let p = 0; p < PARTITIONS; p++) {
    const archived = records.filter((r) => r.p === p).map((r) => r.o);
    assert.deepEqual(
      archived,
      Array.from({ length: archived.length }, (_, o) => o),
    );
    assert.equal(last.get(p), archived.length, `partition ${p}: committed to what it archived`);
  }
});
