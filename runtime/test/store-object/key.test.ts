import { test } from "node:test";
import assert from "node:assert/strict";
import { AnonymousCredential, StorageSharedKeyCredential } from "@azure/storage-blob";
import { ArchiverError, ConfigError } from "../../src/errors.ts";
import { azureContainerClient } from "../../src/store/object/azure.ts";
import { gcsStorageOptions } from "../../src/store/object/gcs.ts";
import { redactor } from "../../src/store/object/fail.ts";
import { openObjectBackend, parseDestination } from "../../src/store/object/open.ts";
import { s3ClientConfig } from "../../src/store/object/s3.ts";
import { MAX_KEY_BYTES, checkKey, objectMetadata } from "../../src/store/object/types.ts";
import { META, captureLog, config } from "./helpers.ts";

function refusedKey(key: string): ArchiverError {
  try {
    checkKey(key);
  } catch (err) {
    assert.ok(err instanceof ArchiverError);
    assert.equal(err.kind, "permanent");
    return err;
  }
  assert.fail(`checkKey accepted ${JSON.stringify(key)}`);
}

test("checkKey: up to 1024 UTF-8 bytes passes, one byte more is key_too_long", () => {
  checkKey("a/" + "k".repeat(MAX_KEY_BYTES - 2));
  assert.equal(refusedKey("a/" + "k".repeat(MAX_KEY_BYTES - 1)).code, "key_too_long");
  // Bytes, not characters: 342 three-byte characters are 1026 bytes.
  checkKey("€".repeat(341));
  assert.equal(refusedKey("€".repeat(342)).code, "key_too_long");
});

test("checkKey: empty, absolute, empty/./.. segments, control characters and lone surrogates are invalid_path", () => {
  for (const key of ["", "/a/b", "a//b", "a/", "./a", "a/../b", "a/.", "a\nb", "a\u0000b", "a\u007fb", "a\ud800b"])
    assert.equal(refusedKey(key).code, "invalid_path", JSON.stringify(key));
  for (const key of ["a", "a/b.c/d..e/.f", "год/2026/😀.zst", "a b/c+d=e"]) checkKey(key);
});

test("parseDestination: the URL's path is the prefix, without its slashes", () => {
  assert.deepEqual(parseDestination("s3://bkt/a/b/"), { scheme: "s3", bucket: "bkt", prefix: "a/b" });
  assert.deepEqual(parseDestination("gs://bkt"), { scheme: "gs", bucket: "bkt", prefix: "" });
  assert.deepEqual(parseDestination("az://c/"), { scheme: "az", bucket: "c", prefix: "" });
  assert.throws(() => parseDestination("s3://bkt/a//b"), ConfigError);
  assert.throws(() => parseDestination("s3://bkt/a/../b"), ConfigError);
});

test("key applies the prefix; the section's bucket overrides the URL's", async () => {
  const { log } = captureLog();
  const minio = "  minio: { endpoint: http://127.0.0.1:1, access_key: ak, secret_key: sk }\n";
  const a = await openObjectBackend(config(`  destination: minio://bkt/pre/fix\n${minio}`), {}, log);
  assert.equal(a.scheme, "minio");
  assert.equal(a.bucket, "bkt");
  assert.equal(a.key("2026/01/x.zst"), "pre/fix/2026/01/x.zst");
  const b = await openObjectBackend(
    config(
      `  destination: minio://bkt\n  minio: { endpoint: http://h:1, access_key: a, secret_key: s, bucket: other }\n`,
    ),
    {},
    log,
  );
  assert.equal(b.bucket, "other");
  assert.equal(b.key("x.zst"), "x.zst");
});

test("minio:// without its keys or endpoint is a ConfigError naming them", async () => {
  const { log } = captureLog();
  const open = (minio: string) =>
    openObjectBackend(config(`  destination: minio://bkt/p\n  minio: ${minio}\n`), {}, log);
  await assert.rejects(open("{ endpoint: http://h:9000 }"), (err: unknown) => {
    assert.ok(err instanceof ConfigError);
    assert.equal(err.key, "archive.minio.access_key");
    assert.match(err.message, /archive\.minio\.secret_key/);
    return true;
  });
  await assert.rejects(open("{ endpoint: http://h:9000, access_key: a }"), { key: "archive.minio.secret_key" });
  await assert.rejects(open("{ access_key: a, secret_key: s }"), { key: "archive.minio.endpoint" });
  await assert.rejects(open("{ endpoint: http://h:9000, access_key: a, secret_key: s, use_ssl: true }"), {
    key: "archive.minio.use_ssl",
  });
});

test("s3:// credentials: static keys from config on top, else the SDK chain; half a pair is refused", () => {
  const s3 = (section: string) => config(`  destination: s3://bkt/p\n  s3: ${section}\n`);
  const chain = s3ClientConfig(s3("{ region: ap-southeast-2 }"), "s3");
  assert.equal(chain.config.credentials, undefined);
  assert.equal(chain.config.region, "ap-southeast-2");
  const keyed = s3ClientConfig(s3("{ access_key_id: AK, secret_access_key: SK, session_token: ST }"), "s3");
  assert.deepEqual(keyed.config.credentials, { accessKeyId: "AK", secretAccessKey: "SK", sessionToken: "ST" });
  assert.deepEqual(keyed.secrets, ["AK", "SK", "ST"]);
  // The env names the loader folds into the same keys.
  const fromEnv = s3ClientConfig(
    config("  destination: s3://bkt\n", {
      DFE_ARCHIVER_S3_ACCESS_KEY_ID: "EAK",
      DFE_ARCHIVER_S3_SECRET_ACCESS_KEY: "ESK",
      DFE_ARCHIVER_S3_ENDPOINT: "http://store:9000",
    }),
    "s3",
  );
  assert.deepEqual(fromEnv.config.credentials, { accessKeyId: "EAK", secretAccessKey: "ESK" });
  assert.equal(fromEnv.config.endpoint, "http://store:9000");
  assert.throws(() => s3ClientConfig(s3("{ access_key_id: AK }"), "s3"), { key: "archive.s3.secret_access_key" });
  assert.throws(() => s3ClientConfig(s3("{ session_token: ST }"), "s3"), { key: "archive.s3.session_token" });
});

