// PlatformaticKafkaTransport against the testbed broker: delivery (once, in order, per partition, whatever the batch
// codec), commits, pause/resume, and a rebalance reported as revoked partitions.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import kafkajs from "kafkajs";
import { pino } from "pino";
import { recordsOf } from "../../../e2e/support/batches.ts";
import { kafka, kafkaTopic, need, uniqueName } from "../../../e2e/support/testbed.ts";
import type { PartitionRef } from "../../src/delivery/tracker.ts";
import { registerKafkaCodecs } from "../../src/transport/kafka-codecs.ts";
import { PlatformaticKafkaTransport } from "../../src/transport/platformatic.ts";
import type { InboundBatch } from "../../src/records.ts";
import type { TransportSink } from "../../src/transport/types.ts";

const { CompressionTypes } = kafkajs;
const CODECS = [
  CompressionTypes.None,
  CompressionTypes.GZIP,
  CompressionTypes.Snappy,
  CompressionTypes.LZ4,
  CompressionTypes.ZSTD,
];
const log = pino({ level: "error" });

/** Sends `count` records to each partition as one batch per call, so every codec makes batches of its own. */
async function produce(topic: string, partitions: number[], count: number, codec: number, tag: string): Promise<void> {
  registerKafkaCodecs();
  const producer = kafka().producer();
  await producer.connect();
  try {
    for (const partition of partitions) {
      const messages = Array.from({ length: count }, (_, i) => ({ partition, value: `${tag}:${partition}:${i}` }));
      await producer.send({ topic, compression: codec, messages });
    }
  } finally {
    await producer.disconnect();
  }
}

/** Assignments and revocations as members report them, in the order they happened, across members. */
type Timeline = { member: string; kind: "assigned" | "revoked" | "handed"; partition: number }[];

class Collector implements TransportSink {
  readonly name: string;
  readonly timeline: Timeline;
  constructor(name = "", timeline: Timeline = []) {
    this.name = name;
    this.timeline = timeline;
  }
  readonly batches: InboundBatch[] = [];
  readonly assigned: PartitionRef[][] = [];
  readonly revoked: PartitionRef[][] = [];
  readonly #held = new Set<number>();
  onAssignedHook: ((p: readonly PartitionRef[]) => void) | undefined;
  /** The sink's hand-over of revoked partitions (TransportSink.onRevoked), when it is given a bound. */
  handOver: ((p: readonly PartitionRef[], bound: AbortSignal) => Promise<void>) | undefined;

  async onBatch(batch: InboundBatch): Promise<void> {
    this.batches.push(batch);
  }
  onAssigned(partitions: readonly PartitionRef[]): void {
    this.assigned.push([...partitions]);
    for (const p of partitions) this.#held.add(p.partition);
    for (const p of partitions) this.timeline.push({ member: this.name, kind: "assigned", partition: p.partition });
    this.onAssignedHook?.(partitions);
  }
  onRevoked(partitions: readonly PartitionRef[], bound?: AbortSignal): Promise<void> | void {
    this.revoked.push([...partitions]);
    for (const p of partitions) this.#held.delete(p.partition);
    for (const p of partitions) this.timeline.push({ member: this.name, kind: "revoked", partition: p.partition });
    if (this.handOver === undefined || bound === undefined) return;
    return this.handOver(partitions, bound).finally(() => {
      for (const p of partitions) this.timeline.push({ member: this.name, kind: "handed", partition: p.partition });
    });
  }

