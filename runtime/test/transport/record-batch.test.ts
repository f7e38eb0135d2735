// record-batch.ts over what the testbed broker returns to a raw Fetch (raw-fetch.ts): batches written by producers
// the project did not write (kcat, the Java console producer, kafkajs), in every codec, cut at the fetch size, with
// aborted transactions and control markers, and with a byte flipped.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { Admin, ConnectionPool, FetchIsolationLevels } from "@platformatic/kafka";
import kafkajs from "kafkajs";
import { produce, waitFor } from "../../../e2e/support/archiver.ts";
import { random } from "../../../e2e/support/random.ts";
import { kafka, kafkaTopic, need, uniqueName } from "../../../e2e/support/testbed.ts";
import { ArchiverError } from "../../src/errors.ts";
import { registerKafkaCodecs } from "../../src/transport/kafka-codecs.ts";
import { rawFetch, type RawFetchPartition } from "../../src/transport/raw-fetch.ts";
import { forEachRecord, splitBatches, wholeBatches, xerialBlocks } from "../../src/transport/record-batch.ts";

const { CompressionTypes } = kafkajs;
const brokers = need("TESTBED_KAFKA_BROKERS");
const admin = new Admin({ clientId: "record-batch-test", bootstrapBrokers: brokers.split(",") });
const pool = new ConnectionPool("record-batch-test");
after(() => Promise.all([admin.close(), pool.close()]));

/** One read_committed Fetch v17 of partition 0 of `topic` from `offset`, as the transport sends it. */
async function fetchRaw(topic: string, offset: number, partitionMaxBytes = 64 << 20): Promise<RawFetchPartition> {
  const md = await admin.metadata({ topics: [topic] });
  const t = md.topics.get(topic);
  const broker = md.brokers.get(t?.partitions[0]?.leader ?? -1);
  assert.ok(t !== undefined && broker !== undefined, `no leader for ${topic}`);
  const partition = {
    partition: 0,
    fetchOffset: BigInt(offset),
    partitionMaxBytes,
    currentLeaderEpoch: -1,
    lastFetchedEpoch: -1,
  };
  const connection = await pool.get(broker);
  const response = await rawFetch.async(
    connection,
    500,
    1,
    64 << 20,
    FetchIsolationLevels.READ_COMMITTED,
    0,
    -1,
    [{ topicId: t.id, partitions: [partition] }],
    [],
    "",
  );
  const p = response.responses[0]?.partitions[0];
  assert.ok(p !== undefined && p.records.length > 0, `nothing fetched from ${topic} at ${offset}`);
  return p;
}

/** The batches of `bytes` as the format lays them out (base offset, attributes' codec, where each begins and ends). */
function batchesOf(bytes: Uint8Array): { base: number; codec: number; start: number; end: number }[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out = [];
  for (let p = 0; p + 61 <= bytes.length;) {
    const end = p + 12 + view.getInt32(p + 8);
    if (end > bytes.length) break;
    out.push({ base: Number(view.getBigInt64(p)), codec: view.getInt16(p + 21) & 7, start: p, end });
    p = end;
  }
  return out;
}

/** Every record visited from `fromOffset`: its value and offset. */
function records(bytes: Uint8Array, fromOffset = 0, aborted: RawFetchPartition["abortedTransactions"] = []) {
  const out: { value: Buffer; offset: number }[] = [];
  const n = forEachRecord(
    bytes,
    fromOffset,
    (records, start, end, offset) => out.push({ value: Buffer.from(records.subarray(start, end)), offset }),
    aborted,
  );
  assert.equal(n, out.length, "the count returned is the records visited");
  return out;
}

function assertMalformed(fn: () => unknown): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof ArchiverError, String(err));
    assert.equal(err.code, "kafka_batch_malformed");
    assert.equal(err.kind, "permanent");
    return true;
  });
}

