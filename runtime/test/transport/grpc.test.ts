// GrpcTransport against a real grpc-js client: pushes answered once queued, records handed on grouped by routing
// key, pushback when the queue is full or intake paused (a hint on unary, flow control on streams), the message size
// limit, and the shutdown that answers and hands on everything it accepted and refuses the rest.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { status, type ServiceError } from "@grpc/grpc-js";
import { pino } from "pino";
import { freePort, waitFor } from "../../../e2e/support/archiver.ts";
import { FULL_PUSHBACK_MS, GrpcTransport, grpcCredentials, PAUSED_PUSHBACK_MS } from "../../src/transport/grpc.ts";
import {
  connectPush,
  pushbackMs,
  pushWithRetry,
  streamPushes,
  type PushClient,
} from "../../src/transport/push-client.ts";
import type { PushRequestInput, PushResponse } from "../../src/transport/push-proto.ts";
import type { InboundBatch, RecordsBatch } from "../../src/records.ts";
import type { TransportSink } from "../../src/transport/types.ts";

const log = pino({ level: "silent" });

/** Collects batches; while `gate` is set, each onBatch waits for it, as a saturated pipeline does. */
class Sink implements TransportSink {
  readonly batches: RecordsBatch[] = [];
  gate: Promise<void> | undefined;
  async onBatch(batch: InboundBatch): Promise<void> {
    if (batch.records === undefined) throw new Error("a push listener hands records one by one");
    this.batches.push(batch);
    await this.gate;
  }
  onAssigned(): void {}
  onRevoked(): void {}
  payloads(): string[] {
    return this.batches.flatMap((b) => b.records.map((r) => (r.value ?? Buffer.alloc(0)).toString()));
  }
}

function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((r) => (open = r));
  return { promise, open };
}

async function listener(
  t: TestContext,
  opts: { queueRecords?: number; maxMessageBytes?: number } = {},
): Promise<{ transport: GrpcTransport; sink: Sink; client: PushClient }> {
  const transport = new GrpcTransport({
    listen: "127.0.0.1:0",
    credentials: grpcCredentials({}),
    maxMessageBytes: opts.maxMessageBytes ?? 1 << 20,
    queueRecords: opts.queueRecords ?? 1000,
    log,
  });
  const sink = new Sink();
  await transport.start(sink);
  const client = connectPush(`127.0.0.1:${transport.boundPort}`);
  t.after(async () => {
    client.close();
    await transport.close();
  });
  return { transport, sink, client };
}

const push = (payloads: string[], key = ""): PushRequestInput => ({
  records: payloads.map((p) => ({ payload: Buffer.from(p), routing_key: key })),
});

const range = (n: number, tag: string) => Array.from({ length: n }, (_, i) => `${tag}-${i}`);

async function refusal(p: Promise<unknown>): Promise<ServiceError> {
  try {
    await p;
  } catch (err) {
    return err as ServiceError;
  }
  assert.fail("the push was accepted");
}

test("a push is answered once queued; records are handed on in order, grouped by routing key", async (t) => {
  const { sink, client } = await listener(t);
  const res = await client.push({
    records: [
      { payload: Buffer.from("a1"), routing_key: "events", headers: [{ key: "h", value: Buffer.from("v") }] },
      { payload: Buffer.from("a2"), routing_key: "events" },
      { payload: Buffer.from("n1") },
      { payload: Buffer.from("l1"), routing_key: "logs" },
    ],
  });
  assert.equal(res.accepted, 4);
  assert.deepEqual(await client.push({ records: [] }), { accepted: 0 });
  await waitFor(
    () => sink.payloads().length === 4,
    10_000,
    () => `handed on: ${sink.payloads().join(",")}`,
  );
  assert.deepEqual(
    sink.batches.map((b) => [b.topic, b.records.map((r) => r.value?.toString())]),
    [
      ["events", ["a1", "a2"]],
      [undefined, ["n1"]],
      ["logs", ["l1"]],
    ],
  );
  const offsets = sink.batches.flatMap((b) => b.records.map((r) => Number(r.offset)));
  assert.deepEqual(offsets, [0, 1, 2, 3], "offsets number records in arrival order");
  assert.ok(sink.batches.every((b) => b.partition === 0 && b.highWatermark === undefined));
});

