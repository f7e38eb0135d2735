import { test } from "node:test";
import assert from "node:assert/strict";
import { kafka, kafkaTopic, uniqueName } from "../support/testbed.ts";

test("kafka: 1,000 records produced and consumed back over 3 partitions", async (t) => {
  const topic = await kafkaTopic(t, { partitions: 3 });
  const client = kafka();
  const producer = client.producer();
  await producer.connect();
  const sent = Array.from({ length: 1000 }, (_, i) => ({ key: String(i % 7), value: JSON.stringify({ id: i }) }));
  await producer.send({ topic, acks: -1, messages: sent });
  await producer.disconnect();

  const consumer = client.consumer({ groupId: uniqueName("g") });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const seen = new Set<number>();
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`only ${seen.size} of 1000 records consumed in 60 s`)), 60_000);
    consumer
      .run({
        eachMessage: async ({ message }) => {
          seen.add((JSON.parse(message.value?.toString() ?? "null") as { id: number }).id);
          if (seen.size === sent.length) {
            clearTimeout(timer);
            resolve();
          }
        },
      })
      .catch(reject);
  });
  await consumer.disconnect();
  assert.equal(seen.size, 1000);
});
