// gs:// against the testbed's fake-gcs-server, through a proxy that watches (and interrupts) the upload's requests.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { truncateSync } from "node:fs";
import { ArchiverError } from "../../src/errors.ts";
import { openObjectBackend } from "../../src/store/object/open.ts";
import { STAGED_UNREADABLE, UPLOAD_ABORTED } from "../../src/store/object/types.ts";
import { gcsBucket, need } from "../../../e2e/support/testbed.ts";
import { BIG, CHUNK, META, captureLog, config, proxy, staged, type Exchange } from "./helpers.ts";

const isSession = (x: Exchange) => x.method === "POST" && /uploadType=resumable/.test(x.url);
const isChunk = (x: Exchange) => x.method === "PUT" && /[?&]upload_id=/.test(x.url);
const isSimple = (x: Exchange) => x.method === "POST" && /uploadType=multipart/.test(x.url);
const isCancel = (x: Exchange) => x.method === "DELETE" && /[?&]upload_id=/.test(x.url);

async function setup(t: TestContext, hooks: Parameters<typeof proxy>[2] = {}) {
  const bucket = await gcsBucket(t);
  const via = await proxy(t, need("TESTBED_GCS_ENDPOINT"), hooks);
  const { log, lines } = captureLog();
  const gcs = { endpoint: via.url, project_id: need("TESTBED_GCS_PROJECT") };
  const backend = await openObjectBackend(
    config(`  destination: gs://${bucket}/pre/fix\n  gcs: ${JSON.stringify(gcs)}\n`),
    {},
    log,
  );
  return { bucket, via, backend, lines };
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

// Read back over the JSON API with fetch: the library's download path warns of listener leaks under node:test.
const objectUrl = (bucket: string, key: string) =>
  `${need("TESTBED_GCS_ENDPOINT")}/storage/v1/b/${bucket}/o/${encodeURIComponent(key)}`;

async function readBack(bucket: string, key: string): Promise<{ body: Buffer; metadata: unknown }> {
  const meta = await fetch(objectUrl(bucket, key));
  assert.equal(meta.status, 200, `${key} is not in the bucket`);
  const body = await fetch(`${objectUrl(bucket, key)}?alt=media`);
  return {
    body: Buffer.from(await body.arrayBuffer()),
    metadata: ((await meta.json()) as { metadata?: unknown }).metadata,
  };
}

const exists = async (bucket: string, key: string) => (await fetch(objectUrl(bucket, key))).status === 200;

test("gcs: files up to one chunk go in one request, larger ones resumable, read back byte for byte with metadata", async (t) => {
  const { bucket, via, backend } = await setup(t);
  for (const [name, size, chunks] of [
    ["big", BIG, 4],
    ["past-chunk", CHUNK + 1, 2],
    ["at-chunk", CHUNK, 0],
    ["small", 100_000, 0],
    ["empty", 0, 0],
  ] as const) {
    const file = await staged(t, size);
    const key = backend.key(`2026/01/02/${name}.zst`);
    assert.equal(key, `pre/fix/2026/01/02/${name}.zst`);
    const before = via.exchanges.length;
    await backend.upload({ stagedPath: file.path, size, key, meta: META });
    const sent = via.exchanges.slice(before);
    if (chunks === 0) assert.deepEqual(sent.map(isSimple), [true], `${name}: one request`);
    else {
      assert.equal(sent.filter(isSession).length, 1, `${name}: one resumable session`);
      assert.equal(sent.filter(isChunk).length, chunks, `${name}: chunk requests`);
    }
    const { body, metadata } = await readBack(bucket, key);
    assert.ok(body.equals(file.data), `${name}: the object differs from the staged file`);
    assert.deepEqual(metadata, {
      records: "42",
      codec: "zstd",
      "opened-at": "2026-01-02T03:04:05.006Z",
      "closed-at": "2026-01-02T03:09:05.006Z",
    });
  }
});

test("gcs: a one-request upload the store fails is retryable and commits nothing; a short staged copy sends nothing", async (t) => {
  const { bucket, via, backend } = await setup(t, { refuse: (x) => (isSimple(x) ? 503 : undefined) });
  const file = await staged(t, 1000);
  const key = backend.key("refused.zst");
  const err = await failure(backend.upload({ stagedPath: file.path, size: 1000, key, meta: META }));
  assert.equal(err.kind, "retryable");
  assert.equal(err.code, "http_503");
  assert.ok(via.exchanges.every(isSimple), "only one-request uploads were sent");
  assert.equal(await exists(bucket, key), false);
  const sent = via.exchanges.length;
  truncateSync(file.path, 999);
  const short = await failure(backend.upload({ stagedPath: file.path, size: 1000, key, meta: META }));
  assert.equal(short.code, STAGED_UNREADABLE);
  assert.equal(via.exchanges.length, sent);
});

test("gcs: a missing bucket is retryable; an object name the store refuses is permanent", async (t) => {
  const { bucket, backend } = await setup(t);
  const file = await staged(t, 1000);
  const gs = await openObjectBackend(
    config(`  destination: gs://${bucket}-missing\n  gcs: { endpoint: '${need("TESTBED_GCS_ENDPOINT")}' }\n`),
    {},
    captureLog().log,
  );
  // The one-request upload's answer names its reason; the resumable session's has none.
  const gone = await failure(gs.upload({ stagedPath: file.path, size: 1000, key: gs.key("x.zst"), meta: META }));
  assert.equal(gone.kind, "retryable");
  assert.equal(gone.code, "notFound");
  assert.match(gone.message, /HTTP 404/);
  const big = await staged(t, CHUNK + 1);
  const goneBig = await failure(gs.upload({ stagedPath: big.path, size: CHUNK + 1, key: gs.key("x.zst"), meta: META }));
  assert.equal(goneBig.kind, "retryable");
  assert.equal(goneBig.code, "http_404");
  // fake-gcs-server keeps objects as files, so it refuses a segment past the file system's 255-byte name limit
  // with the 400 `invalid` GCS gives an invalid object name.
  const key = backend.key(`a/${"n".repeat(300)}`);
  const refused = await failure(backend.upload({ stagedPath: file.path, size: 1000, key, meta: META }));
  assert.equal(refused.code, "invalid");
  assert.equal(refused.kind, "permanent");
});

test("gcs: a key over 1024 bytes is refused for good before any request", async (t) => {
  const { via, backend } = await setup(t);
  const file = await staged(t, 1000);
  const refused = await failure(
    backend.upload({ stagedPath: file.path, size: 1000, key: backend.key("k".repeat(1100)), meta: META }),
  );
  assert.equal(refused.code, "key_too_long");
  assert.equal(via.exchanges.length, 0);
});

test("gcs: an upload aborted after its first chunk is UPLOAD_ABORTED, cancels its session and commits nothing", async (t) => {
  const ac = new AbortController();
  let answered = 0;
  const { bucket, via, backend } = await setup(t, {
    onResponse(x) {
      if (isChunk(x) && x.status === 308 && ++answered === 1) ac.abort();
    },
  });
  const file = await staged(t, BIG);
  const key = backend.key("aborted.zst");
  const err = await failure(backend.upload({ stagedPath: file.path, size: BIG, key, meta: META, signal: ac.signal }));
  assert.equal(err.code, UPLOAD_ABORTED);
  assert.equal(err.kind, "retryable");
  assert.equal(via.exchanges.filter(isCancel).length, 1, "the session was cancelled");
  assert.equal(await exists(bucket, key), false);
});

test("gcs: a staged copy that shrinks mid-upload is STAGED_UNREADABLE, and a failed cancel is logged", async (t) => {
  let cut = false;
  const file = await staged(t, 5 * CHUNK + CHUNK / 2);
  const { bucket, via, backend, lines } = await setup(t, {
    onRequest(x) {
      // At the first chunk's request the last chunks are not read yet: the stream holds one chunk ahead.
      if (isChunk(x) && !cut) {
        cut = true;
        truncateSync(file.path, CHUNK + 10);
      }
    },
    refuse: (x) => (isCancel(x) ? 503 : undefined),
  });
  const key = backend.key("shrunk.zst");
  const err = await failure(backend.upload({ stagedPath: file.path, size: file.data.length, key, meta: META }));
  assert.equal(err.code, STAGED_UNREADABLE);
  assert.equal(err.kind, "permanent");
  assert.equal(await exists(bucket, key), false, "a short stream committed an object");
  assert.equal(via.exchanges.filter(isCancel).length, 1);
  const warned = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.level === 40);
  assert.equal(warned.length, 1, lines.join("\n"));
  assert.equal(warned[0]!.object, `gs://${bucket}/${key}`);
  assert.equal(warned[0]!.status, 503);
  assert.ok(!lines.join("\n").includes("upload_id="), "the session URI is its credential; it stays out of logs");
});
