// minio:// against the testbed's MinIO, through a proxy that watches (and interrupts) the upload's requests.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { truncateSync } from "node:fs";
import { crc32 } from "node:zlib";
import { GetObjectCommand, HeadObjectCommand, ListMultipartUploadsCommand } from "@aws-sdk/client-s3";
import { ArchiverError } from "../../src/errors.ts";
import { openObjectBackend } from "../../src/store/object/open.ts";
import { STAGED_UNREADABLE, UPLOAD_ABORTED, type ObjectBackend } from "../../src/store/object/types.ts";
import { minioBucket, need, s3Client } from "../../../e2e/support/testbed.ts";
import { BIG, CHUNK, META, captureLog, config, inFlight, proxy, staged, type Exchange } from "./helpers.ts";

const isPart = (x: Exchange) => x.method === "PUT" && /[?&]partNumber=/.test(x.url);
const isAbort = (x: Exchange) => x.method === "DELETE" && /[?&]uploadId=/.test(x.url);

function minio(bucket: string, endpoint: string, log = captureLog().log, secret = need("TESTBED_MINIO_SECRET_KEY")) {
  const section = {
    endpoint,
    access_key: need("TESTBED_MINIO_ACCESS_KEY"),
    secret_key: secret,
    region: need("TESTBED_MINIO_REGION"),
  };
  return openObjectBackend(
    config(`  destination: minio://${bucket}/pre/fix\n  minio: ${JSON.stringify(section)}\n`),
    {},
    log,
  );
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

async function pendingUploads(bucket: string): Promise<number> {
  const s3 = s3Client();
  try {
    return (await s3.send(new ListMultipartUploadsCommand({ Bucket: bucket }))).Uploads?.length ?? 0;
  } finally {
    s3.destroy();
  }
}

async function readBack(bucket: string, key: string): Promise<{ body: Buffer; metadata: Record<string, string> }> {
  const s3 = s3Client();
  try {
    const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
    const body = Buffer.from(await got.Body!.transformToByteArray());
    return { body, metadata: got.Metadata ?? {} };
  } finally {
    s3.destroy();
  }
}

async function exists(bucket: string, key: string): Promise<boolean> {
  const s3 = s3Client();
  try {
    await s3.send(new HeadObjectCommand({ Bucket: bucket, Key: key }));
    return true;
  } catch {
    return false;
  } finally {
    s3.destroy();
  }
}

const isPut = (x: Exchange) => x.method === "PUT" && !/[?&](partNumber|uploadId)=/.test(x.url);
const isCreate = (x: Exchange) => x.method === "POST" && /[?&]uploads(=|&|$)/.test(x.url);

/** The CRC32 of `data` as S3 carries it: big-endian, base64. */
const crc32Of = (data: Buffer) => {
  const out = Buffer.alloc(4);
  out.writeUInt32BE(crc32(data));
  return out.toString("base64");
};

test("minio: files up to one chunk go in one PutObject with their CRC32, larger ones as multipart, read back byte for byte with metadata", async (t) => {
  const bucket = await minioBucket(t);
  const parts = inFlight(isPart);
  const via = await proxy(t, need("TESTBED_MINIO_ENDPOINT"), parts);
  const backend = await minio(bucket, via.url);
  for (const [name, size, expectedParts] of [
    ["big", BIG, 4],
    ["past-chunk", CHUNK + 1, 2],
    ["at-chunk", CHUNK, 0],
    ["small", 100_000, 0],
    ["empty", 0, 0],
  ] as const) {
    const file = await staged(t, size);
    const key = backend.key(`2026/01/02/${name}.zst`);
    assert.equal(key, `pre/fix/2026/01/02/${name}.zst`);
    const before = { parts: parts.counter.total, exchanges: via.exchanges.length };
    await backend.upload({ stagedPath: file.path, size, key, meta: META });
    const sent = via.exchanges.slice(before.exchanges);
    assert.equal(parts.counter.total - before.parts, expectedParts, `${name}: parts sent`);
    if (expectedParts === 0) {
      assert.deepEqual(
        sent.map((x) => x.method),
        ["PUT"],
        `${name}: one request`,
      );
      assert.equal(sent[0]!.headers["x-amz-checksum-crc32"], crc32Of(file.data), `${name}: its CRC32`);
      assert.equal(sent[0]!.headers["content-length"], String(size));
    } else {
      assert.equal(sent.filter(isCreate).length, 1, `${name}: one multipart upload`);
      assert.equal(sent.filter(isPut).length, 0, `${name}: no PutObject`);
      // Every part carries its CRC32 too.
      assert.ok(sent.filter(isPart).every((x) => typeof x.headers["x-amz-checksum-crc32"] === "string"));
    }
    const got = await readBack(bucket, key);
    assert.ok(got.body.equals(file.data), `${name}: the object differs from the staged file`);
    assert.deepEqual(got.metadata, {
      records: "42",
      codec: "zstd",
      "opened-at": "2026-01-02T03:04:05.006Z",
      "closed-at": "2026-01-02T03:09:05.006Z",
    });
  }
  assert.equal(await pendingUploads(bucket), 0);
});

test("minio: a PutObject the store fails is retryable and leaves nothing; one that is aborted is UPLOAD_ABORTED", async (t) => {
  const ac = new AbortController();
  let refusals = 0;
  const run = await watched(t, 1000, () => ({
    refuse(x) {
      if (!isPut(x)) return undefined;
      // The caller aborts while its PutObject is in flight; the store never sees it.
      if (x.url.includes("aborted.zst")) {
        ac.abort();
        return 503;
      }
      return refusals++ < 3 ? 503 : undefined;
    },
  }));
  const { bucket, file, key, backend, via } = run;
  const failed = await failure(backend.upload({ stagedPath: file.path, size: 1000, key, meta: META }));
  assert.equal(failed.kind, "retryable");
  assert.match(failed.message, /^put object minio:\/\/.*\/interrupted\.zst: /);
  // The SDK's own three tries, each a whole PutObject, and nothing else: no upload to abort.
  assert.deepEqual(
    via.exchanges.map((x) => [x.method, x.status]),
    [
      ["PUT", 503],
      ["PUT", 503],
      ["PUT", 503],
    ],
  );
  assert.equal(await exists(bucket, key), false);
  // The next attempt (the staging store's retry) is a fresh PutObject that succeeds.
  await backend.upload({ stagedPath: file.path, size: 1000, key, meta: META });
  assert.ok((await readBack(bucket, key)).body.equals(file.data));
  const aborted = await failure(
    backend.upload({
      stagedPath: file.path,
      size: 1000,
      key: backend.key("aborted.zst"),
      meta: META,
      signal: ac.signal,
    }),
  );
  assert.equal(aborted.code, UPLOAD_ABORTED);
  assert.equal(aborted.kind, "retryable");
  assert.equal(await exists(bucket, backend.key("aborted.zst")), false);
  assert.equal(await pendingUploads(bucket), 0);
});

test("minio: a staged copy shorter than its size is STAGED_UNREADABLE before any request", async (t) => {
  const run = await watched(t, 1000, () => ({}));
  const { file, key, backend, via } = run;
  truncateSync(file.path, 999);
  const err = await failure(backend.upload({ stagedPath: file.path, size: 1000, key, meta: META }));
  assert.equal(err.code, STAGED_UNREADABLE);
  assert.equal(err.kind, "permanent");
  assert.equal(via.exchanges.length, 0);
});

test("minio: a file of 7 parts never has more than 4 in flight", async (t) => {
  const bucket = await minioBucket(t);
  const parts = inFlight(isPart);
  const via = await proxy(t, need("TESTBED_MINIO_ENDPOINT"), parts);
  const file = await staged(t, 6 * CHUNK + 1000);
  const backend = await minio(bucket, via.url);
  const key = backend.key("seven.zst");
  await backend.upload({ stagedPath: file.path, size: file.data.length, key, meta: META });
  assert.equal(parts.counter.total, 7);
  assert.ok(parts.counter.max <= 4, `${parts.counter.max} parts in flight at once`);
  assert.ok((await readBack(bucket, key)).body.equals(file.data));
});

test("minio: a wrong secret and a missing bucket are retryable, and the secret is in no message or log", async (t) => {
  const bucket = await minioBucket(t);
  const file = await staged(t, 1000);
  const wrong = `wrong-${need("TESTBED_MINIO_SECRET_KEY")}`;
  const { log, lines } = captureLog();
  const badKey = await minio(bucket, need("TESTBED_MINIO_ENDPOINT"), log, wrong);
  const denied = await failure(
    badKey.upload({ stagedPath: file.path, size: 1000, key: badKey.key("x.zst"), meta: META }),
  );
  assert.equal(denied.kind, "retryable");
  assert.equal(denied.code, "SignatureDoesNotMatch");
  assert.ok(!denied.message.includes(wrong) && !JSON.stringify(denied).includes(wrong));
  assert.ok(!lines.join("\n").includes(wrong));

  const missing = await minio(`${bucket}-missing`, need("TESTBED_MINIO_ENDPOINT"));
  const gone = await failure(
    missing.upload({ stagedPath: file.path, size: 1000, key: missing.key("x.zst"), meta: META }),
  );
  assert.equal(gone.kind, "retryable");
  assert.equal(gone.code, "NoSuchBucket");
  assert.match(gone.message, /minio:\/\/.*-missing\/pre\/fix\/x\.zst/);
});

test("minio: a key over 1024 bytes is refused for good before any request", async (t) => {
  const bucket = await minioBucket(t);
  const via = await proxy(t, need("TESTBED_MINIO_ENDPOINT"));
  const backend = await minio(bucket, via.url);
  const file = await staged(t, 1000);
  const key = backend.key("k".repeat(1100));
  const refused = await failure(backend.upload({ stagedPath: file.path, size: 1000, key, meta: META }));
  assert.equal(refused.code, "key_too_long");
  assert.equal(refused.kind, "permanent");
  assert.equal(via.exchanges.length, 0);
});

/** A bucket, a staged file of `size` and a backend whose requests pass a proxy with `hooks` (given the file's path). */
async function watched(t: TestContext, size: number, hooks: (path: string) => Parameters<typeof proxy>[2]) {
  const bucket = await minioBucket(t);
  const file = await staged(t, size);
  const via = await proxy(t, need("TESTBED_MINIO_ENDPOINT"), hooks(file.path));
  const { log, lines } = captureLog();
  const backend: ObjectBackend = await minio(bucket, via.url, log);
  return { bucket, file, via, lines, backend, key: backend.key("interrupted.zst") };
}

/** Calls `fn` once the first part is answered. */
const afterFirstPart = (fn: () => void) => {
  let answered = 0;
  return (x: Exchange) => {
    if (isPart(x) && x.status === 200 && ++answered === 1) fn();
  };
};

test("minio: an upload aborted after its first part is UPLOAD_ABORTED and leaves no upload pending", async (t) => {
  const ac = new AbortController();
  const run = await watched(t, BIG, () => ({ onResponse: afterFirstPart(() => ac.abort()) }));
  const { bucket, file, key, backend, via } = run;
  const err = await failure(backend.upload({ stagedPath: file.path, size: BIG, key, meta: META, signal: ac.signal }));
  assert.equal(err.code, UPLOAD_ABORTED);
  assert.equal(err.kind, "retryable");
  assert.ok(via.exchanges.some(isAbort), "the multipart upload was aborted");
  assert.equal(await pendingUploads(bucket), 0);
  assert.equal(await exists(bucket, key), false);
});

test("minio: a staged copy that shrinks mid-upload is STAGED_UNREADABLE and its upload is aborted", async (t) => {
  // Six parts: when the first part's request arrives, the fifth and sixth cannot have been read (no part has been
  // answered, so no buffer is free), so their reads are short.
  const size = 5 * CHUNK + CHUNK / 2;
  let cut = false;
  const run = await watched(t, size, (path) => ({
    onRequest(x) {
      if (isPart(x) && !cut) {
        cut = true;
        truncateSync(path, CHUNK + 10);
      }
    },
  }));
  const { bucket, file, key, backend, via } = run;
  const err = await failure(backend.upload({ stagedPath: file.path, size, key, meta: META }));
  assert.ok(via.exchanges.some(isAbort), "the multipart upload was aborted");
  assert.equal(err.code, STAGED_UNREADABLE);
  assert.equal(err.kind, "permanent");
  assert.equal(await pendingUploads(bucket), 0);
  assert.equal(await exists(bucket, key), false);
});

test("minio: an abort that fails is logged, and the upload's own failure is what is thrown", async (t) => {
  const ac = new AbortController();
  const run = await watched(t, BIG, () => ({
    onResponse: afterFirstPart(() => ac.abort()),
    refuse: (x) => (isAbort(x) ? 503 : undefined),
  }));
  const { bucket, file, key, backend, lines } = run;
  const err = await failure(backend.upload({ stagedPath: file.path, size: BIG, key, meta: META, signal: ac.signal }));
  assert.equal(err.code, UPLOAD_ABORTED);
  const warned = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.level === 40);
  assert.equal(warned.length, 1, lines.join("\n"));
  assert.equal(warned[0]!.object, `minio://${bucket}/${key}`);
  assert.match(String(warned[0]!.msg), /lifecycle rule/);
  assert.ok(!lines.join("\n").includes(need("TESTBED_MINIO_SECRET_KEY")));
  // The abort never reached MinIO: the upload is still there, as the log line says (the bucket's cleanup aborts it).
  assert.equal(await pendingUploads(bucket), 1);
});

