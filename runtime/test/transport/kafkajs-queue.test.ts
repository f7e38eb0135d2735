// kafkajs's request queue against the testbed broker: idle, it re-armed its check every millisecond with a negative
// delay (tulios/kafkajs#1704, #1751; Node warns of that once a process); quieted, an idle connection arms nothing,
// and queued requests still go out.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { kafka, kafkaTopic } from "../../../e2e/support/testbed.ts";
import { quietIdleRequestQueues } from "../../src/transport/kafkajs-queue.ts";

const queue = (
  createRequire(import.meta.url)("kafkajs/src/network/requestQueue/index.js") as {
    prototype: { checkPendingRequests(): void; scheduleCheckPendingRequests(): void };
  }
).prototype;
// As kafkajs ships it, read before any client is made: the testbed's clients are quieted (e2e/support/testbed.ts).
const shipped = queue.scheduleCheckPendingRequests;

test("an idle kafkajs connection arms no check once quieted; requests queued behind in-flight ones still go out", async (t) => {
  const topic = await kafkaTopic(t, { prefix: "kjsq" });
  let checks = 0;
  const check = queue.checkPendingRequests;
  queue.checkPendingRequests = function (this: unknown) {
    checks++;
    check.call(this);
  };
  t.after(() => (queue.checkPendingRequests = check));

  quietIdleRequestQueues();
  const quiet = queue.scheduleCheckPendingRequests;
  assert.notEqual(quiet, shipped, "kafkajs's queue was left as it is: its code is not the one the patch knows");
  queue.scheduleCheckPendingRequests = shipped;
  t.after(() => (queue.scheduleCheckPendingRequests = quiet));

  // One request in flight at a time, so the sends below queue as pending behind it.
  const producer = kafka("kafkajs-queue-test").producer({ maxInFlightRequests: 1 });
  await producer.connect();
  t.after(() => producer.disconnect());
  await producer.send({ topic, messages: [{ value: "before" }] });

  // As kafkajs ships it: the idle connection checks its queue about every millisecond. Should kafkajs stop doing
  // so, this fails, and the patch (a no-op then) can go.
  checks = 0;
  await sleep(300);
  const idleChecks = checks;
  assert.ok(idleChecks > 50, `kafkajs checked its idle queue ${idleChecks} times in 0.3 s`);

  queue.scheduleCheckPendingRequests = quiet;
  await sleep(20);
  checks = 0;
  await sleep(300);
  assert.ok(checks <= 2, `quieted, an idle connection checked ${checks} times in 0.3 s (${idleChecks} before)`);

  const sent = await Promise.all(
    Array.from({ length: 50 }, (_, i) => producer.send({ topic, messages: [{ value: `m${i}` }] })),
  );
  assert.equal(sent.length, 50);
  assert.ok(sent.every((r) => r[0]?.errorCode === 0));
  const admin = kafka("kafkajs-queue-test-admin").admin();
  await admin.connect();
  t.after(() => admin.disconnect());
  const [end] = await admin.fetchTopicOffsets(topic);
  assert.equal(end?.offset, "51", "every record sent, the one before and the fifty queued");
});
