import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { azureContainer, blobService } from "../support/testbed.ts";

test("azurite: a block blob staged in blocks and committed reads back byte for byte", async (t) => {
  const name = await azureContainer(t);
  const blob = blobService().getContainerClient(name).getBlockBlobClient("smoke/blocks.bin");
  const blocks = [randomBytes(1024 * 1024), randomBytes(777)];
  const ids = blocks.map((_, i) => Buffer.from(`block-${String(i).padStart(6, "0")}`).toString("base64"));
  for (const [i, b] of blocks.entries()) await blob.stageBlock(ids[i] ?? "", b, b.length);
  await blob.commitBlockList(ids, { metadata: { records: "2" } });
  const got = await blob.downloadToBuffer();
  assert.ok(got.equals(Buffer.concat(blocks)));
  const props = await blob.getProperties();
  assert.equal(props.metadata?.["records"], "2");
});
