import { test } from "node:test";
import assert from "node:assert/strict";
import { Kafka, logLevel } from "kafkajs";
import { kafka, kafkaTopic, need, uniqueName } from "../support/testbed.ts";

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

test("kafka: the SASL/SCRAM listener refuses a wrong password and takes the testbed user", async (t) => {
  const topic = await kafkaTopic(t);
  const mechanism = need("TESTBED_KAFKA_SASL_MECHANISM") as "scram-sha-256";
  const brokers = need("TESTBED_KAFKA_SASL_BROKERS").split(",");
  const sasl = { mechanism, username: need("TESTBED_KAFKA_SASL_USER"), password: need("TESTBED_KAFKA_SASL_PASSWORD") };
  // The refusal first: after a good login in the same process, kafkajs was seen to connect with a wrong password.
  const wrong = new Kafka({
    brokers,
    sasl: { ...sasl, password: "wrong" },
    logLevel: logLevel.NOTHING,
    retry: { retries: 0 },
  });
  await assert.rejects(wrong.producer().connect(), /SASL|authentication/i);
  const producer = new Kafka({ brokers, sasl, logLevel: logLevel.NOTHING }).producer();
  await producer.connect();
  await producer.send({ topic, acks: -1, messages: [{ value: "over sasl" }] });
  await producer.disconnect();
});