test("consecutive queued pushes with one routing key reach the pipeline as one batch", async (t) => {
  const { sink, client } = await listener(t);
  const held = gate();
  sink.gate = held.promise;
  await client.push(push(["first"], "k"));
  await waitFor(
    () => sink.batches.length === 1,
    10_000,
    () => "first batch not handed on",
  );
  for (let i = 0; i < 5; i++) await client.push(push(range(3, `p${i}`), "k"));
  held.open();
  sink.gate = undefined;
  await waitFor(
    () => sink.payloads().length === 16,
    10_000,
    () => `handed on ${sink.payloads().length}`,
  );
  assert.equal(sink.batches.length, 2, "the five queued pushes joined");
});

test("a full queue answers RESOURCE_EXHAUSTED with a pushback hint; the retry lands once it drains", async (t) => {
  const { transport, sink, client } = await listener(t, { queueRecords: 10 });
  const held = gate();
  sink.gate = held.promise;
  await client.push(push(range(6, "a")));
  await client.push(push(range(4, "b")));
  assert.equal(transport.queuedRecords, 10);
  const err = await refusal(client.push(push(["c-0"])));
  assert.equal(err.code, status.RESOURCE_EXHAUSTED);
  assert.equal(pushbackMs(err), FULL_PUSHBACK_MS);
  assert.match(err.details, /queue full: 10 records queued of grpc.queue_records/);

  let pushbacks = 0;
  const retried = pushWithRetry(client, push(["c-0"]), () => pushbacks++);
  await waitFor(
    () => pushbacks >= 2,
    10_000,
    () => "the retry was not pushed back",
  );
  held.open();
  sink.gate = undefined;
  assert.deepEqual(await retried, { accepted: 1 });
  await waitFor(
    () => sink.payloads().length === 11,
    10_000,
    () => `handed on ${sink.payloads().length}`,
  );
  assert.deepEqual(sink.payloads(), [...range(6, "a"), ...range(4, "b"), "c-0"]);
});

test("a push larger than the whole queue is taken into an empty queue", async (t) => {
  const { sink, client } = await listener(t, { queueRecords: 5 });
  assert.deepEqual(await client.push(push(range(12, "big"))), { accepted: 12 });
  await waitFor(
    () => sink.payloads().length === 12,
    10_000,
    () => "not handed on",
  );
});

test("paused intake answers RESOURCE_EXHAUSTED with the latch's hint and holds the queue until resumed", async (t) => {
  const { transport, sink, client } = await listener(t);
  const held = gate();
  sink.gate = held.promise;
  await client.push(push(["x-0"]));
  await waitFor(
    () => sink.batches.length === 1,
    10_000,
    () => "not handed on",
  );
  await client.push(push(["x-1"]));
  transport.pause();
  const err = await refusal(client.push(push(["x-2"])));
  assert.equal(err.code, status.RESOURCE_EXHAUSTED);
  assert.equal(pushbackMs(err), PAUSED_PUSHBACK_MS);
  assert.match(err.details, /intake paused/);
  held.open();
  sink.gate = undefined;
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(sink.payloads().length, 1, "paused, the queued push is not handed on");
  transport.resume();
  assert.deepEqual(await client.push(push(["x-2"])), { accepted: 1 });
  await waitFor(
    () => sink.payloads().length === 3,
    10_000,
    () => `handed on ${sink.payloads().join(",")}`,
  );
});

test("a message over max_message_bytes is refused without a pushback hint, so no sender retries it", async (t) => {
  const { sink, client } = await listener(t, { maxMessageBytes: 4096 });
  const err = await refusal(client.push(push(["y".repeat(8192)])));
  assert.equal(err.code, status.RESOURCE_EXHAUSTED);
  assert.equal(pushbackMs(err), undefined);
  await assert.rejects(pushWithRetry(client, push(["y".repeat(8192)])), (e: ServiceError) => e.code === 8);
  assert.deepEqual(await client.push(push(["y".repeat(1000)])), { accepted: 1 });
  await waitFor(
    () => sink.payloads().length === 1,
    10_000,
    () => "not handed on",
  );
});