test("gs:// and az:// refuse a bucket or container name the store would refuse, at open", async () => {
  const { log } = captureLog();
  await assert.rejects(openObjectBackend(config("  destination: gs://Bad_Bucket/p\n"), {}, log), ConfigError);
  await assert.rejects(
    openObjectBackend(
      config("  destination: az://Bad--c/p\n  azure: { account_name: a, account_key: a2V5 }\n"),
      {},
      log,
    ),
    ConfigError,
  );
  await assert.rejects(openObjectBackend(config("  destination: az://good/p\n"), {}, log), {
    key: "archive.azure.account_name",
  });
});

test("az:// credential order: account_key, then sas_token, then AZURE_STORAGE_KEY, then a managed identity", () => {
  const client = (azure: string, env: NodeJS.ProcessEnv = {}) =>
    azureContainerClient(config(`  destination: az://cont/p\n  azure: ${azure}\n`), env, "cont").client;
  const env = { AZURE_STORAGE_ACCOUNT: "envacct", AZURE_STORAGE_KEY: "ZW52a2V5" };
  const keyed = client("{ account_name: acct, account_key: a2V5, sas_token: 'sv=1&sig=x' }", env).credential;
  assert.ok(keyed instanceof StorageSharedKeyCredential);
  assert.equal(keyed.accountName, "acct");
  const sas = client("{ account_name: acct, sas_token: '?sv=1&sig=x' }", env);
  assert.ok(sas.credential instanceof AnonymousCredential);
  assert.equal(sas.url, "https://acct.blob.core.windows.net/cont?sv=1&sig=x");
  const fromEnv = client("{}", env);
  assert.ok(fromEnv.credential instanceof StorageSharedKeyCredential);
  assert.equal(fromEnv.credential.accountName, "envacct");
  // Azurite's endpoint names the account in its path.
  const azurite = client("{ endpoint: 'http://127.0.0.1:1/devacct/', account_key: a2V5 }");
  assert.equal(azurite.url, "http://127.0.0.1:1/devacct/cont");
  assert.equal((azurite.credential as StorageSharedKeyCredential).accountName, "devacct");
  // No key or SAS anywhere: a managed identity (@azure/identity is installed here, as azurite's dependency).
  const identity = client("{ account_name: acct }").credential;
  assert.ok(!(identity instanceof StorageSharedKeyCredential) && !(identity instanceof AnonymousCredential));
});

test("gs:// credential order: service_account_key, then credentials_path, then GOOGLE_APPLICATION_CREDENTIALS", () => {
  const options = (gcs: string, env: NodeJS.ProcessEnv = {}) =>
    gcsStorageOptions(config(`  destination: gs://bkt\n  gcs: ${gcs}\n`), env);
  const env = { GOOGLE_APPLICATION_CREDENTIALS: "/env/key.json" };
  const key = JSON.stringify({
    type: "service_account",
    project_id: "proj",
    private_key: "PRIVATE",
    client_email: "e",
  });
  const inline = options(`{ service_account_key: '${key}', credentials_path: /cfg/key.json }`, env);
  assert.deepEqual(inline.options.credentials, JSON.parse(key));
  assert.equal(inline.options.keyFilename, undefined);
  assert.equal(inline.options.projectId, "proj");
  assert.ok(inline.secrets.includes("PRIVATE"));
  assert.equal(options("{ credentials_path: /cfg/key.json }", env).options.keyFilename, "/cfg/key.json");
  assert.equal(options("{}", env).options.keyFilename, "/env/key.json");
  const metadata = options("{ endpoint: 'http://127.0.0.1:1' }").options;
  assert.equal(metadata.keyFilename, undefined);
  assert.equal(metadata.credentials, undefined);
  assert.equal(metadata.apiEndpoint, "http://127.0.0.1:1");
});

test("redactor: secrets and URL queries never reach a message", () => {
  const redact = redactor(["s3cr3t", undefined, "tok/en+="]);
  const out = redact("auth s3cr3t failed at http://h:1/o?upload_id=abc&sig=zzz (tok/en+=)");
  assert.equal(out, "auth <redacted> failed at http://h:1/o?<redacted> (<redacted>)");
});

test("objectMetadata: records, codec and ISO times, names joined per backend", () => {
  assert.deepEqual(objectMetadata(META, "-"), {
    records: "42",
    codec: "zstd",
    "opened-at": "2026-01-02T03:04:05.006Z",
    "closed-at": "2026-01-02T03:09:05.006Z",
  });
  assert.deepEqual(Object.keys(objectMetadata(META, "_")), ["records", "codec", "opened_at", "closed_at"]);
});
