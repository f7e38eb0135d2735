// native.ts: native addons are loaded by their first use, not by importing a module that uses them. A fresh process
// imports record-batch.ts (the event loop imports it for splitBatches alone) and reads one batch.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";

const CHILD = `
import { createRequire } from "node:module";
const cache = createRequire(import.meta.url).cache;
const loaded = () => ["@node-rs/crc32", "snappy"].filter((id) => Object.keys(cache).some((k) => k.includes("/node_modules/" + id + "/")));
const { forEachRecord } = await import(${JSON.stringify(new URL("../src/transport/record-batch.ts", import.meta.url).href)});
const atImport = loaded();
// A batch head (61 bytes) with magic 2 and a CRC-32C that cannot match: reading it checks the CRC, then refuses it.
const batch = Buffer.alloc(61);
batch.writeInt32BE(49, 8);
batch.writeInt8(2, 16);
batch.writeUInt32BE(1, 17);
let refused = "";
try { forEachRecord(batch, 0, () => undefined, []); } catch (err) { refused = err.message; }
console.log(JSON.stringify({ atImport, afterRead: loaded(), refused }));
`;

test("record-batch.ts loads @node-rs/crc32 at its first batch, and snappy only for a snappy batch", () => {
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", CHILD], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  const seen = JSON.parse(r.stdout) as { atImport: string[]; afterRead: string[]; refused: string };
  assert.deepEqual(seen.atImport, []);
  assert.deepEqual(seen.afterRead, ["@node-rs/crc32"]);
  assert.match(seen.refused, /CRC-32C mismatch/);
});