/** Values of every byte but kcat's delimiters (0x01 between messages, 0x02 after the key), one of them large. */
function kcatValues(seed: number): Buffer[] {
  const next = random(seed);
  const values = Array.from({ length: 300 }, () =>
    Buffer.from(Array.from({ length: Math.floor(next() * 400) }, () => 3 + Math.floor(next() * 253))),
  );
  values[7] = Buffer.from("compressible line of a larger record\n".repeat(8000));
  return values;
}

const KCAT_CODECS = { none: 0, gzip: 1, snappy: 2, lz4: 3, zstd: 4 } as const;

for (const [name, codec] of Object.entries(KCAT_CODECS)) {
  test(`kcat -z ${name}: every value byte-exact and in order at its offset, a null value as empty, a null key`, async (t) => {
    const topic = await kafkaTopic(t, { prefix: `rb-kcat-${name}` });
    const values = kcatValues(codec + 1);
    // -Z sends an empty value or key as null.
    const nullAt = 11;
    const nullKeyAt = 12;
    const input = Buffer.concat(
      values.flatMap((v, i) => [
        Buffer.from(i === nullKeyAt ? "\x02" : `k${i}\x02`),
        i === nullAt ? Buffer.alloc(0) : v,
        Buffer.from([1]),
      ]),
    );
    const args = ["-P", "-b", brokers, "-t", topic, "-p", "0", "-z", name, "-Z", "-D", "\\x01", "-K", "\\x02"];
    const kcat = spawnSync("kcat", [...args, "-H", "origin=kcat", "-X", "linger.ms=100"], { input, timeout: 30_000 });
    assert.equal(kcat.status, 0, `kcat failed: ${kcat.stderr.toString()}`);

    const { records: bytes } = await fetchRaw(topic, 0);
    const batches = batchesOf(bytes);
    assert.ok(batches.length > 0);
    for (const b of batches) assert.equal(b.codec, codec, `batch at ${b.base} written with codec ${codec}`);
    const got = records(bytes);
    assert.deepEqual(
      got.map((r) => r.offset),
      values.map((_, i) => i),
    );
    for (const [i, r] of got.entries()) {
      assert.ok(r.value.equals(i === nullAt ? Buffer.alloc(0) : (values[i] as Buffer)), `value at offset ${i}`);
    }
  });
}

test("snappy from the Java producer (snappy-java's framing) and from kafkajs (one raw block)", async (t) => {
  const values = Array.from({ length: 200 }, (_, i) => `value ${i} ${"x".repeat(i * 7)}`);
  const javaTopic = await kafkaTopic(t, { prefix: "rb-java-snappy" });
  const producer = spawnSync(
    "java",
    [
      "-cp",
      join(need("TESTBED_KAFKA_HOME"), "*"),
      "org.apache.kafka.tools.ConsoleProducer",
      "--bootstrap-server",
      brokers,
      "--topic",
      javaTopic,
      "--compression-codec",
      "snappy",
      "--producer-property",
      "linger.ms=200",
    ],
    { input: values.join("\n") + "\n", timeout: 60_000 },
  );
  assert.equal(producer.status, 0, `console producer failed: ${producer.stderr.toString()}`);

  const kafkajsTopic = await kafkaTopic(t, { prefix: "rb-kafkajs-snappy" });
  registerKafkaCodecs();
  const kp = kafka().producer();
  await kp.connect();
  try {
    await kp.send({
      topic: kafkajsTopic,
      compression: CompressionTypes.Snappy,
      messages: values.map((value) => ({ value })),
    });
  } finally {
    await kp.disconnect();
  }

  for (const [topic, framed] of [
    [javaTopic, true],
    [kafkajsTopic, false],
  ] as const) {
    const { records: bytes } = await fetchRaw(topic, 0);
    const batches = batchesOf(bytes);
    for (const b of batches) {
      assert.equal(b.codec, 2);
      const body = Buffer.from(bytes.subarray(b.start + 61, b.end));
      assert.equal(xerialBlocks(body) !== undefined, framed, `${topic}: framed ${framed}`);
    }
    assert.deepEqual(
      records(bytes).map((r) => [r.offset, r.value.toString()]),
      values.map((v, i) => [i, v]),
    );
  }
});

