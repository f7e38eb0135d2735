// The runtime on transport: grpc, fed by a grpc-js client as the previous stage would: many concurrent streams land
// in the archive under the grpc routing defaults; paused intake pushes back and the sender's retries land everything;
// SIGTERM mid-stream writes every push already answered; a kill leaves staged files the restart uploads.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { CreateBucketCommand } from "@aws-sdk/client-s3";
import { status, type ServiceError } from "@grpc/grpc-js";
import { minioArchive, privateMinio, s3Client, uniqueName } from "../../../e2e/support/testbed.ts";
import {
  freePort,
  linesOf,
  readArchive,
  readBucket,
  startArchiver,
  tempDir,
  waitFor,
} from "../../../e2e/support/archiver.ts";
import { PAUSED_PUSHBACK_MS } from "../../src/transport/grpc.ts";
import { connectPush, pushWithRetry, streamPushes, type PushClient } from "../../src/transport/push-client.ts";
import type { PushRequestInput } from "../../src/transport/push-proto.ts";

/** Records `from`..`from + n - 1`: every third with no routing key, the rest keyed "events". */
function batch(from: number, n: number): PushRequestInput {
  const records = [];
  for (let i = from; i < from + n; i++) {
    const value = { id: i, _source: `src-${i % 3}`, _org_id: `org-${i % 4}`, pad: "p".repeat(i % 40) };
    records.push({ payload: Buffer.from(JSON.stringify(value)), routing_key: i % 3 === 0 ? "" : "events" });
  }
  return { records };
}

function idsOf(lines: readonly string[]): { seen: Uint8Array; duplicates: number } {
  return lines.reduce(
    (acc, l) => {
      const id = (JSON.parse(l) as { id: number }).id;
      if (acc.seen[id]) acc.duplicates++;
      acc.seen[id] = 1;
      return acc;
    },
    { seen: new Uint8Array(1 << 20), duplicates: 0 },
  );
}

async function grpcArchiver(
  t: Parameters<typeof startArchiver>[0],
  dir: string,
  extra: { archive?: Record<string, unknown>; grpc?: Record<string, unknown>; buffer?: Record<string, unknown> } = {},
  env: Record<string, string> = {},
) {
  const port = await freePort();
  const a = await startArchiver(
    t,
    {
      transport: "grpc",
      grpc: { listen: `127.0.0.1:${port}`, ...extra.grpc },
      archive: { destination: `file://${join(dir, "archive")}`, ...extra.archive },
      buffer: { spool_dir: join(dir, "spool"), flush_age_secs: 1, ...extra.buffer },
      logger: { level: "info" },
    },
    { dir, env },
  );
  const client = connectPush(`127.0.0.1:${port}`);
  t.after(() => client.close());
  return { a, client };
}

