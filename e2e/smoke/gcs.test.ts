import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { pipeline } from "node:stream/promises";
import { Readable } from "node:stream";
import { gcsBucket, gcsStorage } from "../support/testbed.ts";

test("fake-gcs-server: a resumable upload in several chunks reads back byte for byte", async (t) => {
  const name = await gcsBucket(t);
  const data = randomBytes(3 * 256 * 1024 + 1234);
  const file = gcsStorage().bucket(name).file("smoke/resumable.bin");
  // chunkSize forces several PUTs against one resumable session, so the session protocol itself is exercised.
  await pipeline(Readable.from([data]), file.createWriteStream({ resumable: true, chunkSize: 256 * 1024 }));
  const [meta] = await file.getMetadata();
  assert.equal(Number(meta.size), data.length);
  const [got] = await file.download();
  assert.ok(got.equals(data), "object differs from what was uploaded");
});
