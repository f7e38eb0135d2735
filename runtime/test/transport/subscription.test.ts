// Topic discovery through both Kafka clients against the testbed broker: a topic created later is consumed without a
// restart, a deleted one is dropped, an empty selection waits; across each subscription change the partitions kept
// are read on from where they were (nothing delivered twice), stay paused when paused, and commits land.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { Writable } from "node:stream";
import { pino } from "pino";
import { deleteKafkaTopic, kafkaTopic, need, uniqueName } from "../../../e2e/support/testbed.ts";
import { groupOffsets, produce, waitFor } from "../../../e2e/support/archiver.ts";
import { recordsOf } from "../../../e2e/support/batches.ts";
import type { PartitionRef } from "../../src/delivery/tracker.ts";
import { escapeRegExp } from "../../src/config/resolve.ts";
import { createMetrics } from "../../src/observe/metrics.ts";
import { discoveryRules } from "../../src/transport/discovery.ts";
import { KafkaTransport } from "../../src/transport/kafka.ts";
import { PlatformaticKafkaTransport } from "../../src/transport/platformatic.ts";
import type { InboundBatch } from "../../src/records.ts";
import type { KafkaTransportOptions, Transport, TransportSink } from "../../src/transport/types.ts";
import { isRetryable } from "../../src/errors.ts";

const CLIENTS = {
  kafkajs: (o: KafkaTransportOptions) => new KafkaTransport(o),
  platformatic: (o: KafkaTransportOptions) => new PlatformaticKafkaTransport(o),
};
const REFRESH_MS = 1000;
/** One refresh, a consumer swap or rejoin, and a loaded machine's slack. */
const WITHIN_MS = 30_000;

class Sink implements TransportSink {
  readonly records: string[] = [];
  readonly assigned: PartitionRef[] = [];
  readonly revoked: PartitionRef[] = [];
  /** The next batch waits for this before it is taken; `holding` is set while it waits. */
  hold: Promise<void> | undefined;
  holding = false;

  async onBatch(batch: InboundBatch): Promise<void> {
    const hold = this.hold;
    if (hold !== undefined) {
      this.hold = undefined;
      this.holding = true;
      await hold;
      this.holding = false;
    }
    for (const r of recordsOf(batch)) this.records.push(`${batch.topic}/${batch.partition}/${r.offset}`);
  }
  onAssigned(partitions: readonly PartitionRef[]): void {
    this.assigned.push(...partitions);
  }
  onRevoked(partitions: readonly PartitionRef[]): void {
    this.revoked.push(...partitions);
  }
  /** Offsets delivered of one partition, in delivery order. */
  offsets(topic: string, partition = 0): number[] {
    const p = `${topic}/${partition}/`;
    return this.records.filter((r) => r.startsWith(p)).map((r) => Number(r.slice(p.length)));
  }
}

interface Harness {
  readonly transport: Transport;
  readonly sink: Sink;
  readonly groupId: string;
  subscribed(): Promise<number>;
  /** Log lines (JSON objects) whose msg is `msg`. */
  logged(msg: string): Record<string, unknown>[];
}

function harness(t: TestContext, client: keyof typeof CLIENTS, prefix: string): Harness {
  const lines: Record<string, unknown>[] = [];
  const out = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split("\n")) if (l !== "") lines.push(JSON.parse(l) as Record<string, unknown>);
      cb();
    },
  });
  const metrics = createMetrics({ defaultMetrics: false });
  const groupId = uniqueName("g");
  const transport = CLIENTS[client]({
    brokers: need("TESTBED_KAFKA_BROKERS").split(","),
    clientId: "subscription-test",
    groupId,
    topics: {
      rules: discoveryRules({
        topic_include: [`^${escapeRegExp(prefix)}-`],
        topic_exclude: ["^_"],
        transformed_topic_suffixes: ["_transformed"],
      }),
      refreshMs: REFRESH_MS,
    },
    topicsSubscribed: metrics.topicsSubscribed,
    sessionTimeoutMs: 10_000,
    rebalanceTimeoutMs: 60_000,
    maxBytesPerPartition: 1 << 20,
    batchRecords: 10_000,
    maxBytes: 8 << 20,
    log: pino({ level: "info" }, out),
  });
  t.after(async () => {
    await transport.stopReceiving();
    await transport.close();
  });
  return {
    transport,
    sink: new Sink(),
    groupId,
    subscribed: async () => (await metrics.topicsSubscribed.get()).values[0]?.value ?? -1,
    logged: (msg) => lines.filter((l) => l["msg"] === msg),
  };
}

