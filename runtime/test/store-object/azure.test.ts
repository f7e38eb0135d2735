// az:// against the testbed's Azurite, through a proxy that watches (and interrupts) the upload's requests.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { truncateSync } from "node:fs";
import { ArchiverError } from "../../src/errors.ts";
import { openObjectBackend } from "../../src/store/object/open.ts";
import { STAGED_UNREADABLE, UPLOAD_ABORTED } from "../../src/store/object/types.ts";
import { azureContainer, blobService, need } from "../../../e2e/support/testbed.ts";
import { BIG, CHUNK, META, captureLog, config, inFlight, proxy, staged, type Exchange } from "./helpers.ts";

const isBlock = (x: Exchange) => x.method === "PUT" && /[?&]comp=block(&|$)/.test(x.url);
const isPutBlob = (x: Exchange) => x.method === "PUT" && !/[?&]comp=/.test(x.url);
const isCommit = (x: Exchange) => x.method === "PUT" && /[?&]comp=blocklist/.test(x.url);

/** The Azurite endpoint (account in its path) moved onto `origin`. */
const endpointAt = (origin: string) => {
  const azurite = new URL(need("TESTBED_AZURITE_BLOB_ENDPOINT"));
  return `${origin}${azurite.pathname}`;
};

function azure(container: string, endpoint: string, key = need("TESTBED_AZURITE_KEY")) {
  const section = { endpoint, account_key: key };
  return openObjectBackend(
    config(`  destination: az://${container}/pre/fix\n  azure: ${JSON.stringify(section)}\n`),
    {},
    captureLog().log,
  );
}

async function setup(t: TestContext, hooks: Parameters<typeof proxy>[2] = {}) {
  const container = await azureContainer(t);
  const via = await proxy(t, new URL(need("TESTBED_AZURITE_BLOB_ENDPOINT")).origin, hooks);
  return { container, via, backend: await azure(container, endpointAt(via.url)) };
}

async function failure(p: Promise<unknown>): Promise<ArchiverError> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof ArchiverError, `expected an ArchiverError, got ${String(err)}`);
    return err;
  }
  assert.fail("the upload succeeded");
}

const blob = (container: string, key: string) => blobService().getContainerClient(container).getBlockBlobClient(key);

test("azure: files up to one chunk go in one Put Blob with their MD5, larger ones as blocks, read back byte for byte with metadata", async (t) => {
  const blocks = inFlight(isBlock);
  const { container, via, backend } = await setup(t, blocks);
  for (const [name, size, expectedBlocks] of [
    ["big", BIG, 4],
    ["past-chunk", CHUNK + 1, 2],
    ["at-chunk", CHUNK, 0],
    ["small", 100_000, 0],
    ["empty", 0, 0],
  ] as const) {
    const file = await staged(t, size);
    const key = backend.key(`2026/01/02/${name}.zst`);
    assert.equal(key, `pre/fix/2026/01/02/${name}.zst`);
    const before = { blocks: blocks.counter.total, exchanges: via.exchanges.length };
    await backend.upload({ stagedPath: file.path, size, key, meta: META });
    const sent = via.exchanges.slice(before.exchanges);
    assert.equal(blocks.counter.total - before.blocks, expectedBlocks, `${name}: blocks staged`);
    const md5 = createHash("md5").update(file.data).digest("base64");
    if (expectedBlocks === 0) {
      assert.deepEqual(sent.map(isPutBlob), [true], `${name}: one request`);
      assert.equal(sent[0]!.headers["content-md5"], md5, `${name}: its MD5`);
    } else assert.equal(sent.filter(isCommit).length, 1, `${name}: one commit`);
    const body = await blob(container, key).downloadToBuffer();
    assert.ok(body.equals(file.data), `${name}: the blob differs from the staged file`);
    const props = await blob(container, key).getProperties();
    assert.deepEqual(props.metadata, {
      records: "42",
      codec: "zstd",
      opened_at: "2026-01-02T03:04:05.006Z",
      closed_at: "2026-01-02T03:09:05.006Z",
    });
    // A blob put whole carries the MD5 the service checked.
    if (expectedBlocks === 0) assert.equal(Buffer.from(props.contentMD5 ?? []).toString("base64"), md5);
    // Every block has one id width, as the service requires.
    const list = await blob(container, key).getBlockList("committed");
    assert.equal(new Set(list.committedBlocks?.map((b) => b.name.length)).size, Math.min(1, expectedBlocks));
  }
});