test("from an offset inside a compressed batch: the records below it are not visited", async (t) => {
  const topic = await kafkaTopic(t, { prefix: "rb-from" });
  const producer = kafka().producer();
  await producer.connect();
  try {
    for (const tag of ["a", "b"]) {
      const messages = Array.from({ length: 10 }, (_, i) => ({ value: `${tag}${i}` }));
      await producer.send({ topic, compression: CompressionTypes.GZIP, messages });
    }
  } finally {
    await producer.disconnect();
  }
  const { records: bytes } = await fetchRaw(topic, 4);
  // The broker returns the whole batch holding offset 4, from its base.
  assert.deepEqual(
    batchesOf(bytes).map((b) => [b.base, b.codec]),
    [
      [0, 1],
      [10, 1],
    ],
  );
  const got = records(bytes, 4);
  assert.deepEqual(
    got.map((r) => [r.offset, r.value.toString()]),
    [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19].map((o) => [o, o < 10 ? `a${o}` : `b${o - 10}`]),
  );
  assert.deepEqual(
    records(bytes, 13).map((r) => r.offset),
    [13, 14, 15, 16, 17, 18, 19],
  );
});

test("a batch the broker cut at the fetch size: wholeBatches ends before it; read uncut, it is malformed", async (t) => {
  const topic = await kafkaTopic(t, { prefix: "rb-cut" });
  await produce(topic, 100, (i) => ({ value: `record ${i} ${"y".repeat(100)}` }), 20);
  const full = batchesOf((await fetchRaw(topic, 0)).records);
  assert.equal(full.length, 5, "one batch per send");
  const second = full[1] as (typeof full)[number];

  const { records: cut } = await fetchRaw(topic, 0, second.end + 100);
  assert.equal(cut.length, second.end + 100, "the broker cut the third batch");
  const { end, lastOffset } = wholeBatches(cut);
  assert.equal(end, second.end);
  assert.equal(lastOffset, 39);
  assert.deepEqual(
    records(cut.subarray(0, end)).map((r) => r.offset),
    Array.from({ length: 40 }, (_, i) => i),
  );
  assertMalformed(() => forEachRecord(cut, 0, () => undefined));
});

test("splitBatches: cut at batch boundaries into runs of about equal records, none under the minimum but the last", async (t) => {
  const topic = await kafkaTopic(t, { prefix: "rb-split" });
  await produce(topic, 100, (i) => ({ value: `record ${i}` }), 20);
  const { records: bytes } = await fetchRaw(topic, 0);
  const boundaries = new Set(batchesOf(bytes).map((b) => b.start));
  const offsetsOf = (pieces: Uint8Array[]) => pieces.map((p) => records(p).map((r) => r.offset));
  const check = (pieces: Uint8Array[]) => {
    assert.deepEqual(Buffer.concat(pieces), Buffer.from(bytes), "the pieces are the bytes, in order");
    let at = 0;
    for (const piece of pieces) {
      assert.ok(boundaries.has(at), `a piece begins at byte ${at}, not a batch's start`);
      at += piece.length;
    }
  };
  const sizes = (pieces: Uint8Array[]) => offsetsOf(pieces).map((o) => o.length);

  const four = splitBatches(bytes, 4, 10);
  check(four);
  assert.deepEqual(sizes(four), [40, 40, 20], "a quarter is 25 records: a run ends at the batch that reaches it");
  assert.deepEqual(
    offsetsOf(four).flat(),
    Array.from({ length: 100 }, (_, i) => i),
  );

  const atLeast50 = splitBatches(bytes, 4, 50);
  check(atLeast50);
  assert.deepEqual(sizes(atLeast50), [60, 40]);

  assert.deepEqual(sizes(splitBatches(bytes, 8, 1)), [20, 20, 20, 20, 20], "no more pieces than batches");
  assert.deepEqual(sizes(splitBatches(bytes, 1, 1)), [100]);
  assert.deepEqual(sizes(splitBatches(bytes, 4, 1000)), [100], "fewer records than the minimum: one piece");
});

