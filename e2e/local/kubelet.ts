// A one-pod kubelet for the testbed, which has an apiserver and controllers but no node: it takes a Pod the
// ReplicaSet controller created and starts the runtime process exactly as the Pod's spec says, then reports the
// Pod Running and its readiness (from the container's readinessProbe) into the Pod's status, as a kubelet does. Each volume is made real and mounted at its mountPath inside a private mount
// namespace of the process (`unshare -m`, as root): ConfigMaps laid out and kept current the kubelet's way (atomic
// `..data` swaps), Secrets as files, emptyDirs as tmpfs of their sizeLimit, the service-account token, CA and
// namespace from a TokenRequest. Env is resolved from values, the downward API and Secret/ConfigMap keys.
// What differs from a node: pods share the host's network, so the container's ports are remapped to free ones,
// and the image's entrypoint is this checkout's `node runtime/src/main.ts`.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import type { TestContext } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import {
  CoreV1Api,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
  type V1Container,
  type V1EnvVar,
  type V1Pod,
} from "@kubernetes/client-node";
import { configMapMount, type ConfigMapMount } from "../support/configmap.ts";
import { freePort, mainTs, nodeBin, tempDir, watchChild } from "../support/archiver.ts";
import { need } from "../support/testbed.ts";

const REPO = resolve(dirname(mainTs), "..", "..");

export interface RunningPod {
  readonly name: string;
  readonly proc: ChildProcess;
  /** The container port `name` as reached from here (remapped to a free host port). */
  port(name: string): number;
  output(): string;
  /** Restarts seen: the process's PID changes only on a restart, never on a config change. */
  readonly pid: number | undefined;
  stop(signal?: NodeJS.Signals): Promise<number | string>;
}

interface Mount {
  source: string;
  target: string;
  readOnly: boolean;
  /** For an emptyDir with a sizeLimit: a tmpfs of that size instead of a bind mount. */
  tmpfsSize?: string;
}

function decode(data: Record<string, string> | undefined): Record<string, string> {
  return Object.fromEntries(Object.entries(data ?? {}).map(([k, v]) => [k, Buffer.from(v, "base64").toString()]));
}

/** Quantities as tmpfs `size=` takes them: Ki/Mi/Gi are k/m/g there. */
function tmpfsSize(q: string): string {
  const m = /^(\d+)(Ki|Mi|Gi|Ti)?$/.exec(q);
  if (!m) throw new Error(`emptyDir sizeLimit ${q} is not a binary quantity this runner understands`);
  return `${m[1]}${(m[2] ?? "").charAt(0).toLowerCase()}`;
}

/** The downward API's fields this runner knows. */
function fieldRef(path: string, pod: V1Pod): string {
  const v = { "metadata.name": pod.metadata?.name, "metadata.namespace": pod.metadata?.namespace }[path];
  if (v === undefined) throw new Error(`fieldRef ${path} is not known to this runner`);
  return v;
}

async function resolveEnv(core: CoreV1Api, pod: V1Pod, env: readonly V1EnvVar[]): Promise<Record<string, string>> {
  const namespace = pod.metadata?.namespace ?? "";
  const out: Record<string, string> = {};
  for (const e of env) {
    const from = e.valueFrom;
    if (from === undefined)
      out[e.name] = (e.value ?? "").replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (_, k: string) => out[k] ?? "");
    else if (from.fieldRef) out[e.name] = fieldRef(from.fieldRef.fieldPath, pod);
    else if (from.secretKeyRef) {
      const s = await core.readNamespacedSecret({ name: from.secretKeyRef.name ?? "", namespace });
      const v = decode(s.data)[from.secretKeyRef.key];
      if (v === undefined && from.secretKeyRef.optional !== true)
        throw new Error(`env ${e.name}: Secret ${from.secretKeyRef.name} has no key ${from.secretKeyRef.key}`);
      if (v !== undefined) out[e.name] = v;
    } else if (from.configMapKeyRef) {
      const c = await core.readNamespacedConfigMap({ name: from.configMapKeyRef.name ?? "", namespace });
      const v = c.data?.[from.configMapKeyRef.key];
      if (v !== undefined) out[e.name] = v;
    } else throw new Error(`env ${e.name}: valueFrom ${JSON.stringify(from)} is not known to this runner`);
  }
  return out;
}

/** Rewrites `host:PORT` arguments that bind a container port to the free host port it was remapped to. */
function remapArgs(args: readonly string[], ports: Map<number, number>): string[] {
  return args.map((a) =>
    a.replace(/^(.*:)(\d+)$/, (whole, host: string, p: string) => {
      const mapped = ports.get(Number(p));
      return mapped === undefined ? whole : `${host === "0.0.0.0:" ? "127.0.0.1:" : host}${mapped}`;
    }),
  );
}