test("100k records over several concurrent streams and unary pushes land in the archive", async (t) => {
  const N = 100_000;
  const PER = 500;
  const STREAMS = 4;
  const dir = tempDir(t);
  const { a, client } = await grpcArchiver(t, dir);
  assert.equal(
    await a.metric("pipeline_delivery_guarantee", { guarantee: "best_effort", reason: "sink_cannot_confirm" }),
    1,
  );
  const effective = a
    .output()
    .split("\n")
    .filter((l) => l.includes('"effective config"'))
    .map((l) => JSON.parse(l) as { config: { archive: { roll_interval_secs: number } } })[0];
  assert.equal(effective?.config.archive.roll_interval_secs, 300, "unset roll_interval_secs is 300 on grpc");

  // Batch k goes to stream k % (STREAMS + 1); the last lane pushes unary.
  const lanes = Array.from({ length: STREAMS + 1 }, () => [] as PushRequestInput[]);
  for (let k = 0; k < N / PER; k++) lanes[k % lanes.length]?.push(batch(k * PER, PER));
  const unary = lanes.pop() ?? [];
  const started = performance.now();
  const [outcomes] = await Promise.all([
    Promise.all(lanes.map((reqs) => streamPushes(client, reqs))),
    (async () => {
      for (const r of unary) await pushWithRetry(client, r);
    })(),
  ]);
  t.diagnostic(`${N} records answered in ${Math.round(performance.now() - started)} ms`);
  for (const o of outcomes) {
    assert.equal(o.error, undefined, `stream failed: ${o.error?.message}`);
    assert.equal(
      o.responses.reduce((n, r) => n + r.accepted, 0),
      (N / PER / (STREAMS + 1)) * PER,
    );
  }
  await waitFor(
    async () => (await a.metric("messages_received_total")) === N,
    60_000,
    () => `received ${a.output().slice(-2000)}`,
  );
  assert.equal(await a.metric("messages_archived_total"), 0, "files complete at the roll interval or the drain");
  assert.equal(await a.stop(), 0);

  const { files, lines } = readArchive(join(dir, "archive"));
  const { seen, duplicates } = idsOf(lines);
  const missing = N - seen.slice(0, N).reduce((n, v) => n + v, 0);
  t.diagnostic(`files=${files.length} lines=${lines.length} missing=${missing} duplicates=${duplicates}`);
  assert.equal(missing, 0);
  assert.equal(duplicates, 0);
  // Unset routing on grpc is _source then _org_id under the routing key; a record with no key gets no topic folder.
  // The path template's {year}/{month}/{day}/{hour} ends each path, the hour carrying the file's suffix.
  const dirs = new Set(files.map((f) => f.path.split("/").slice(0, -4).join("/")));
  const expected = new Set<string>();
  for (let o = 0; o < 4; o++) {
    expected.add(`src-0/org-${o}`);
    for (const s of [1, 2]) expected.add(`events/src-${s}/org-${o}`);
  }
  assert.deepEqual([...dirs].sort(), [...expected].sort());
  for (const f of files) {
    const keyed = f.path.startsWith("events/");
    for (const l of f.lines) assert.equal((JSON.parse(l) as { id: number }).id % 3 !== 0, keyed, f.path);
  }
});

test("paused intake pushes back with a retry hint; the sender's retries land every record", async (t) => {
  const N = 60_000;
  const PER = 1000;
  const PUSHERS = 4;
  const dir = tempDir(t);
  // A 2 MiB memory limit pauses on held records at about 13k (held x 32 bytes over a quarter of it); the memory
  // source is off, since the process's own footprint is far past such a limit. Files roll each second, releasing.
  const { a, client } = await grpcArchiver(
    t,
    dir,
    { archive: { roll_interval_secs: 1 } },
    { DFE_ARCHIVER_MEMORY_LIMIT_BYTES: String(2 << 20), DFE_ARCHIVER_MEMORY_PRESSURE_THRESHOLD: "0" },
  );
  const hints = new Map<number, number>();
  let next = 0;
  await Promise.all(
    Array.from({ length: PUSHERS }, async () => {
      for (let k = next++; k < N / PER; k = next++) {
        await pushWithRetry(client, batch(k * PER, PER), (ms) => hints.set(ms, (hints.get(ms) ?? 0) + 1));
      }
    }),
  );
  t.diagnostic(`pushbacks by hint (ms): ${JSON.stringify([...hints])}`);
  assert.ok((hints.get(PAUSED_PUSHBACK_MS) ?? 0) > 0, `paused intake pushed back:\n${a.output().slice(-3000)}`);
  assert.match(a.output(), /self-regulation: intake paused/);
  await waitFor(
    async () => (await a.metric("messages_archived_total")) === N,
    120_000,
    () => `archived ${a.output().slice(-2000)}`,
  );
  assert.equal(await a.stop(), 0);
  const { seen, duplicates } = idsOf(readArchive(join(dir, "archive")).lines);
  assert.equal(N - seen.slice(0, N).reduce((n, v) => n + v, 0), 0, "records missing");
  assert.equal(duplicates, 0, "a pushed-back push queued nothing");
});