test("transactions: aborted records and control batches are skipped, the fetched range covers the markers", async (t) => {
  const topic = await kafkaTopic(t, { prefix: "rb-txn" });
  const plain = kafka().producer();
  const txp = kafka().producer({ transactionalId: uniqueName("rb-txn"), maxInFlightRequests: 1, idempotent: true });
  await Promise.all([plain.connect(), txp.connect()]);
  t.after(() => Promise.all([plain.disconnect(), txp.disconnect()]));
  const sent: { value: string; offset: number }[] = [];
  async function send(p: kafkajs.Producer | kafkajs.Transaction, value: string): Promise<void> {
    const [md] = await p.send({ topic, messages: [{ value }] });
    sent.push({ value, offset: Number(md?.baseOffset) });
  }
  await send(plain, "p0");
  const aborting = await txp.transaction();
  await send(aborting, "aborted0");
  await send(plain, "p1");
  await send(aborting, "aborted1");
  await send(plain, "p2");
  await aborting.abort();
  await send(plain, "p3");
  const committing = await txp.transaction();
  await send(committing, "committed0");
  await send(plain, "p4");
  await send(committing, "committed1");
  await committing.commit();

  // The coordinator writes the markers after commit() returns; till then a read_committed fetch stops short.
  let p = await fetchRaw(topic, 0);
  await waitFor(
    async () => Number((p = await fetchRaw(topic, 0)).highWatermark) === sent.length + 2,
    30_000,
    () => `the log ends at ${p.highWatermark}, not past both markers`,
  );
  const firstAborted = sent.find((s) => s.value === "aborted0")?.offset;
  assert.deepEqual(
    p.abortedTransactions.map((a) => a.firstOffset),
    [firstAborted],
  );
  const byOffset = (a: { offset: number }, b: { offset: number }): number => a.offset - b.offset;
  const shown = (rs: { value: Buffer | string; offset: number }[]): string[] => rs.map((r) => `${r.offset}:${r.value}`);
  assert.deepEqual(
    shown(records(p.records, 0, p.abortedTransactions)),
    shown(sent.filter((s) => !s.value.startsWith("aborted")).sort(byOffset)),
  );
  // Without the broker's list, the aborted records are read too; the markers never are.
  assert.deepEqual(shown(records(p.records)), shown([...sent].sort(byOffset)));
  const { lastOffset } = wholeBatches(p.records);
  assert.equal(lastOffset, Number(p.highWatermark) - 1, "the commit marker is the last offset fetched");
  assert.ok(lastOffset > Math.max(...sent.map((s) => s.offset)));

  // From past the aborted transaction's records but before its marker, the broker still lists it: the marker ends
  // it, and the same producer's next transaction, committed, is read.
  const from = sent.find((s) => s.value === "p2")?.offset ?? -1;
  const q = await fetchRaw(topic, from);
  assert.deepEqual(
    q.abortedTransactions.map((a) => a.firstOffset),
    [firstAborted],
  );
  assert.deepEqual(
    shown(records(q.records, from, q.abortedTransactions)),
    shown(sent.filter((s) => !s.value.startsWith("aborted") && s.offset >= from).sort(byOffset)),
  );
});

test("a byte flipped inside a batch fails its CRC-32C: permanent kafka_batch_malformed", async (t) => {
  const topic = await kafkaTopic(t, { prefix: "rb-crc" });
  await produce(topic, 20, (i) => ({ value: `record ${i}` }), 10);
  const { records: bytes } = await fetchRaw(topic, 0);
  assert.equal(records(bytes).length, 20);
  const second = batchesOf(bytes)[1];
  assert.ok(second !== undefined);
  // A value byte of the second batch, where nothing but the checksum would notice.
  const flipped = Buffer.from(bytes);
  const at = second.end - 3;
  flipped[at] = (flipped[at] as number) ^ 0x01;
  assertMalformed(() => forEachRecord(flipped, 0, () => undefined));
  assert.throws(() => forEachRecord(flipped, 0, () => undefined), /CRC-32C mismatch in the batch at offset 10/);
});
