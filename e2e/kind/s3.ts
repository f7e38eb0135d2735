// The suite's S3 side, run inside the kind cluster from the runtime image (its node_modules has the AWS SDK), with
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY set:
//   node s3.ts make-bucket ENDPOINT BUCKET         creates BUCKET unless it is there
//   node s3.ts count ENDPOINT BUCKET PREFIX        decompresses every object under PREFIX whole (zstd or gzip, by
//                                                  suffix) and prints {"files":N,"records":N,"seqs":N}
import { zstdDecompressSync, gunzipSync } from "node:zlib";
import {
  CreateBucketCommand,
  GetObjectCommand,
  HeadBucketCommand,
  ListObjectsV2Command,
  S3Client,
} from "@aws-sdk/client-s3";

const [mode = "", endpoint = "", bucket = "", prefix = ""] = process.argv.slice(2);
const accessKeyId = process.env["AWS_ACCESS_KEY_ID"];
const secretAccessKey = process.env["AWS_SECRET_ACCESS_KEY"];
if (!["make-bucket", "count"].includes(mode) || endpoint === "" || bucket === "" || !accessKeyId || !secretAccessKey) {
  console.error(
    "usage: AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... node s3.ts make-bucket|count ENDPOINT BUCKET [PREFIX]",
  );
  process.exit(2);
}
const s3 = new S3Client({
  endpoint,
  region: "us-east-1",
  forcePathStyle: true,
  credentials: { accessKeyId, secretAccessKey },
});

async function makeBucket(): Promise<void> {
  const exists = await s3.send(new HeadBucketCommand({ Bucket: bucket })).then(
    () => true,
    () => false,
  );
  if (!exists) await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  console.log(JSON.stringify({ bucket, created: !exists }));
}

const decode: Record<string, (b: Buffer) => Buffer> = { ".zst": zstdDecompressSync, ".gz": gunzipSync };

async function count(): Promise<void> {
  let files = 0;
  let records = 0;
  const seqs = new Set<number>();
  let token: string | undefined;
  do {
    const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }));
    for (const o of page.Contents ?? []) {
      const key = o.Key ?? "";
      const suffix = Object.keys(decode).find((s) => key.endsWith(s));
      if (suffix === undefined) throw new Error(`${key}: no decoder here for its codec (zstd and gzip only)`);
      const body = await s3.send(new GetObjectCommand({ Bucket: bucket, Key: key }));
      const text = decode[suffix]!(Buffer.from(await body.Body!.transformToByteArray())).toString("utf8");
      files++;
      for (const line of text.split("\n")) {
        if (line === "") continue;
        records++;
        seqs.add((JSON.parse(line) as { seq: number }).seq);
      }
    }
    token = page.NextContinuationToken;
  } while (token !== undefined);
  console.log(JSON.stringify({ files, records, seqs: seqs.size }));
}

await (mode === "make-bucket" ? makeBucket() : count());
