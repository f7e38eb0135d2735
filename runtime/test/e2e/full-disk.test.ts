// A local destination whose disk fills mid-stream: the failed append is cut back, the batch and its offsets are
// held and retried, nothing more is received, and once space frees the stream resumes with nothing lost. The test
// mounts a small tmpfs of its own (CI runs as root).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { kafkaTopic, need, uniqueName } from "../../../e2e/support/testbed.ts";
import {
  produce,
  readArchive,
  startArchiver,
  tempDir,
  waitCommittedToEnd,
  waitFor,
} from "../../../e2e/support/archiver.ts";

test("a full local disk holds the stream and loses nothing once space frees", async (t) => {
  const N = 20_000;
  const dir = tempDir(t);
  const mount = mkdtempSync(join(tmpdir(), "full-disk-"));
  execFileSync("mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", mount]);
  t.after(() => {
    execFileSync("umount", ["-l", mount]);
    rmSync(mount, { recursive: true, force: true });
  });
  // Leave about half a megabyte free: the archive needs several.
  const filler = join(mount, "filler");
  writeFileSync(filler, Buffer.alloc(3_600_000));
  const topic = await kafkaTopic(t, { partitions: 2 });
  const groupId = uniqueName("g");
  await produce(topic, N, (i) => ({
    value: JSON.stringify({ id: i, _org_id: `org-${i % 4}`, r: randomBytes(120).toString("hex") }),
  }));
  const a = await startArchiver(t, {
    kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: groupId, topics: [topic] },
    archive: { destination: `file://${join(mount, "archive")}`, roll_interval_secs: 1 },
    buffer: { spool_dir: join(dir, "spool"), flush_age_secs: 1, flush_bytes: 65536 },
    routing: { mode: "expression", expression_fields: ["_org_id"] },
    dlq: { enabled: false },
    logger: { level: "warn" },
  });
  await waitFor(
    async () => (await a.metric("archive_errors_total")) > 0,
    60_000,
    () => `the disk never filled:\n${a.output().slice(-3000)}`,
  );
  // Every write failing opens the sink circuit: more pods cannot help a full destination volume.
  await waitFor(
    async () => (await a.metric("sink_circuit_open")) === 1 && (await a.metric("scaling_pressure")) === 0,
    30_000,
    () => `the sink circuit never opened:\n${a.output().slice(-3000)}`,
  );
  const written = await a.metric("messages_written_total");
  const writeErrors = await a.metric("archive_errors_total");
  assert.ok(written < N, `the stream is held (${written} of ${N} written)`);
  assert.ok(a.proc.exitCode === null, "the process keeps running");
  rmSync(filler);
  await waitCommittedToEnd(groupId, topic, 60_000, () => `not resumed after space freed:\n${a.output().slice(-3000)}`);
  assert.equal(await a.metric("sink_circuit_open"), 0, "the writes that landed closed it");
  assert.equal(await a.stop(), 0);
  const { lines } = readArchive(join(mount, "archive"));
  const ids = new Set(lines.map((l) => (JSON.parse(l) as { id: number }).id));
  t.diagnostic(
    `produced=${N} archived_lines=${lines.length} distinct=${ids.size} failed_appends_while_full=${writeErrors} written_when_full=${written}`,
  );
  assert.equal(ids.size, N, "every record archived");
});
