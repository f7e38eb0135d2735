// Creates BUCKET in an S3-compatible store unless it is there already. Run inside the kind cluster from the runtime
// image (its node_modules has the AWS SDK). Usage: node make-bucket.ts ENDPOINT BUCKET
import { CreateBucketCommand, HeadBucketCommand, S3Client } from "@aws-sdk/client-s3";

const [endpoint = "", bucket = ""] = process.argv.slice(2);
const accessKeyId = process.env["AWS_ACCESS_KEY_ID"];
const secretAccessKey = process.env["AWS_SECRET_ACCESS_KEY"];
if (endpoint === "" || bucket === "" || accessKeyId === undefined || secretAccessKey === undefined) {
  console.error("usage: AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... node make-bucket.ts ENDPOINT BUCKET");
  process.exit(2);
}
const s3 = new S3Client({
  endpoint,
  region: "us-east-1",
  forcePathStyle: true,
  credentials: { accessKeyId, secretAccessKey },
});
const exists = await s3.send(new HeadBucketCommand({ Bucket: bucket })).then(
  () => true,
  () => false,
);
if (!exists) await s3.send(new CreateBucketCommand({ Bucket: bucket }));
console.log(JSON.stringify({ bucket, created: !exists }));
