// A real Kubernetes node's runtime stack runs the runtime image as a pod: the kubelet built from the k8s.io/kubernetes
// version the testbed's apiserver pins, Debian's containerd (its CRI plugin) and runc, the pause image compiled from
// that module (e2e/testbed/containers/up.sh). The kubelet runs standalone, from a static pod manifest: it never
// registers with the testbed's apiserver, which other tests share. The pod runs as the operator renders the runtime's
// (user 65532, read-only root filesystem, no capabilities, a 512 MiB limit, emptyDir spool and /tmp) with host
// networking to reach the testbed's Kafka and MinIO; its container is SIGKILLed through containerd, the kubelet
// replaces it, and every record produced before and after is found in MinIO.
//
// Not part of `npm test`: `npm run e2e:containers`.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test, type TestContext } from "node:test";
import { stringify } from "yaml";
import { freePort, linesOf, produce, readBucket, sumMetric, waitFor } from "../support/archiver.ts";
import { buildImages, docker, run, RUNTIME } from "../support/containers.ts";
import { kafkaTopic, minioArchive, minioBucket, need, s3Client, uniqueName } from "../support/testbed.ts";

const USER = 65532;

/** A long-running child: its output, and whether it has exited. */
function daemon(cmd: string, args: readonly string[]) {
  const proc = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  proc.stdout.on("data", (d: Buffer) => (out = (out + d.toString()).slice(-20_000)));
  proc.stderr.on("data", (d: Buffer) => (out = (out + d.toString()).slice(-20_000)));
  const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
  return {
    output: () => out,
    done: () => proc.exitCode !== null || proc.signalCode !== null,
    stop: async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill("SIGTERM");
      await exited;
    },
  };
}