test("SIGTERM mid-stream: every push answered OK is in the archive, and nothing more is accepted", async (t) => {
  const PER = 200;
  const dir = tempDir(t);
  const { a, client } = await grpcArchiver(t, dir, { archive: { roll_interval_secs: 2 } });
  let next = 0;
  const answered: number[] = [];
  /** Pushes until a push is refused; returns the refusal's code. */
  const unaryLane = async (c: PushClient) => {
    for (;;) {
      const k = next++;
      try {
        await pushWithRetry(c, batch(k * PER, PER));
      } catch (err) {
        return (err as ServiceError).code;
      }
      answered.push(k);
    }
  };
  const streamLane = async (c: PushClient) => {
    const mine: number[] = [];
    const reqs = function* () {
      for (;;) {
        const k = next++;
        mine.push(k);
        yield batch(k * PER, PER);
      }
    };
    const o = await streamPushes(c, reqs());
    answered.push(...mine.slice(0, o.responses.length));
    return o.error?.code;
  };
  const lanes = Promise.all([unaryLane(client), unaryLane(client), unaryLane(client), streamLane(client)]);
  await waitFor(
    async () => (await a.metric("messages_archived_total")) > 0 && answered.length > 50,
    60_000,
    () => `nothing archived yet:\n${a.output().slice(-2000)}`,
  );
  assert.equal(await a.stop("SIGTERM"), 0);
  const ends = await lanes;
  t.diagnostic(`answered pushes=${answered.length}, lanes ended with codes ${ends.join(",")}`);
  assert.deepEqual(
    ends,
    ends.map(() => status.UNAVAILABLE),
    "every lane is refused UNAVAILABLE once draining",
  );
  assert.match(a.output(), /Push listener closed; every answered push handed on/);

  const { seen } = idsOf(readArchive(join(dir, "archive")).lines);
  const lost = answered.filter((k) => !seen.slice(k * PER, (k + 1) * PER).every((v) => v === 1));
  assert.deepEqual(lost, [], "answered pushes missing from the archive");
});

test("after a kill on grpc the restart uploads staged files whose manifest matches and quarantines the rest", async (t) => {
  const N = 20_000;
  const dir = tempDir(t);
  const minio = await privateMinio(t);
  const s3 = s3Client(minio.endpoint);
  t.after(() => s3.destroy());
  const bucket = uniqueName("grpc-recover");
  await s3.send(new CreateBucketCommand({ Bucket: bucket }));
  const minioCfg = {
    ...minioArchive(bucket, "a", minio.endpoint),
    roll_interval_secs: 1,
  };
  const first = await grpcArchiver(t, dir, { archive: minioCfg });
  // The store goes away: files complete into staging and wait there to upload.
  await minio.stop();
  for (let k = 0; k < N / 1000; k++) await pushWithRetry(first.client, batch(k * 1000, 1000));
  await waitFor(
    async () =>
      (await first.a.metric("messages_written_total")) === N &&
      (await first.a.metric("files_closed_total")) > 0 &&
      (await first.a.metric("buffer_records")) === 0,
    60_000,
    () => `not staged:\n${first.a.output().slice(-2000)}`,
  );
  // Let every open file roll into staging, then kill.
  await sleep(3_000);
  assert.ok((await first.a.metric("uploads_pending")) > 0);
  assert.equal(await first.a.stop("SIGKILL"), "SIGKILL");
  first.client.close();
  // A file the killed process never completed: no manifest.
  mkdirSync(join(dir, "spool/uploads/a/never"), { recursive: true });
  writeFileSync(join(dir, "spool/uploads/a/never/torn.jsonl.zst"), "torn");

  await minio.start();
  const second = await grpcArchiver(t, dir, { archive: minioCfg });
  await waitFor(
    async () =>
      (await second.a.metric("staged_files_recovered_total")) > 0 && (await second.a.metric("uploads_pending")) === 0,
    60_000,
    () => `not recovered:\n${second.a.output().slice(-3000)}`,
  );
  assert.equal(await second.a.metric("staged_files_quarantined_total", { reason: "incomplete" }), 1);
  assert.equal(await second.a.stop(), 0);
  const objects = await readBucket(s3, bucket, dir);
  const { seen, duplicates } = idsOf(objects.flatMap((o) => linesOf(o.content)));
  const staged = seen.slice(0, N).reduce((n, v) => n + v, 0);
  t.diagnostic(`objects=${objects.length} recovered records=${staged} duplicates=${duplicates}`);
  assert.equal(duplicates, 0);
  assert.equal(staged, N, "every record staged before the kill was uploaded by the restart");
});
