// Counts the records archived under BUCKET/PREFIX in an S3-compatible store: every object decompressed whole (zstd or
// gzip, by suffix) and its lines counted; prints {"files":N,"records":N,"seqs":N}. Run inside the kind cluster from
// the runtime image (its node_modules has the AWS SDK). Usage: node count-archived.ts ENDPOINT BUCKET PREFIX
import { zstdDecompressSync, gunzipSync } from "node:zlib";
import { GetObjectCommand, ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3";

const [endpoint = "", bucket = "", prefix = ""] = process.argv.slice(2);
const accessKeyId = process.env["AWS_ACCESS_KEY_ID"];
const secretAccessKey = process.env["AWS_SECRET_ACCESS_KEY"];
if (endpoint === "" || bucket === "" || accessKeyId === undefined || secretAccessKey === undefined) {
  console.error("usage: AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... node count-archived.ts ENDPOINT BUCKET PREFIX");
  process.exit(2);
}
const s3 = new S3Client({
  endpoint,
  region: "us-east-1",
  forcePathStyle: true,
  credentials: { accessKeyId, secretAccessKey },
});
const decode: Record<string, (b: Buffer) => Buffer> = { ".zst": zstdDecompressSync, ".gz": gunzipSync };

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