/** containerd with its CRI plugin, and a standalone kubelet on it, in `dir`; both stopped, and their state removed, at the end. */
async function startNode(t: TestContext, dir: string) {
  const state = join(dir, "run");
  const sock = join(state, "containerd.sock");
  const ctr = (args: readonly string[], opts: { allowFailure?: boolean } = {}) =>
    run(need("TESTBED_CTR"), ["--address", sock, "--namespace", "k8s.io", ...args], opts);
  mkdirSync(join(dir, "cni"), { recursive: true });
  writeFileSync(
    join(dir, "containerd.toml"),
    `version = 2
root = "${join(dir, "containerd")}"
state = "${join(state, "containerd")}"
[grpc]
  address = "${sock}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "${need("TESTBED_PAUSE_IMAGE")}"
  # This VM gives root no CAP_SYS_RESOURCE: an oom_score_adj below containerd's own (the sandbox's -998) cannot be
  # set, and runc fails the sandbox ("can't get final child's PID from pipe: EOF"); this clamps it instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "${need("TESTBED_CNI_BIN_DIR")}"
    conf_dir = "${join(dir, "cni")}"
`,
  );
  // The pod network: a bridge for pods that are not on the host's network (this test's pod is).
  writeFileSync(
    join(dir, "cni", "10-bridge.conflist"),
    JSON.stringify({
      cniVersion: "1.0.0",
      name: "dfe-node",
      plugins: [
        {
          type: "bridge",
          bridge: "dfe-cni0",
          isGateway: true,
          ipam: { type: "host-local", ranges: [[{ subnet: "10.244.0.0/24" }]], dataDir: join(state, "ipam") },
        },
      ],
    }),
  );
  const containerd = daemon(need("TESTBED_CONTAINERD"), ["--config", join(dir, "containerd.toml")]);
  // Filled as the kubelet starts: what stops it, after its pods.
  const stopKubelet: (() => Promise<void>)[] = [];
  const kubeletDir = join(dir, "kubelet");
  const manifests = join(dir, "manifests");
  mkdirSync(manifests);
  // One hook, in order: the kubelet stops the pods once their manifests are gone; then it stops, then containerd;
  // the kubelet's root directory (it mounts it onto itself, shared) is unmounted before everything is removed.
  t.after(async () => {
    for (const stop of stopKubelet) await stop();
    await containerd.stop();
    await run("umount", ["--recursive", kubeletDir], { allowFailure: true });
    rmSync(dir, { recursive: true, force: true });
  });
  await waitFor(
    async () => (await ctr(["version"], { allowFailure: true })).status === 0,
    30_000,
    () => `containerd did not start:\n${containerd.output().slice(-3000)}`,
    containerd.done,
  );

  const healthz = await freePort();
  writeFileSync(
    join(dir, "kubelet.yaml"),
    stringify({
      apiVersion: "kubelet.config.k8s.io/v1beta1",
      kind: "KubeletConfiguration",
      // This VM's cgroups are v1; Kubernetes 1.35 and later refuse them unless told not to.
      failCgroupV1: false,
      cgroupDriver: "cgroupfs",
      containerRuntimeEndpoint: `unix://${sock}`,
      staticPodPath: manifests,
      podLogsDir: join(dir, "pods"),
      address: "127.0.0.1",
      port: await freePort(),
      readOnlyPort: 0,
      healthzBindAddress: "127.0.0.1",
      healthzPort: healthz,
      authentication: { anonymous: { enabled: false }, webhook: { enabled: false } },
      authorization: { mode: "AlwaysAllow" },
      failSwapOn: false,
      // A shared machine's disk and memory: the kubelet evicts nothing and collects no image here.
      evictionHard: { "memory.available": "1Mi", "nodefs.available": "0%", "imagefs.available": "0%" },
      imageGCHighThresholdPercent: 100,
    }),
  );
  const node = uniqueName("node");
  const started = daemon(need("TESTBED_KUBELET"), [
    "--config",
    join(dir, "kubelet.yaml"),
    "--root-dir",
    kubeletDir,
    "--hostname-override",
    node,
  ]);
  stopKubelet.push(async () => {
    rmSync(manifests, { recursive: true, force: true });
    mkdirSync(manifests);
    await waitFor(
      async () => (await ctr(["tasks", "ls", "--quiet"], { allowFailure: true })).stdout === "",
      60_000,
      () => "the kubelet left containers running",
    ).catch(() => undefined);
    await started.stop();
  });
  await waitFor(
    async () => (await fetch(`http://127.0.0.1:${healthz}/healthz`).catch(() => undefined))?.ok === true,
    60_000,
    () => `the kubelet did not start:\n${started.output().slice(-3000)}`,
    started.done,
  );
  return { ctr, manifests, node, kubelet: started };
}

