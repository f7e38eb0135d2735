// Both images built from their Dockerfiles by a real engine (the testbed's dockerd, `e2e/testbed/up containers`, on
// a base made from Debian's and npm's packages) and run against the testbed's servers with --network host: the
// runtime under a pod's constraints (read-only root filesystem, user 65532, no capabilities, a memory limit the
// entrypoint sizes the heap from) archives Kafka records into MinIO and drains on SIGTERM; the operator reaches the
// apiserver and renders a pipeline with the runtime image. Image sizes, build times and the runtime's start time to
// its first record go to the test's diagnostics.
//
// Not part of `npm test` (its glob is *.test.ts): a cold engine and build take minutes. `npm run e2e:containers`.
import assert from "node:assert/strict";
import { chownSync, copyFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { before, describe, it, type TestContext } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { AppsV1Api } from "@kubernetes/client-node";
import { stringify } from "yaml";
import { objectNames } from "../../operator/src/render/index.ts";
import { createPipeline, installCrds } from "../../operator/test/support/kube.ts";
import {
  freePort,
  linesOf,
  produce,
  readBucket,
  sumMetric,
  tempDir,
  waitCommittedToEnd,
  waitFor,
} from "../support/archiver.ts";
import { buildImages, docker, OPERATOR, RUNTIME } from "../support/containers.ts";
import {
  kafkaTopic,
  kubeConfig,
  kubeNamespace,
  minioArchive,
  minioBucket,
  need,
  s3Client,
  uniqueName,
} from "../support/testbed.ts";

const USER = 65532;
/** What the builds measured, reported by the first test. */
const built: string[] = [];

/** Starts a detached container that is removed when the test ends; returns its name. */
async function startContainer(t: TestContext, args: readonly string[]): Promise<string> {
  const name = uniqueName("dfe");
  t.after(() => docker(["rm", "-f", name], { allowFailure: true }).then(() => undefined));
  await docker(["run", "-d", "--name", name, ...args]);
  return name;
}

/** Stops a container the way the kubelet does (SIGTERM, SIGKILL after the grace period); its exit code and OOM kill. */
async function stop(name: string): Promise<{ exitCode: number; oomKilled: boolean; logs: string }> {
  await docker(["stop", "--time", "60", name]);
  const state = JSON.parse((await docker(["inspect", "--format", "{{json .State}}", name])).stdout) as {
    ExitCode: number;
    OOMKilled: boolean;
  };
  const logs = await docker(["logs", name]);
  return { exitCode: state.ExitCode, oomKilled: state.OOMKilled, logs: `${logs.stdout}\n${logs.stderr}` };
}

async function logsOf(name: string): Promise<string> {
  const r = await docker(["logs", name], { allowFailure: true });
  return `${r.stdout}\n${r.stderr}`;
}

/** PID 1's argv and uid inside the container: what the entrypoint exec'd, as whom. */
async function pid1(name: string): Promise<{ argv: string[]; uid: number }> {
  const cmdline = await docker(["exec", name, "cat", "/proc/1/cmdline"]);
  const status = await docker(["exec", name, "cat", "/proc/1/status"]);
  const uid = /^Uid:\s+(\d+)/m.exec(status.stdout)?.[1];
  return { argv: cmdline.stdout.split("\0").filter((a) => a !== ""), uid: Number(uid) };
}

// A pod's constraints, as the operator and the chart render them: no writable root, no capabilities, no setuid.
const POD_LIKE = [
  "--network",
  "host",
  "--read-only",
  "--tmpfs",
  "/tmp",
  "--cap-drop",
  "ALL",
  "--security-opt",
  "no-new-privileges",
];

describe("the images, built and run by a container engine", { concurrency: false }, () => {
  before(async () => built.push(...(await buildImages())), { timeout: 30 * 60_000 });

  it("both build from the base the Dockerfiles name, and run as the numeric user the pods run as", async (t) => {
    for (const line of built) t.diagnostic(line);
    const base = need("TESTBED_BASE_IMAGE");
    const baseLayers = JSON.parse(
      (await docker(["image", "inspect", "--format", "{{json .RootFS.Layers}}", base])).stdout,
    );
    for (const tag of [RUNTIME, OPERATOR]) {
      const config = JSON.parse((await docker(["image", "inspect", "--format", "{{json .}}", tag])).stdout) as {
        Config: { User: string; Entrypoint: string[] };
        RootFS: { Layers: string[] };
      };
      assert.equal(config.Config.User, `${USER}:${USER}`, tag);
      assert.equal(config.Config.Entrypoint[0], "/usr/local/bin/dfe-entrypoint", tag);
      assert.deepEqual(config.RootFS.Layers.slice(0, baseLayers.length), baseLayers, `${tag} is not built on ${base}`);
    }
  });

  it("runtime: read-only, user 65532, heap sized from a 512 MiB limit, Kafka to MinIO, SIGTERM drains and exits 0", async (t) => {
    const N = 5000;
    const topic = await kafkaTopic(t, { partitions: 2 });
    const bucket = await minioBucket(t);
    const group = uniqueName("image");
    await produce(topic, N, (i) => ({ value: JSON.stringify({ id: i }) }));
    const dir = tempDir(t);
    const config = join(dir, "config.yaml");
    writeFileSync(
      config,
      stringify({
        kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: group, topics: [topic] },
        archive: minioArchive(bucket, "events"),
        compression: { codec: "zstd" },
        dlq: { enabled: false },
      }),
      { mode: 0o644 },
    );
    const metrics = `127.0.0.1:${await freePort()}`;
    // Records received so far; undefined while nothing answers on the metrics address.
    const received = async () => {
      const text = await fetch(`http://${metrics}/metrics`).then(
        (r) => r.text(),
        () => undefined,
      );
      return text === undefined ? undefined : sumMetric(text, "messages_received_total");
    };

    const start = performance.now();
    const name = await startContainer(t, [
      ...POD_LIKE,
      // The spool is an emptyDir in a pod: the one writable place the runtime needs besides /tmp.
      "--tmpfs",
      `/var/spool/dfe/archiver:uid=${USER},gid=${USER},mode=0700`,
      "--memory",
      "512m",
      "--memory-swap",
      "512m",
      "--volume",
      `${config}:/etc/dfe-archiver/config.yaml:ro`,
      RUNTIME,
      "run",
      "--metrics-addr",
      metrics,
    ]);
    // When the engine has the container running, when its metrics answer, when it has its first record.
    const runningMs = performance.now() - start;
    let listeningMs = 0;
    let firstRecordMs = 0;
    for (const deadline = Date.now() + 60_000; firstRecordMs === 0; await sleep(10)) {
      const count = await received();
      const now = performance.now() - start;
      if (count !== undefined && listeningMs === 0) listeningMs = now;
      if (count !== undefined && count > 0) firstRecordMs = now;
      else if (Date.now() > deadline) assert.fail(`no record received in 60 s:\n${await logsOf(name)}`);
    }
    t.diagnostic(
      `runtime image: docker run returned after ${runningMs.toFixed(0)} ms, /metrics answered after ` +
        `${listeningMs.toFixed(0)} ms, first record received after ${firstRecordMs.toFixed(0)} ms`,
    );
    await waitFor(
      async () => ((await received()) ?? 0) >= N,
      120_000,
      () => `the container received fewer than ${N} records`,
    );

    const proc = await pid1(name);
    assert.equal(proc.uid, USER);
    // The entrypoint gave V8's old space half of the limit and exec'd node as PID 1; the runtime added its
    // young-generation flag from the same limit (runtime/src/regulate/heap.ts).
    assert.equal(proc.argv[0], "/usr/local/bin/node");
    assert.ok(proc.argv.includes("--max-old-space-size=256"), proc.argv.join(" "));
    assert.ok(
      proc.argv.some((a) => a.startsWith("--max-semi-space-size=")),
      proc.argv.join(" "),
    );
    const write = await docker(["exec", name, "touch", "/app/written"], { allowFailure: true });
    assert.notEqual(write.status, 0);
    assert.match(write.stderr, /Read-only file system/);

    // Nothing is archived yet at the default roll interval: what reaches MinIO is what the drain flushes.
    const stopped = await stop(name);
    assert.equal(stopped.exitCode, 0, stopped.logs.slice(-4000));
    assert.equal(stopped.oomKilled, false);
    assert.match(stopped.logs, /"memorySource":"cgroup"/);

    const s3 = s3Client();
    t.after(() => s3.destroy());
    const ids = (await readBucket(s3, bucket, dir))
      .flatMap((o) => linesOf(o.content))
      .map((l) => (JSON.parse(l) as { id: number }).id)
      .sort((a, b) => a - b);
    assert.deepEqual(
      ids,
      Array.from({ length: N }, (_, i) => i),
    );
    await waitCommittedToEnd(group, topic, 30_000, () => "the container's offsets did not reach the end");
  });

  it("operator: reaches the apiserver, renders a pipeline with the runtime image, exits 0 on SIGTERM", async (t) => {
    await installCrds();
    const namespace = await kubeNamespace(t);
    const dir = tempDir(t);
    // The admin kubeconfig, readable by the container's user only.
    const kubeconfig = join(dir, "kubeconfig");
    copyFileSync(need("TESTBED_KUBECONFIG"), kubeconfig);
    chownSync(kubeconfig, USER, USER);
    const name = await startContainer(t, [
      ...POD_LIKE,
      "--memory",
      "256m",
      "--volume",
      `${kubeconfig}:/etc/dfe-archiver/kubeconfig:ro`,
      OPERATOR,
      "--kubeconfig",
      "/etc/dfe-archiver/kubeconfig",
      "--namespace",
      namespace,
      "--leader-elect=false",
      "--metrics-addr",
      `127.0.0.1:${await freePort()}`,
      "--image",
      RUNTIME,
    ]);
    let logs = "";
    await waitFor(
      async () => (logs = await logsOf(name)).includes('"operator listening"'),
      60_000,
      () => `the operator never listened:\n${logs}`,
    );
    const pipeline = "events";
    await createPipeline(namespace, pipeline, {
      kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), topics: ["events"] },
      archive: { destination: "s3://archive/events" },
    });
    const apps = kubeConfig().makeApiClient(AppsV1Api);
    let image: string | undefined;
    await waitFor(
      async () => {
        const dep = await apps
          .readNamespacedDeployment({ name: objectNames(pipeline).workload, namespace })
          .catch(() => undefined);
        image = dep?.spec?.template.spec?.containers[0]?.image;
        return image !== undefined;
      },
      60_000,
      () => "the operator in its container rendered no Deployment",
    );
    assert.equal(image, RUNTIME);
    const stopped = await stop(name);
    assert.equal(stopped.exitCode, 0, stopped.logs.slice(-4000));
  });
});
