// A pipeline on grpc whose local disk is full when it drains: the answered pushes cannot be written, and nothing can
// deliver them again, so after the drain's 10 s of retries they are counted messages_dropped_total{reason=
// "unreplayable"} and the process exits 0 rather than withholding for a restart that reads nothing. The test mounts
// a full tmpfs of its own (CI runs as root).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pino } from "pino";
import { freePort, waitFor } from "../../../e2e/support/archiver.ts";
import { parseConfigText } from "../../src/config/load.ts";
import { Health } from "../../src/observe/health.ts";
import { createMetrics } from "../../src/observe/metrics.ts";
import { Pipeline } from "../../src/pipeline.ts";
import { resolveMemoryLimit } from "../../src/regulate/memory.ts";
import { openStore } from "../../src/store/open.ts";
import { openTransport } from "../../src/transport/open.ts";
import { connectPush } from "../../src/transport/push-client.ts";

const N = 1000;

test("records answered on grpc that the drain cannot write are counted unreplayable; the exit is 0", async (t) => {
  const mount = mkdtempSync(join(tmpdir(), "grpc-full-"));
  execFileSync("mount", ["-t", "tmpfs", "-o", "size=256k", "tmpfs", mount]);
  t.after(() => {
    execFileSync("umount", ["-l", mount]);
    rmSync(mount, { recursive: true, force: true });
  });
  try {
    writeFileSync(join(mount, "filler"), Buffer.alloc(1 << 20));
  } catch (err) {
    assert.equal((err as NodeJS.ErrnoException).code, "ENOSPC");
  }
  const port = await freePort();
  const yaml = [
    "transport: grpc",
    `grpc: { listen: "127.0.0.1:${port}" }`,
    `archive: { destination: "file://${join(mount, "archive")}" }`,
    `buffer: { spool_dir: "${join(mount, "spool")}", flush_age_secs: 1 }`,
  ].join("\n");
  const { config } = parseConfigText(yaml, { env: {}, sourceName: "test.yaml" });
  const log = pino({ level: "silent" });
  const metrics = createMetrics({ defaultMetrics: false });
  const health = new Health();
  const memory = resolveMemoryLimit(256 << 20, 0.85);
  const store = await openStore(config, {}, metrics, log);
  const pipeline = new Pipeline({
    config,
    transport: await openTransport(config, log, memory),
    metrics,
    log,
    memory,
    store,
    health,
  });
  await pipeline.start();
  const client = connectPush(`127.0.0.1:${port}`);
  t.after(() => client.close());
  const records = Array.from({ length: N }, (_, i) => ({ payload: Buffer.from(JSON.stringify({ id: i })) }));
  assert.deepEqual(await client.push({ records }), { accepted: N });
  await waitFor(
    () => health.snapshot().components.sink.state === "degraded",
    30_000,
    () => "the local write never failed",
  );

  const exit = await pipeline.drain();
  assert.deepEqual(exit, { code: 0 });
  const dropped = await metrics.messagesDropped.get();
  const byReason = Object.fromEntries(dropped.values.map((v) => [v.labels.reason, v.value]));
  assert.deepEqual(byReason, { unreplayable: N });
  assert.equal((await metrics.messagesArchived.get()).values[0]?.value ?? 0, 0);
});