test("a kubelet on Debian's containerd runs the runtime image as a pod; a container killed is replaced, nothing lost", async (t) => {
  for (const line of await buildImages()) t.diagnostic(line);
  const dir = mkdtempSync(join(tmpdir(), "dfe-node-"));
  const node = await startNode(t, dir);
  // The images, from the engine that built them, into the node's containerd.
  const images = join(dir, "images.tar");
  await docker(["save", "--output", images, RUNTIME, need("TESTBED_PAUSE_IMAGE")]);
  await node.ctr(["images", "import", images]);

  const N = 5000;
  const topic = await kafkaTopic(t, { partitions: 2 });
  const bucket = await minioBucket(t);
  await produce(topic, N, (i) => ({ value: JSON.stringify({ id: i }) }));
  const config = join(dir, "config");
  mkdirSync(config);
  writeFileSync(
    join(config, "config.yaml"),
    stringify({
      kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: uniqueName("node"), topics: [topic] },
      archive: { ...minioArchive(bucket, "events"), roll_interval_secs: 2 },
      buffer: { flush_age_secs: 1 },
      compression: { codec: "zstd" },
      dlq: { enabled: false },
    }),
    { mode: 0o644 },
  );
  const metrics = `127.0.0.1:${await freePort()}`;
  const start = performance.now();
  writeFileSync(
    join(node.manifests, "archiver.yaml"),
    stringify({
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "archiver", namespace: "default" },
      spec: {
        hostNetwork: true,
        securityContext: { runAsUser: USER, runAsGroup: USER, runAsNonRoot: true },
        containers: [
          {
            name: "archiver",
            image: `docker.io/library/${RUNTIME}`,
            imagePullPolicy: "Never",
            args: ["run", "--metrics-addr", metrics],
            resources: { limits: { memory: "512Mi" } },
            securityContext: {
              readOnlyRootFilesystem: true,
              allowPrivilegeEscalation: false,
              capabilities: { drop: ["ALL"] },
            },
            volumeMounts: [
              { name: "config", mountPath: "/etc/dfe-archiver", readOnly: true },
              { name: "spool", mountPath: "/var/spool/dfe/archiver" },
              { name: "tmp", mountPath: "/tmp" },
            ],
          },
        ],
        volumes: [
          { name: "config", hostPath: { path: config, type: "Directory" } },
          { name: "spool", emptyDir: {} },
          { name: "tmp", emptyDir: {} },
        ],
      },
    }),
  );
  const metric = async (name: string) => {
    const text = await fetch(`http://${metrics}/metrics`).then(
      (r) => r.text(),
      () => undefined,
    );
    return text === undefined ? undefined : sumMetric(text, name);
  };
  await waitFor(
    async () => ((await metric("messages_received_total")) ?? 0) > 0,
    120_000,
    () => `the pod received no record:\n${node.kubelet.output().slice(-3000)}`,
  );
  t.diagnostic(`static pod: first record received ${(performance.now() - start).toFixed(0)} ms after its manifest`);

  const s3 = s3Client();
  t.after(() => s3.destroy());
  const archived = async () =>
    new Set(
      (await readBucket(s3, bucket, dir))
        .flatMap((o) => linesOf(o.content))
        .map((l) => (JSON.parse(l) as { id: number }).id),
    );
  await waitFor(
    async () => (await archived()).size === N,
    120_000,
    () => "the pod's records did not all reach MinIO",
  );

  // The container, killed by the engine under the kubelet; records produced meanwhile wait in Kafka.
  const running = async () =>
    (await node.ctr(["containers", "ls", "--quiet", `image==docker.io/library/${RUNTIME}`])).stdout
      .split("\n")
      .filter((id) => id !== "");
  const [first] = await running();
  assert.ok(first !== undefined, "no runtime container in containerd");
  const pid = Number((await node.ctr(["tasks", "ls"])).stdout.match(new RegExp(`^${first}\\s+(\\d+)`, "m"))?.[1]);
  const uid = (await run("cat", [`/proc/${pid}/status`])).stdout.match(/^Uid:\s+(\d+)/m)?.[1];
  assert.equal(Number(uid), USER, "the pod's process runs as the image's user");
  await produce(topic, N, (i) => ({ value: JSON.stringify({ id: N + i }) }));
  const killed = performance.now();
  await node.ctr(["tasks", "kill", "--signal", "SIGKILL", first]);
  await waitFor(
    async () => {
      const ids = await running();
      if (!ids.some((id) => id !== first)) return false;
      return (await fetch(`http://${metrics}/readyz`).catch(() => undefined))?.ok === true;
    },
    120_000,
    () => `the kubelet did not replace the killed container:\n${node.kubelet.output().slice(-3000)}`,
  );
  t.diagnostic(`killed container replaced and ready ${(performance.now() - killed).toFixed(0)} ms after the kill`);
  await waitFor(
    async () => (await archived()).size === 2 * N,
    120_000,
    () => "records produced around the kill did not all reach MinIO",
  );
  const ids = [...(await archived())].sort((a, b) => a - b);
  assert.deepEqual(
    ids,
    Array.from({ length: 2 * N }, (_, i) => i),
  );
});
