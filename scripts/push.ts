// A sender for the archiver's Push RPC (transport: grpc): reads one record per line from a file or stdin and pushes
// them in batches, waiting out the archiver's pushback (RESOURCE_EXHAUSTED with grpc-retry-pushback-ms).
//
//   node_modules/.bin/node scripts/push.ts --address 127.0.0.1:50051 [--routing-key events] [--batch 1000]
//     [--ca ca.pem [--cert client.pem --key client.key]] [FILE]
import { createReadStream, readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { credentials } from "@grpc/grpc-js";
import { connectPush, pushWithRetry } from "../runtime/src/transport/push-client.ts";
import type { PushRequestInput } from "../runtime/src/transport/push-proto.ts";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    address: { type: "string", default: "127.0.0.1:50051" },
    "routing-key": { type: "string", default: "" },
    batch: { type: "string", default: "1000" },
    ca: { type: "string" },
    cert: { type: "string" },
    key: { type: "string" },
  },
});
const batchSize = Number(values.batch);
if (!Number.isInteger(batchSize) || batchSize < 1)
  throw new Error(`--batch ${values.batch}: must be a whole number above 0`);
const creds =
  values.ca === undefined
    ? credentials.createInsecure()
    : credentials.createSsl(
        readFileSync(values.ca),
        values.key === undefined ? null : readFileSync(values.key),
        values.cert === undefined ? null : readFileSync(values.cert),
      );
const client = connectPush(values.address, creds);
const input = positionals[0] === undefined ? process.stdin : createReadStream(positionals[0]);

let pending: PushRequestInput["records"] = [];
let pushed = 0;
let pushbacks = 0;
const flush = async () => {
  if (pending.length === 0) return;
  const res = await pushWithRetry(client, { records: pending }, () => pushbacks++);
  pushed += res.accepted;
  pending = [];
};
for await (const line of createInterface({ input, crlfDelay: Infinity })) {
  if (line === "") continue;
  pending.push({ payload: Buffer.from(line), routing_key: values["routing-key"] });
  if (pending.length >= batchSize) await flush();
}
await flush();
client.close();
console.log(`pushed ${pushed} records to ${values.address} (${pushbacks} pushbacks waited out)`);