const range = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => from + i);
const values = (n: number) => (i: number) => ({ value: `v${i}`, partition: i % n });

async function until(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = WITHIN_MS): Promise<void> {
  await waitFor(cond, timeoutMs, () => `timed out waiting for ${what}`);
}

for (const client of Object.keys(CLIENTS) as (keyof typeof CLIENTS)[]) {
  test(`${client}: a topic created after start is consumed without a restart; kept partitions are not read again`, async (t) => {
    const prefix = uniqueName("disc");
    const a = await kafkaTopic(t, { name: `${prefix}-a`, partitions: 2 });
    await kafkaTopic(t, { name: `${prefix}-a_transformed` });
    await kafkaTopic(t, { name: `other-${prefix}` });
    await produce(a, 10, values(2));
    const h = harness(t, client, prefix);
    await h.transport.start(h.sink);
    await until("the first topic's records", () => h.sink.records.length === 10);
    assert.equal(await h.subscribed(), 1, "only the landing topic matches");

    const b = await kafkaTopic(t, { name: `${prefix}-b` });
    const created = Date.now();
    await produce(b, 5, values(1));
    await produce(a, 10, values(2));
    await until("the new topic's records", () => h.sink.offsets(b).length === 5);
    t.diagnostic(`a topic created later consumed after ${Date.now() - created} ms (refresh ${REFRESH_MS} ms)`);
    await until(
      "the first topic's later records",
      () => h.sink.offsets(a, 0).length + h.sink.offsets(a, 1).length === 20,
    );
    await sleep(1500); // anything read again shows up by now
    assert.deepEqual(h.sink.offsets(a, 0), range(0, 10), "partition 0 of the kept topic, each offset once");
    assert.deepEqual(h.sink.offsets(a, 1), range(0, 10), "partition 1 of the kept topic, each offset once");
    assert.deepEqual(h.sink.offsets(b), range(0, 5));
    assert.equal(await h.subscribed(), 2);
    assert.deepEqual(
      h.sink.assigned.map((p) => `${p.topic}/${p.partition}`).sort(),
      [`${a}/0`, `${a}/1`, `${b}/0`],
      "each partition reported assigned once",
    );
    assert.deepEqual(h.sink.revoked, []);
    const change = h.logged("subscription changed");
    assert.deepEqual(
      change.map((l) => l["added"]),
      [[b]],
    );

    // Commits land after the change, for the kept topic and the new one alike.
    await h.transport.commit([
      { topic: a, partition: 0, offset: "10" },
      { topic: a, partition: 1, offset: "7" },
      { topic: b, partition: 0, offset: "5" },
    ]);
    assert.deepEqual((await groupOffsets(h.groupId, a)).committed, { 0: 10, 1: 7 });
    assert.deepEqual((await groupOffsets(h.groupId, b)).committed, { 0: 5 });
  });

  test(`${client}: a deleted topic is dropped from the subscription while the others go on`, async (t) => {
    const prefix = uniqueName("disc");
    const a = await kafkaTopic(t, { name: `${prefix}-a`, partitions: 2 });
    const b = await kafkaTopic(t, { name: `${prefix}-b` });
    await produce(a, 4, values(2));
    await produce(b, 4, values(1));
    const h = harness(t, client, prefix);
    await h.transport.start(h.sink);
    await until("both topics' records", () => h.sink.records.length === 8);
    assert.equal(await h.subscribed(), 2);

    await deleteKafkaTopic(a);
    await until("the deleted topic's partitions revoked", () => h.sink.revoked.length === 2);
    assert.deepEqual(h.sink.revoked.map((p) => `${p.topic}/${p.partition}`).sort(), [`${a}/0`, `${a}/1`]);
    assert.equal(await h.subscribed(), 1);
    await produce(b, 6, values(1));
    await until("the remaining topic's later records", () => h.sink.offsets(b).length === 10);
    assert.deepEqual(h.sink.offsets(b), range(0, 10));
    assert.deepEqual(
      h.logged("subscription changed").map((l) => l["removed"]),
      [[a]],
    );

    // A commit still naming the revoked partition commits the rest and says the revoked one was not.
    await assert.rejects(
      h.transport.commit([
        { topic: a, partition: 0, offset: "2" },
        { topic: b, partition: 0, offset: "10" },
      ]),
      (err) => isRetryable(err) && /no longer assigned/.test((err as Error).message),
    );
    assert.deepEqual((await groupOffsets(h.groupId, b)).committed, { 0: 10 });
  });

  test(`${client}: with nothing to consume the start completes and waits; a topic that appears is consumed`, async (t) => {
    const prefix = uniqueName("disc");
    const h = harness(t, client, prefix);
    await h.transport.start(h.sink);
    assert.equal(await h.subscribed(), 0);
    await sleep(3 * REFRESH_MS + 500);
    assert.equal(h.logged("no topic to consume: waiting for discovery to find one").length, 1, "logged once");

    const a = await kafkaTopic(t, { name: `${prefix}-a` });
    await produce(a, 3, values(1));
    await until("the new topic's records", () => h.sink.offsets(a).length === 3);
    assert.equal(await h.subscribed(), 1);
  });

  test(`${client}: a batch the sink is still taking when the subscription changes is delivered once`, async (t) => {
    const prefix = uniqueName("disc");
    const a = await kafkaTopic(t, { name: `${prefix}-a` });
    await produce(a, 5, values(1));
    const h = harness(t, client, prefix);
    let release!: () => void;
    h.sink.hold = new Promise<void>((r) => (release = r));
    await h.transport.start(h.sink);
    await until("a batch held by the sink", () => h.sink.holding);

    const b = await kafkaTopic(t, { name: `${prefix}-b` });
    await produce(b, 3, values(1));
    await sleep(3 * REFRESH_MS); // the change is under way while the batch is held
    await produce(a, 5, values(1));
    // kafkajs swaps consumers, and the old one waits for the held batch: a commit meanwhile waits for the new one
    // (the stopping consumer would drop it unsent).
    let committing: Promise<void> | undefined;
    if (client === "kafkajs") {
      assert.equal(h.logged("replacing the consumer").length, 1);
      committing = h.transport.commit([{ topic: a, partition: 0, offset: "2" }]);
    }
    release();
    await committing;
    if (committing !== undefined) assert.deepEqual((await groupOffsets(h.groupId, a)).committed, { 0: 2 });
    await until("every record", () => h.sink.offsets(a).length >= 10 && h.sink.offsets(b).length === 3);
    await sleep(1500); // anything read again shows up by now
    assert.deepEqual(h.sink.offsets(a), range(0, 10), "each offset of the held partition once, in order");
    assert.deepEqual(h.sink.offsets(b), range(0, 3));
    assert.deepEqual(h.sink.revoked, []);
  });

  test(`${client}: a partition paused before a subscription change stays paused after it`, async (t) => {
    const prefix = uniqueName("disc");
    const a = await kafkaTopic(t, { name: `${prefix}-a`, partitions: 2 });
    await produce(a, 4, values(2));
    const h = harness(t, client, prefix);
    await h.transport.start(h.sink);
    await until("the first records", () => h.sink.records.length === 4);
    h.transport.pause([{ topic: a, partition: 0 }]);

    const b = await kafkaTopic(t, { name: `${prefix}-b` });
    await produce(b, 2, values(1));
    await until("the new topic's records", () => h.sink.offsets(b).length === 2);
    await produce(a, 4, values(2));
    await until("the unpaused partition's later records", () => h.sink.offsets(a, 1).length === 4);
    await sleep(1500);
    assert.deepEqual(h.sink.offsets(a, 0), [0, 1], "the paused partition delivered records");

    h.transport.resume([{ topic: a, partition: 0 }]);
    await until("the resumed partition", () => h.sink.offsets(a, 0).length === 4);
    assert.deepEqual(h.sink.offsets(a, 0), range(0, 4));
  });
}