test("s3: server-side encryption and storage class go on PutObject and CreateMultipartUpload, with the config's static keys", async (t) => {
  const bucket = await minioBucket(t);
  // The testbed's MinIO has no KMS: the proxy answers the put and the create itself, after recording what they asked for.
  const via = await proxy(t, need("TESTBED_MINIO_ENDPOINT"), {
    refuse: (x) => (isCreate(x) || isPut(x) ? 501 : undefined),
  });
  const s3 = {
    endpoint: via.url,
    force_path_style: true,
    access_key_id: need("TESTBED_MINIO_ACCESS_KEY"),
    secret_access_key: need("TESTBED_MINIO_SECRET_KEY"),
    server_side_encryption: "aws:kms",
    sse_kms_key_id: "alias/archive",
    storage_class: "STANDARD_IA",
  };
  const backend = await openObjectBackend(
    config(`  destination: s3://${bucket}/p\n  s3: ${JSON.stringify(s3)}\n`),
    {},
    captureLog().log,
  );
  for (const [size, sent] of [
    [10, isPut],
    [CHUNK + 10, isCreate],
  ] as const) {
    const file = await staged(t, size);
    const err = await failure(backend.upload({ stagedPath: file.path, size, key: backend.key("x"), meta: META }));
    assert.equal(err.kind, "retryable");
    const request = via.exchanges.find(sent);
    assert.ok(request, `no ${sent === isPut ? "PutObject" : "CreateMultipartUpload"} was sent`);
    assert.equal(request.url.split("?")[0], `/${bucket}/p/x`);
    assert.equal(request.headers["x-amz-server-side-encryption"], "aws:kms");
    assert.equal(request.headers["x-amz-server-side-encryption-aws-kms-key-id"], "alias/archive");
    assert.equal(request.headers["x-amz-storage-class"], "STANDARD_IA");
    assert.equal(request.headers["x-amz-meta-records"], "42");
    assert.match(String(request.headers.authorization), new RegExp(`Credential=${need("TESTBED_MINIO_ACCESS_KEY")}/`));
  }
});
