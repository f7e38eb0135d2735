// Retryable vs permanent, by each store's error code: only a refusal of the object itself is permanent.
import { test } from "node:test";
import assert from "node:assert/strict";
import { S3ServiceException } from "@aws-sdk/client-s3";
import { RestError } from "@azure/storage-blob";
import { ArchiverError } from "../../src/errors.ts";
import { azureFaults } from "../../src/store/object/azure.ts";
import { redactor, uploadError, type FaultReader } from "../../src/store/object/fail.ts";
import { gcsFaults } from "../../src/store/object/gcs.ts";
import { s3Faults } from "../../src/store/object/s3.ts";
import { STAGED_UNREADABLE, UPLOAD_ABORTED } from "../../src/store/object/types.ts";

const judge = (reader: FaultReader, err: unknown, signal?: AbortSignal) =>
  uploadError(err, "upload", "x://b/k", signal, reader, redactor(["SECRET"]));

const s3 = (name: string, status: number, message = "refused") =>
  new S3ServiceException({
    name,
    $fault: status < 500 ? "client" : "server",
    $metadata: { httpStatusCode: status },
    message,
  });

test("s3: EntityTooLarge, KeyTooLongError and MinIO's bad-name codes are permanent; the rest retryable", () => {
  for (const code of ["EntityTooLarge", "KeyTooLongError", "XMinioInvalidObjectName", "XMinioInvalidResourceName"]) {
    const err = judge(s3Faults, s3(code, 400));
    assert.equal(err.kind, "permanent", code);
    assert.equal(err.code, code);
  }
  for (const [code, status] of [
    ["NoSuchBucket", 404],
    ["AccessDenied", 403],
    ["InvalidAccessKeyId", 403],
    ["SignatureDoesNotMatch", 403],
    ["ExpiredToken", 400],
    ["SlowDown", 503],
    ["InternalError", 500],
  ] as const)
    assert.equal(judge(s3Faults, s3(code, status)).kind, "retryable", code);
  const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:1"), { code: "ECONNREFUSED" });
  assert.deepEqual([judge(s3Faults, refused).code, judge(s3Faults, refused).kind], ["ECONNREFUSED", "retryable"]);
  const timeout = Object.assign(new Error("timed out"), { name: "TimeoutError" });
  assert.equal(judge(s3Faults, timeout).code, "TimeoutError");
});

test("gcs: 413 and 400 `invalid` are permanent; 401, 403, 404, 429, 5xx and network errors retryable", () => {
  const api = (code: number, reason?: string) =>
    Object.assign(new Error("refused"), { code, ...(reason === undefined ? {} : { errors: [{ reason }] }) });
  assert.equal(judge(gcsFaults, api(413)).kind, "permanent");
  assert.equal(judge(gcsFaults, api(400, "invalid")).kind, "permanent");
  for (const err of [api(400, "badRequest"), api(401), api(403, "forbidden"), api(404, "notFound"), api(429), api(503)])
    assert.equal(judge(gcsFaults, err).kind, "retryable", String(err.code));
  // A GaxiosError: the status in `status`, `code` a string.
  const gaxios = Object.assign(new Error("Not Found"), { code: "ERR_BAD_REQUEST", status: 404 });
  assert.deepEqual([judge(gcsFaults, gaxios).code, judge(gcsFaults, gaxios).kind], ["http_404", "retryable"]);
  const refused = Object.assign(new Error("ECONNREFUSED"), { code: "ECONNREFUSED" });
  assert.equal(judge(gcsFaults, refused).code, "ECONNREFUSED");
});

test("azure: InvalidBlobOrBlock, RequestBodyTooLarge, InvalidResourceName, OutOfRangeInput are permanent", () => {
  const rest = (code: string, statusCode?: number) =>
    new RestError("refused", statusCode === undefined ? { code } : { code, statusCode });
  for (const code of ["InvalidBlobOrBlock", "RequestBodyTooLarge", "InvalidResourceName", "OutOfRangeInput"])
    assert.equal(judge(azureFaults, rest(code, 400)).kind, "permanent", code);
  // BlockCountExceedsLimit counts uncommitted blocks too, which the service discards in time: it clears.
  for (const [code, status] of [
    ["ContainerNotFound", 404],
    ["AuthenticationFailed", 403],
    ["BlockCountExceedsLimit", 409],
    ["ServerBusy", 503],
    ["ECONNREFUSED", undefined],
  ] as const)
    assert.equal(judge(azureFaults, rest(code, status)).kind, "retryable", code);
});

test("uploadError: the staged copy's errors pass as they are; a caller's abort is UPLOAD_ABORTED; secrets are redacted", () => {
  const unreadable = new ArchiverError(STAGED_UNREADABLE, "gone", "permanent");
  assert.equal(judge(s3Faults, unreadable), unreadable);
  const ac = new AbortController();
  ac.abort();
  const aborted = judge(s3Faults, s3("EntityTooLarge", 400), ac.signal);
  assert.deepEqual([aborted.code, aborted.kind], [UPLOAD_ABORTED, "retryable"]);
  const leaky = judge(
    azureFaults,
    new RestError("bad SECRET at https://a.blob/c?sig=abc", { code: "X", statusCode: 403 }),
  );
  assert.ok(!leaky.message.includes("SECRET") && !leaky.message.includes("sig=abc"), leaky.message);
  assert.equal(leaky.cause, undefined, "the SDK's error, with its request, is not kept");
});