export interface RunPodOptions {
  kc: KubeConfig;
  pod: V1Pod;
  /** How often a ConfigMap volume is re-read; the kubelet's sync period, shortened for a test. */
  syncMs?: number;
}

export async function runPod(t: TestContext, opts: RunPodOptions): Promise<RunningPod> {
  const { kc, pod } = opts;
  const namespace = pod.metadata?.namespace ?? "";
  const podName = pod.metadata?.name ?? "";
  const spec = pod.spec;
  if (!spec) throw new Error(`pod ${podName} has no spec`);
  const core = kc.makeApiClient(CoreV1Api);
  const container: V1Container | undefined = spec.containers[0];
  if (!container) throw new Error("the pod template has no container");
  const root = tempDir(t, `pod-${podName}-`);
  const mounts: Mount[] = [];
  const configMaps: { name: string; mount: ConfigMapMount; version: string | undefined }[] = [];

  for (const v of spec.volumes ?? []) {
    const vm = (container.volumeMounts ?? []).find((m) => m.name === v.name);
    if (!vm) continue;
    const dir = join(root, "volumes", v.name);
    if (v.configMap) {
      const cm = await core.readNamespacedConfigMap({ name: v.configMap.name ?? "", namespace });
      const mount = configMapMount(dir, cm.data ?? {});
      configMaps.push({ name: v.configMap.name ?? "", mount, version: cm.metadata?.resourceVersion });
    } else if (v.secret) {
      const s = await core.readNamespacedSecret({ name: v.secret.secretName ?? "", namespace });
      const data = decode(s.data);
      const items = v.secret.items ?? Object.keys(data).map((key) => ({ key, path: key }));
      mkdirSync(dir, { recursive: true });
      for (const it of items) writeFileSync(join(dir, it.path), data[it.key] ?? "", { mode: 0o400 });
    } else if (v.emptyDir) {
      mkdirSync(dir, { recursive: true });
      if (v.emptyDir.sizeLimit !== undefined) {
        mounts.push({
          source: dir,
          target: vm.mountPath,
          readOnly: false,
          tmpfsSize: tmpfsSize(String(v.emptyDir.sizeLimit)),
        });
        continue;
      }
    } else if (v.projected) {
      // The service-account token volume admission adds: a TokenRequest token, the cluster CA, the namespace.
      mkdirSync(dir, { recursive: true });
      for (const src of v.projected.sources ?? []) {
        if (src.serviceAccountToken) {
          const tr = await core.createNamespacedServiceAccountToken({
            name: spec.serviceAccountName ?? "default",
            namespace,
            body: { spec: { audiences: [], expirationSeconds: src.serviceAccountToken.expirationSeconds ?? 3600 } },
          });
          writeFileSync(join(dir, src.serviceAccountToken.path), tr.status?.token ?? "");
        } else if (src.configMap) {
          const cm = await core.readNamespacedConfigMap({ name: src.configMap.name ?? "", namespace });
          for (const it of src.configMap.items ?? []) writeFileSync(join(dir, it.path), cm.data?.[it.key] ?? "");
        } else if (src.downwardAPI) {
          for (const it of src.downwardAPI.items ?? [])
            writeFileSync(join(dir, it.path), fieldRef(it.fieldRef?.fieldPath ?? "", pod));
        } else throw new Error(`volume ${v.name}: projected source ${JSON.stringify(src)} is not known to this runner`);
      }
    } else if (v.persistentVolumeClaim) {
      mkdirSync(dir, { recursive: true });
    } else throw new Error(`volume ${v.name}: kind ${JSON.stringify(v)} is not known to this runner`);
    mounts.push({ source: dir, target: vm.mountPath, readOnly: vm.readOnly === true });
  }

  const ports = new Map<number, number>();
  const portsByName = new Map<string, number>();
  for (const p of container.ports ?? []) {
    const host = await freePort();
    ports.set(p.containerPort, host);
    if (p.name) portsByName.set(p.name, host);
  }
  const server = new URL(need("TESTBED_KUBE_SERVER"));
  const env = {
    PATH: process.env["PATH"] ?? "",
    HOME: "/tmp",
    KUBERNETES_SERVICE_HOST: server.hostname,
    KUBERNETES_SERVICE_PORT: server.port,
    ...(await resolveEnv(core, pod, container.env ?? [])),
  };
  const args = remapArgs([...(container.command ?? []).slice(1), ...(container.args ?? [])], ports);

  // Inside the namespace: each mount point made, mounted, read-only where the template says, then the runtime. The
  // volumes' sources live under this host's /tmp, so a mount over /tmp (the pod's tmp emptyDir) goes last.
  const shadows = (m: Mount) => mounts.some((o) => o !== m && `${o.source}/`.startsWith(`${m.target}/`));
  mounts.sort((a, b) => Number(shadows(a)) - Number(shadows(b)));
  // The checkout the "image" runs from stays visible even where a pod mount (its /tmp, when the checkout lives under
  // /tmp) would hide it: stashed on a private tmpfs before the mounts, bound back at its own path after them.
  const hidesRepo = mounts.some((m) => `${REPO}/`.startsWith(`${m.target}/`));
  const script = [
    "set -e",
    ...(hidesRepo ? ["mount -t tmpfs tmpfs /mnt", "mkdir /mnt/repo", 'mount --bind "$REPO" /mnt/repo'] : []),
    ...mounts.flatMap((m, i) => {
      const src = `"$M${i}S"`;
      const dst = `"$M${i}T"`;
      return [
        `mkdir -p ${dst}`,
        m.tmpfsSize ? `mount -t tmpfs -o size=${m.tmpfsSize} tmpfs ${dst}` : `mount --bind ${src} ${dst}`,
        ...(m.readOnly ? [`mount -o remount,bind,ro ${dst}`] : []),
      ];
    }),
    ...(hidesRepo ? ['mkdir -p "$REPO"', 'mount --bind /mnt/repo "$REPO"'] : []),
    `exec "$@"`,
  ].join("\n");
  const mountEnv = Object.fromEntries(
    mounts.flatMap((m, i) => [
      [`M${i}S`, m.source],
      [`M${i}T`, m.target],
    ]),
  );
  const proc = spawn(
    "unshare",
    ["-m", "--propagation", "private", "sh", "-c", script, "pod", nodeBin, mainTs, ...args],
    { env: { ...env, ...mountEnv, REPO }, cwd: "/", stdio: ["ignore", "pipe", "pipe"] },
  );
  const { output, exited, done } = watchChild(t, proc);

  // The kubelet's ConfigMap sync: a changed ConfigMap reaches the mount by an atomic swap.
  const sync = (async () => {
    while (!done()) {
      await sleep(opts.syncMs ?? 1000);
      for (const c of configMaps) {
        const cm = await core.readNamespacedConfigMap({ name: c.name, namespace }).catch(() => undefined);
        if (cm && cm.metadata?.resourceVersion !== c.version) {
          c.version = cm.metadata?.resourceVersion;
          c.mount.update(cm.data ?? {});
        }
      }
    }
  })();
  // The kubelet's readiness prober, and the Pod status it writes: the ReplicaSet and Deployment count ready pods.
  const probe = container.readinessProbe?.httpGet;
  const probePort =
    probe === undefined
      ? undefined
      : typeof probe.port === "number"
        ? ports.get(probe.port)
        : portsByName.get(probe.port);
  const started = new Date().toISOString();
  let ready: boolean | undefined;
  const writeStatus = async (isReady: boolean) => {
    const cond = (type: string, status: boolean) => ({
      type,
      status: status ? "True" : "False",
      lastTransitionTime: new Date().toISOString(),
    });
    await core.patchNamespacedPodStatus(
      {
        name: podName,
        namespace,
        body: {
          status: {
            phase: "Running",
            startTime: started,
            conditions: [
              cond("PodScheduled", true),
              cond("Initialized", true),
              cond("ContainersReady", isReady),
              cond("Ready", isReady),
            ],
            containerStatuses: [
              {
                name: container.name,
                image: container.image ?? "",
                imageID: "",
                ready: isReady,
                restartCount: 0,
                started: true,
                state: { running: { startedAt: started } },
              },
            ],
          },
        },
      },
      setHeaderOptions("Content-Type", PatchStrategy.MergePatch),
    );
  };
  const prober = (async () => {
    while (!done()) {
      const ok =
        probe === undefined ||
        (await fetch(`http://127.0.0.1:${probePort}${probe.path ?? "/"}`).then(
          (r) => r.ok,
          () => false,
        ));
      if (ok !== ready && !done()) {
        ready = ok;
        await writeStatus(ok).catch(() => (ready = undefined));
      }
      await sleep(1000);
    }
  })();
  t.after(() => Promise.all([sync, prober]));

  return {
    name: podName,
    proc,
    pid: proc.pid,
    port(name) {
      const p = portsByName.get(name);
      if (p === undefined) throw new Error(`container has no port named ${name}`);
      return p;
    },
    output,
    stop: async (signal = "SIGTERM") => {
      proc.kill(signal);
      return exited;
    },
  };
}
