// Produces COUNT JSON records to TOPIC, acks=all, and prints how many: run inside the kind cluster from the runtime
// image (its node_modules has kafkajs). Usage: node produce.ts BROKERS TOPIC COUNT
import { Kafka, logLevel } from "kafkajs";

const [brokers = "", topic = "", countText = ""] = process.argv.slice(2);
const count = Number(countText);
if (brokers === "" || topic === "" || !Number.isInteger(count) || count < 1) {
  console.error("usage: node produce.ts BROKERS TOPIC COUNT");
  process.exit(2);
}
const producer = new Kafka({
  clientId: "dfe-archiver-kind-e2e",
  brokers: brokers.split(","),
  logLevel: logLevel.WARN,
}).producer();
await producer.connect();
const BATCH = 500;
for (let start = 0; start < count; start += BATCH) {
  const messages = [];
  for (let i = start; i < Math.min(start + BATCH, count); i++)
    messages.push({ key: String(i), value: JSON.stringify({ _org_id: "acme", seq: i, at: new Date().toISOString() }) });
  await producer.send({ topic, acks: -1, messages });
}
await producer.disconnect();
console.log(JSON.stringify({ produced: count }));