test("azure: a Put Blob the service fails is retryable and commits nothing; a short staged copy sends nothing", async (t) => {
  const { container, via, backend } = await setup(t, { refuse: (x) => (isPutBlob(x) ? 503 : undefined) });
  const file = await staged(t, 1000);
  const key = backend.key("refused.zst");
  const err = await failure(backend.upload({ stagedPath: file.path, size: 1000, key, meta: META }));
  assert.equal(err.kind, "retryable");
  assert.match(err.message, /^put blob az:\/\//);
  assert.ok(via.exchanges.every(isPutBlob), "only Put Blob requests were sent");
  assert.equal(await blob(container, key).exists(), false);
  const sent = via.exchanges.length;
  truncateSync(file.path, 999);
  const short = await failure(backend.upload({ stagedPath: file.path, size: 1000, key, meta: META }));
  assert.equal(short.code, STAGED_UNREADABLE);
  assert.equal(via.exchanges.length, sent);
});

test("azure: a file of 7 blocks never has more than 4 in flight", async (t) => {
  const blocks = inFlight(isBlock);
  const { container, backend } = await setup(t, blocks);
  const file = await staged(t, 6 * CHUNK + 1000);
  const key = backend.key("seven.zst");
  await backend.upload({ stagedPath: file.path, size: file.data.length, key, meta: META });
  assert.equal(blocks.counter.total, 7);
  assert.ok(blocks.counter.max <= 4, `${blocks.counter.max} blocks in flight at once`);
  assert.ok((await blob(container, key).downloadToBuffer()).equals(file.data));
});

test("azure: a wrong key and a missing container are retryable, and the key is in no message", async (t) => {
  const container = await azureContainer(t);
  const file = await staged(t, 1000);
  const wrong = Buffer.from("not the account key, but long enough").toString("base64");
  const badKey = await azure(container, need("TESTBED_AZURITE_BLOB_ENDPOINT"), wrong);
  const denied = await failure(badKey.upload({ stagedPath: file.path, size: 1000, key: badKey.key("x"), meta: META }));
  assert.equal(denied.kind, "retryable");
  assert.match(denied.code, /^Authori[sz]ationFailure$|^AuthenticationFailed$/);
  assert.ok(!denied.message.includes(wrong) && !JSON.stringify(denied).includes(wrong));

  const missing = await azure(`${container}-missing`, need("TESTBED_AZURITE_BLOB_ENDPOINT"));
  const gone = await failure(missing.upload({ stagedPath: file.path, size: 1000, key: missing.key("x"), meta: META }));
  assert.equal(gone.kind, "retryable");
  assert.equal(gone.code, "ContainerNotFound");
});

test("azure: a key over 1024 bytes is refused for good before any request", async (t) => {
  const { via, backend } = await setup(t);
  const file = await staged(t, 1000);
  const refused = await failure(
    backend.upload({ stagedPath: file.path, size: 1000, key: backend.key("k".repeat(1100)), meta: META }),
  );
  assert.equal(refused.code, "key_too_long");
  assert.equal(via.exchanges.length, 0);
});

test("azure: an upload aborted after its first block is UPLOAD_ABORTED and commits nothing", async (t) => {
  const ac = new AbortController();
  let answered = 0;
  const { container, via, backend } = await setup(t, {
    onResponse(x) {
      if (isBlock(x) && x.status === 201 && ++answered === 1) ac.abort();
    },
  });
  const file = await staged(t, BIG);
  const key = backend.key("aborted.zst");
  const err = await failure(backend.upload({ stagedPath: file.path, size: BIG, key, meta: META, signal: ac.signal }));
  assert.equal(err.code, UPLOAD_ABORTED);
  assert.equal(err.kind, "retryable");
  assert.equal(via.exchanges.filter(isCommit).length, 0);
  assert.equal(await blob(container, key).exists(), false);
});

test("azure: a staged copy that shrinks mid-upload is STAGED_UNREADABLE and commits nothing", async (t) => {
  let cut = false;
  const file = await staged(t, 5 * CHUNK + CHUNK / 2);
  const { container, via, backend } = await setup(t, {
    onRequest(x) {
      // At the first block's request no block has been answered, so the fifth and sixth are not read yet.
      if (isBlock(x) && !cut) {
        cut = true;
        truncateSync(file.path, CHUNK + 10);
      }
    },
  });
  const key = backend.key("shrunk.zst");
  const err = await failure(backend.upload({ stagedPath: file.path, size: file.data.length, key, meta: META }));
  assert.equal(err.code, STAGED_UNREADABLE);
  assert.equal(err.kind, "permanent");
  assert.equal(via.exchanges.filter(isCommit).length, 0);
  assert.equal(await blob(container, key).exists(), false);
});