test("several concurrent streams: each request answered in order, a full queue holds streams rather than fail them", async (t) => {
  const { transport, sink, client } = await listener(t, { queueRecords: 50 });
  const held = gate();
  sink.gate = held.promise;
  const STREAMS = 4;
  const PER = 30;
  const streams = Array.from({ length: STREAMS }, (_, s) =>
    streamPushes(
      client,
      Array.from({ length: PER }, (_, i) => push(range(5, `s${s}-${i}`), `k${s % 2}`)),
    ),
  );
  // 4 x 30 x 5 = 600 records against a queue of 50 held shut: the streams wait for room.
  await waitFor(
    () => sink.batches.length >= 1,
    10_000,
    () => "nothing handed on",
  );
  await new Promise((r) => setTimeout(r, 300));
  assert.ok(transport.queuedRecords <= 50, `the queue stays bounded (${transport.queuedRecords})`);
  held.open();
  sink.gate = undefined;
  const answers = await Promise.all(streams);
  for (const a of answers) assert.deepEqual(a, { responses: Array.from({ length: PER }, () => ({ accepted: 5 })) });
  await waitFor(
    () => sink.payloads().length === STREAMS * PER * 5,
    20_000,
    () => `handed on ${sink.payloads().length}`,
  );
  const all = sink.payloads();
  for (let s = 0; s < STREAMS; s++) {
    const mine = all.filter((p) => p.startsWith(`s${s}-`));
    assert.deepEqual(mine, Array.from({ length: PER }, (_, i) => range(5, `s${s}-${i}`)).flat(), `stream ${s} order`);
  }
  const streamOf = (payload: string) => Number(payload.split("-")[0]?.slice(1));
  for (const b of sink.batches) {
    for (const r of b.records)
      assert.equal(`k${streamOf(String(r.value)) % 2}`, b.topic, "batch holds one routing key");
  }
});

test("stopReceiving hands on every queued record, refuses new pushes and ends streams UNAVAILABLE", async (t) => {
  const { transport, sink, client } = await listener(t, { queueRecords: 25 });
  const held = gate();
  sink.gate = held.promise;
  await client.push(push(range(10, "q")));
  await client.push(push(range(10, "r")));
  // A stream whose first request is queued (answered) and whose second waits for room.
  const call = client.stream();
  const answered: PushResponse[] = [];
  call.on("data", (r: PushResponse) => answered.push(r));
  const ended = new Promise<ServiceError>((resolve) => call.on("error", resolve));
  await waitFor(
    () => sink.batches.length === 1,
    10_000,
    () => "not handed on",
  );
  call.write(push(["s-0"]));
  await waitFor(
    () => answered.length === 1,
    10_000,
    () => "stream request not answered",
  );
  call.write(push(range(30, "unqueued")));
  await new Promise((r) => setTimeout(r, 200));

  const stopping = transport.stopReceiving();
  let stopped = false;
  void stopping.then(() => (stopped = true));
  const err = await refusal(client.push(push(["late"])));
  assert.equal(err.code, status.UNAVAILABLE);
  const streamErr = await ended;
  assert.equal(streamErr.code, status.UNAVAILABLE);
  assert.deepEqual(answered, [{ accepted: 1 }], "only the queued request was answered");
  assert.equal(stopped, false, "stopReceiving waits for the queue to be handed on");
  held.open();
  sink.gate = undefined;
  await stopping;
  assert.deepEqual(sink.payloads(), [...range(10, "q"), ...range(10, "r"), "s-0"]);
  assert.equal(transport.queuedRecords, 0);
});

test("a drained listener frees its address, so the next pipeline of a config reload binds it again", async (t) => {
  const port = await freePort();
  const open = async () => {
    const transport = new GrpcTransport({
      listen: `127.0.0.1:${port}`,
      credentials: grpcCredentials({}),
      maxMessageBytes: 1 << 20,
      queueRecords: 100,
      log,
    });
    const sink = new Sink();
    await transport.start(sink);
    t.after(() => transport.close());
    return { transport, sink };
  };
  const client = connectPush(`127.0.0.1:${port}`, undefined, { "grpc.initial_reconnect_backoff_ms": 100 });
  t.after(() => client.close());
  const first = await open();
  await pushWithRetry(client, push(["one"]));
  await first.transport.stopReceiving();
  await first.transport.close();
  const second = await open();
  for (let tries = 0; ; tries++) {
    try {
      await client.push(push(["two"]));
      break;
    } catch (err) {
      // The channel reconnects to the new listener after the old one went away.
      if ((err as ServiceError).code !== status.UNAVAILABLE || tries > 50) throw err;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  assert.deepEqual(first.sink.payloads(), ["one"]);
  await waitFor(
    () => second.sink.payloads().length === 1,
    10_000,
    () => "not handed on",
  );
  assert.deepEqual(second.sink.payloads(), ["two"]);
});
