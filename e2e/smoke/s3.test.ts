import { test } from "node:test";
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import {
  CreateMultipartUploadCommand,
  UploadPartCommand,
  CompleteMultipartUploadCommand,
  AbortMultipartUploadCommand,
  ListMultipartUploadsCommand,
  GetObjectCommand,
  HeadObjectCommand,
} from "@aws-sdk/client-s3";
import { minioBucket, s3Client } from "../support/testbed.ts";

const MiB = 1024 * 1024;

test("minio: a three-part multipart upload completes and reads back byte for byte", async (t) => {
  const Bucket = await minioBucket(t);
  const s3 = s3Client();
  t.after(() => s3.destroy());
  const parts = [randomBytes(5 * MiB), randomBytes(5 * MiB), randomBytes(MiB)];
  const Key = "smoke/multipart.bin";
  const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket, Key }));
  const done = await Promise.all(
    parts.map(async (Body, i) => {
      const r = await s3.send(new UploadPartCommand({ Bucket, Key, UploadId, PartNumber: i + 1, Body }));
      return { ETag: r.ETag, PartNumber: i + 1 };
    }),
  );
  await s3.send(new CompleteMultipartUploadCommand({ Bucket, Key, UploadId, MultipartUpload: { Parts: done } }));
  const got = await s3.send(new GetObjectCommand({ Bucket, Key }));
  assert.ok(got.Body, "GetObject returned no body");
  const body = Buffer.from(await got.Body.transformToByteArray());
  assert.ok(body.equals(Buffer.concat(parts)), "object differs from the parts uploaded");
});

test("minio: an aborted multipart upload leaves no object and no pending upload", async (t) => {
  const Bucket = await minioBucket(t);
  const s3 = s3Client();
  t.after(() => s3.destroy());
  const Key = "smoke/aborted.bin";
  const { UploadId } = await s3.send(new CreateMultipartUploadCommand({ Bucket, Key }));
  await s3.send(new UploadPartCommand({ Bucket, Key, UploadId, PartNumber: 1, Body: randomBytes(5 * MiB) }));
  const pending = await s3.send(new ListMultipartUploadsCommand({ Bucket }));
  assert.equal(pending.Uploads?.length, 1);
  await s3.send(new AbortMultipartUploadCommand({ Bucket, Key, UploadId }));
  const after = await s3.send(new ListMultipartUploadsCommand({ Bucket }));
  assert.equal(after.Uploads?.length ?? 0, 0);
  await assert.rejects(s3.send(new HeadObjectCommand({ Bucket, Key })), (e: Error) => e.name === "NotFound");
});
