// The demo: creates a topic on the testbed's broker, produces sample multi-tenant records, runs the archiver into
// ./archive (file://, zstd, expression routing on _org_id and event_type) until every record is written, stops it
// cleanly (files complete, offsets committed), then prints the tree of files and the command to read one.
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { stringify } from "yaml";
import { kafka, need, uniqueName } from "../e2e/support/testbed.ts";
import { archiveFiles, freePort, groupOffsets, mainTs, nodeBin, produce, sumMetric } from "../e2e/support/archiver.ts";
import { quietIdleRequestQueues } from "../runtime/src/transport/kafkajs-queue.ts";

const RECORDS = 50_000;
const ORGS = ["acme", "globex", "initech", "umbrella", "hooli"];
const EVENTS = ["login", "logout", "purchase", "error"];
const root = resolve("archive");
const topic = uniqueName("demo-events");
const groupId = uniqueName("demo");

// The demo's own kafkajs clients, as the runtime's: no check re-armed every millisecond, nor Node's warning of it.
quietIdleRequestQueues();
const admin = kafka().admin();
await admin.connect();
await admin.createTopics({
  topics: [
    { topic, numPartitions: 3 },
    { topic: `${topic}-dlq`, numPartitions: 1 },
  ],
  waitForLeaders: true,
});
await admin.disconnect();
console.log(`created topic ${topic} (3 partitions)`);

await produce(topic, RECORDS, (i) => ({
  value: JSON.stringify({
    _org_id: ORGS[i % ORGS.length],
    event_type: EVENTS[(i >> 3) % EVENTS.length],
    seq: i,
    user: `user-${i % 1000}`,
    at: new Date(Date.UTC(2026, 11, 2, 12, 0, i % 3600)).toISOString(),
  }),
}));
console.log(`produced ${RECORDS} records`);

mkdirSync(root, { recursive: true });
const config = join(root, "..", ".demo-config.yaml");
writeFileSync(
  config,
  stringify({
    kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: groupId, topics: [topic] },
    archive: { destination: `file://${root}`, path_template: "{year}/{month}/{day}/{hour}" },
    buffer: { spool_dir: join(root, "..", ".demo-spool"), flush_age_secs: 1 },
    compression: { codec: "zstd", level: 3 },
    routing: { mode: "expression", expression_fields: ["_org_id", "event_type"] },
    dlq: { topic: `${topic}-dlq` },
    logger: { level: "info", format: "text" },
  }),
);
const addr = `127.0.0.1:${await freePort()}`;
const proc = spawn(nodeBin, [mainTs, "run", "--config", config, "--metrics-addr", addr], { stdio: "inherit" });
const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
for (;;) {
  await sleep(500);
  const text = await fetch(`http://${addr}/metrics`).then(
    (r) => r.text(),
    () => "",
  );
  if (sumMetric(text, "messages_written_total") >= RECORDS) break;
  if (proc.exitCode !== null) throw new Error(`the archiver exited early with ${proc.exitCode}`);
}
proc.kill("SIGTERM");
const code = await exited;
const { committed, end } = await groupOffsets(groupId, topic);
console.log(`\narchiver exited ${code}; committed offsets ${JSON.stringify(committed)} of ${JSON.stringify(end)}`);
const files = archiveFiles(root).filter((f) => f.path.startsWith(`${topic}/`));
console.log(`\n${files.length} files under ${root}/${topic}:`);
for (const f of files) console.log(`  ${f.path}  (${f.size} bytes)`);
if (files[0]) console.log(`\nread one:\n  zstd -dc ${join(root, files[0].path)} | head`);
process.exit(code ?? 1);