  values(partition: number): string[] {
    return this.batches
      .filter((b) => b.partition === partition)
      .flatMap((b) => recordsOf(b).map((r) => r.value?.toString() ?? "<null>"));
  }
  offsets(partition: number): number[] {
    return this.batches.filter((b) => b.partition === partition).flatMap((b) => recordsOf(b).map((r) => r.offset));
  }
  count(): number {
    return this.batches.reduce((n, b) => n + recordsOf(b).length, 0);
  }
  /** The partitions held now: every one assigned and not revoked since (a kept one is not assigned again). */
  held(): number[] {
    return [...this.#held].sort();
  }
}

function transport(
  t: TestContext,
  topic: string,
  groupId: string,
  logger = log,
  rebalanceTimeoutMs = 60_000,
): PlatformaticKafkaTransport {
  const tr = new PlatformaticKafkaTransport({
    brokers: need("TESTBED_KAFKA_BROKERS").split(","),
    clientId: "platformatic-test",
    groupId,
    topics: [topic],
    sessionTimeoutMs: 6000,
    rebalanceTimeoutMs,
    maxBytesPerPartition: 1 << 20,
    batchRecords: 10_000,
    maxBytes: 8 << 20,
    log: logger,
  });
  t.after(() => tr.close());
  return tr;
}

async function until(what: string, cond: () => boolean, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

const range = (n: number) => Array.from({ length: n }, (_, i) => i);

test("delivers every record once, in offset order per partition, whatever the batch codec; commits land", async (t) => {
  const topic = await kafkaTopic(t, { partitions: 3 });
  const perCodec = 40;
  for (const codec of CODECS) await produce(topic, [0, 1, 2], perCodec, codec, `c${codec}`);
  const perPartition = perCodec * CODECS.length;
  const groupId = uniqueName("g");
  const sink = new Collector();
  const tr = transport(t, topic, groupId);
  await tr.start(sink);
  await until("all records", () => sink.count() >= 3 * perPartition);
  await sleep(1500); // anything delivered twice shows up in the count by now
  assert.equal(sink.count(), 3 * perPartition);
  assert.deepEqual(sink.held(), [0, 1, 2]);
  for (const p of [0, 1, 2]) {
    assert.deepEqual(sink.offsets(p), range(perPartition), `partition ${p} offsets`);
    const expected = CODECS.flatMap((c) => range(perCodec).map((i) => `c${c}:${p}:${i}`));
    assert.deepEqual(sink.values(p), expected, `partition ${p} values`);
  }
  // Records come grouped by partition, not one call per record, and carry the partition's high watermark.
  assert.ok(sink.batches.length <= 3 * CODECS.length, `${sink.batches.length} batches`);
  for (const b of sink.batches) assert.equal(b.highWatermark, String(perPartition));

  await tr.commit([
    { topic, partition: 0, offset: String(perPartition) },
    { topic, partition: 1, offset: "7" },
    { topic, partition: 2, offset: String(perPartition - 1) },
  ]);
  const admin = kafka().admin();
  await admin.connect();
  try {
    const [fetched] = await admin.fetchOffsets({ groupId, topics: [topic] });
    const committed = Object.fromEntries((fetched?.partitions ?? []).map((p) => [p.partition, p.offset]));
    assert.deepEqual(committed, { 0: String(perPartition), 1: "7", 2: String(perPartition - 1) });
  } finally {
    await admin.disconnect();
  }
});

test("a second member reading from the committed offsets restarts where the first one committed", async (t) => {
  const topic = await kafkaTopic(t, { partitions: 3 });
  await produce(topic, [0, 1, 2], 30, CompressionTypes.LZ4, "a");
  const groupId = uniqueName("g");
  const first = new Collector();
  const a = transport(t, topic, groupId);
  await a.start(first);
  await until("first records", () => first.count() >= 90);
  await a.commit([0, 1, 2].map((partition) => ({ topic, partition, offset: "20" })));
  await a.close();

  const second = new Collector();
  await transport(t, topic, groupId).start(second);
  await until("records past the commit", () => second.count() >= 30);
  await sleep(500);
  for (const p of [0, 1, 2])
    assert.deepEqual(
      second.offsets(p),
      range(10).map((i) => 20 + i),
    );
});

test("pause stops a partition and resume restarts it", async (t) => {
  const topic = await kafkaTopic(t, { partitions: 3 });
  await produce(topic, [0, 1, 2], 50, CompressionTypes.ZSTD, "a");
  const sink = new Collector();
  const tr = transport(t, topic, uniqueName("g"));
  // Paused before the first fetch: nothing of partition 1 may arrive.
  sink.onAssignedHook = () => tr.pause([{ topic, partition: 1 }]);
  await tr.start(sink);
  await until("partitions 0 and 2", () => sink.offsets(0).length === 50 && sink.offsets(2).length === 50);
  await sleep(1500);
  assert.equal(sink.offsets(1).length, 0, "paused partition delivered records");

  // Paused mid-stream: records produced after the pause stay unread until the resume.
  tr.pause([{ topic, partition: 0 }]);
  await produce(topic, [0, 2], 10, CompressionTypes.None, "b");
  await until("partition 2 keeps going", () => sink.offsets(2).length === 60);
  await sleep(1500);
  assert.equal(sink.offsets(0).length, 50, "paused partition delivered records");

  tr.resume([
    { topic, partition: 0 },
    { topic, partition: 1 },
  ]);
  await until("resumed partitions", () => sink.offsets(0).length === 60 && sink.offsets(1).length === 50);
  assert.deepEqual(sink.offsets(0), range(60));
  assert.deepEqual(sink.offsets(1), range(50));
});

test("a second consumer joining the group revokes partitions from the first", async (t) => {
  const topic = await kafkaTopic(t, { partitions: 3 });
  await produce(topic, [0, 1, 2], 20, CompressionTypes.Snappy, "a");
  const groupId = uniqueName("g");
  const first = new Collector();
  const a = transport(t, topic, groupId);
  await a.start(first);
  await until("first consumer's records", () => first.count() === 60);
  await a.commit([0, 1, 2].map((partition) => ({ topic, partition, offset: "20" })));
  assert.equal(first.revoked.length, 0);

  const second = new Collector();
  await transport(t, topic, groupId).start(second);
  await until("rebalance", () => first.revoked.length > 0 && second.held().length > 0);
  const kept = first.held();
  const taken = second.held();
  assert.deepEqual([...kept, ...taken].sort(), [0, 1, 2], "every partition assigned to exactly one member");
  assert.ok(kept.length > 0 && taken.length > 0);
  assert.equal(first.assigned.length, 1, "the partitions the first member kept were reported assigned again");
  assert.deepEqual(
    first.revoked
      .flat()
      .map((p) => p.partition)
      .sort(),
    taken,
  );

  // After the rebalance each record goes to the member that holds its partition, from the committed offset on.
  const before = first.batches.length;
  await produce(topic, [0, 1, 2], 5, CompressionTypes.None, "b");
  await until("new records", () => first.count() + second.count() === 75);
  await sleep(500);
  assert.deepEqual([...new Set(first.batches.slice(before).map((b) => b.partition))].sort(), kept);
  assert.deepEqual([...new Set(second.batches.map((b) => b.partition))].sort(), taken);
  for (const p of taken)
    assert.deepEqual(
      second.offsets(p),
      range(5).map((i) => 20 + i),
    );
});

test("a member joining takes partitions only from their owners, each revoked before it is handed over", async (t) => {
  const topic = await kafkaTopic(t, { partitions: 6 });
  const groupId = uniqueName("g");
  const timeline: Timeline = [];
  const [a, b, c] = ["a", "b", "c"].map((name) => new Collector(name, timeline));
  if (a === undefined || b === undefined || c === undefined) throw new Error("three members");
  await transport(t, topic, groupId).start(a);
  await until("a holds all", () => a.held().length === 6);
  await transport(t, topic, groupId).start(b);
  await until("a and b share", () => a.held().length === 3 && b.held().length === 3);
  const before = { a: a.held(), b: b.held() };
  const from = timeline.length;
  await transport(t, topic, groupId).start(c);
  await until("three share", () => [a, b, c].every((m) => m.held().length === 2), 30_000);

  // Sticky: a and b keep what c did not take (round-robin dealt every partition afresh, moving some between a and
  // b, and each one moved was read again from its committed offset while its last owner's files still held it).
  assert.ok(
    a.held().every((p) => before.a.includes(p)),
    `a gained none: ${JSON.stringify(timeline.slice(from))}`,
  );
  assert.ok(
    b.held().every((p) => before.b.includes(p)),
    `b gained none: ${JSON.stringify(timeline.slice(from))}`,
  );
  // The owner lets a partition go before its next owner starts reading it, never after.
  for (const p of c.held()) {
    const handed = timeline.findIndex((e, i) => i >= from && e.member === "c" && e.partition === p);
    const released = timeline.findIndex((e, i) => i >= from && e.kind === "revoked" && e.partition === p);
    assert.ok(
      released !== -1 && released < handed,
      `partition ${p}: revoked before c was handed it: ${JSON.stringify(timeline.slice(from))}`,
    );
  }
});

test("a revoked partition reaches its next owner only once its hand-over ended; commits of it land meanwhile", async (t) => {
  const topic = await kafkaTopic(t, { partitions: 4 });
  await produce(topic, range(4), 10, CompressionTypes.None, "a");
  const groupId = uniqueName("g");
  const timeline: Timeline = [];
  const a = new Collector("a", timeline);
  const ta = transport(t, topic, groupId);
  await ta.start(a);
  await until("a's records", () => a.count() === 40);
  // It commits what it read of the partitions it loses, 9 s in, past the 6 s session (its heartbeats go on meanwhile):
  // the next owner reads on from there.
  a.handOver = async (partitions) => {
    await sleep(9_000);
    await ta.commit(partitions.map((p) => ({ topic, partition: p.partition, offset: "10" })));
  };
  const b = new Collector("b", timeline);
  await transport(t, topic, groupId).start(b);
  await until("b holds two", () => b.held().length === 2, 30_000);
  const taken = b.held();
  for (const p of taken) {
    const handed = timeline.findIndex((e) => e.member === "a" && e.kind === "handed" && e.partition === p);
    const assigned = timeline.findIndex((e) => e.member === "b" && e.kind === "assigned" && e.partition === p);
    assert.ok(handed !== -1 && handed < assigned, `partition ${p}: ${JSON.stringify(timeline)}`);
  }
  await produce(topic, taken, 5, CompressionTypes.None, "b");
  await until("b's records", () => b.count() === 10);
  for (const p of taken)
    assert.deepEqual(
      b.offsets(p),
      range(5).map((i) => 10 + i),
    );
});

test("a hand-over that does not end is cut at its bound, past the session: the member stays in the group", async (t) => {
  const topic = await kafkaTopic(t, { partitions: 2 });
  const groupId = uniqueName("g");
  const timeline: Timeline = [];
  const a = new Collector("a", timeline);
  // A 10 s rebalance timeout: the bound is 8 s, past the 6 s session.
  await transport(t, topic, groupId, log, 10_000).start(a);
  await until("a holds both", () => a.held().length === 2);
  let bound: AbortSignal | undefined;
  a.handOver = (_partitions, signal) => {
    bound = signal;
    return new Promise(() => undefined);
  };
  const b = new Collector("b", timeline);
  await transport(t, topic, groupId, log, 10_000).start(b);
  await until("a's hand-over", () => bound !== undefined, 30_000);
  const from = Date.now();
  await until("b holds one", () => b.held().length === 1, 30_000);
  const waited = Date.now() - from;
  assert.equal(bound?.aborted, true);
  assert.ok(waited >= 7_500 && waited < 10_000, `b was handed its partition ${waited} ms after the revocation`);
  // Its session kept by the hand-over's heartbeats, a kept the other partition throughout: revoked only the one.
  assert.deepEqual([...a.held(), ...b.held()].sort(), [0, 1]);
  assert.equal(timeline.filter((e) => e.member === "a" && e.kind === "revoked").length, 1, JSON.stringify(timeline));
});

test("members committing every 20 ms through a rebalance: the group settles, no commit starts another", async (t) => {
  const topic = await kafkaTopic(t, { partitions: 6 });
  const groupId = uniqueName("g");
  // Every join the transport logs ("partitions assigned", kept partitions included).
  let joins = 0;
  const counting = pino(
    { level: "info" },
    { write: (line: string) => void (joins += +line.includes("partitions assigned")) },
  );
  const members = ["a", "b", "c"].map((name) => ({
    sink: new Collector(name),
    tr: transport(t, topic, groupId, counting),
  }));
  let committing = true;
  t.after(() => (committing = false));
  const commits = members.map(async ({ sink, tr }) => {
    while (committing) {
      const held = sink.held().map((partition) => ({ topic, partition, offset: "0" }));
      await tr.commit(held).catch(() => undefined);
      await sleep(20);
    }
  });
  for (const m of members) await m.tr.start(m.sink);
  await until("three share", () => members.every((m) => m.sink.held().length === 2), 30_000);
  await sleep(3_000);
  const settled = joins;
  await sleep(6_000);
  committing = false;
  await Promise.all(commits);
  assert.equal(
    joins - settled,
    0,
    `the group rebalanced ${joins - settled} times more with no member joining or leaving`,
  );
});
