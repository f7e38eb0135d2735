// The operator's tests on the testbed's shared kube-apiserver: CRDs installed idempotently (the ArchivePipeline CRD
// this revision generates, KEDA's ScaledObject CRD from the testbed's copy), and pipelines created as soon as their
// CRD is served. The CRDs are cluster-scoped and shared by every test file: only withoutKeda() removes one, KEDA's,
// and only while no other file holds a claim on it (see kedaClaim).
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, unlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { TestContext } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import {
  ApiException,
  ApiextensionsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubernetesObjectApi,
  PatchStrategy,
  loadYaml,
  type KubernetesObject,
  type V1CustomResourceDefinition,
  type V1Deployment,
} from "@kubernetes/client-node";
import pino from "pino";
import { parse } from "yaml";
import { crdObject } from "../../src/api/crd.ts";
import { FIELD_MANAGER, GROUP, KIND, PLURAL, VERSION } from "../../src/api/group.ts";
import type { ArchivePipeline, ArchivePipelineSpec, Condition } from "../../src/api/spec.ts";
import { startOperator, type OperatorOptions, type RunningOperator } from "../../src/operator.ts";
import { renderAll } from "../../src/render/index.ts";
import { waitFor } from "../../../e2e/support/archiver.ts";
import { kubeConfig, kubeConfigForToken, need } from "../../../e2e/support/testbed.ts";

const INSTALLED_HASH = "dfe-archiver.test/crd-sha256";

/** A predicate for assert.rejects: an ApiException with this HTTP status. */
export const status = (code: number) => (e: unknown) => e instanceof ApiException && e.code === code;

async function waitEstablished(ext: ApiextensionsV1Api, name: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const crd = await ext.readCustomResourceDefinition({ name });
    if (crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True")) return;
    await sleep(100);
  }
  throw new Error(`CRD ${name} not Established after 10 s`);
}

/** Installs a CRD unless the cluster has it; `refresh` also replaces a copy some other revision installed. */
export async function ensureCrd(raw: object, refresh: boolean): Promise<string> {
  const ext = kubeConfig().makeApiClient(ApiextensionsV1Api);
  const hash = createHash("sha256").update(JSON.stringify(raw)).digest("hex");
  const body = loadYaml<V1CustomResourceDefinition>(JSON.stringify(raw));
  body.metadata!.annotations = { ...body.metadata!.annotations, [INSTALLED_HASH]: hash };
  const name = body.metadata!.name!;
  for (let attempt = 0; ; attempt++) {
    try {
      const current = await ext.readCustomResourceDefinition({ name });
      if (refresh && current.metadata?.annotations?.[INSTALLED_HASH] !== hash) {
        body.metadata!.resourceVersion = current.metadata!.resourceVersion;
        await ext.replaceCustomResourceDefinition({ name, body });
      }
      break;
    } catch (e) {
      if (status(404)(e)) {
        try {
          await ext.createCustomResourceDefinition({ body });
          break;
        } catch (e2) {
          if (!status(409)(e2) || attempt > 3) throw e2;
        }
      } else if (!status(409)(e) || attempt > 3) throw e;
    }
  }
  await waitEstablished(ext, name);
  return name;
}

const kedaCrd = () =>
  parse(readFileSync(join(need("TESTBED_KEDA_CRDS"), "keda.sh_scaledobjects.yaml"), "utf8")) as object;

/** The ArchivePipeline CRD as generated, and KEDA's ScaledObject CRD, held there for this file's run. */
export async function installCrds(): Promise<void> {
  await ensureCrd(crdObject(), true);
  await kedaClaim("shared");
  await ensureCrd(kedaCrd(), false);
}

// ---- the KEDA CRD's presence, between test files ----
//
// A readers-writer lock in the testbed's state directory, one file per holder: shared/<pid> for each file that
// needs the CRD (held until that process exits), exclusive (holding a pid) for the one that takes it away. A holder
// whose process is gone is ignored and cleared, so a killed run leaves nothing stuck.

const lockDir = () => join(dirname(need("TESTBED_KUBECONFIG")), "keda-crd.lock");
const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === "EPERM";
  }
};
const readPid = (file: string): number | undefined => {
  try {
    return Number(readFileSync(file, "utf8"));
  } catch {
    return undefined;
  }
};

/** The live pid holding the exclusive claim, clearing a dead one's. */
function exclusiveHolder(): number | undefined {
  const file = join(lockDir(), "exclusive");
  const pid = readPid(file);
  if (pid === undefined || pid === process.pid) return undefined;
  if (alive(pid)) return pid;
  rmSync(file, { force: true });
  return undefined;
}

/** Live pids, other than this one, holding a shared claim; dead ones' files are cleared. */
function sharedHolders(): number[] {
  const dir = join(lockDir(), "shared");
  return readdirSync(dir).flatMap((name) => {
    const pid = Number(name);
    if (pid === process.pid) return [];
    if (alive(pid)) return [pid];
    rmSync(join(dir, name), { force: true });
    return [];
  });
}

let claimed: "shared" | "exclusive" | undefined;

async function kedaClaim(kind: "shared" | "exclusive"): Promise<void> {
  if (claimed === kind) return;
  mkdirSync(join(lockDir(), "shared"), { recursive: true });
  const shared = join(lockDir(), "shared", String(process.pid));
  const exclusive = join(lockDir(), "exclusive");
  if (kind === "shared") {
    for (;;) {
      while (exclusiveHolder() !== undefined) await sleep(250);
      writeFileSync(shared, "");
      // The exclusive claim may have been taken between the check and the write: give way to it.
      if (exclusiveHolder() === undefined) break;
      unlinkSync(shared);
    }
    process.once("exit", () => rmSync(shared, { force: true }));
  } else {
    for (;;) {
      try {
        writeFileSync(exclusive, String(process.pid), { flag: "wx" });
        break;
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
        while (exclusiveHolder() !== undefined) await sleep(250);
      }
    }
    process.once("exit", () => {
      if (readPid(exclusive) === process.pid) rmSync(exclusive, { force: true });
    });
    // New shared claims now wait; the ones held end with their files' runs.
    while (sharedHolders().length > 0) await sleep(250);
  }
  claimed = kind;
}

export interface KedaAbsence {
  /** Puts KEDA's CRD back (the test watches the operator pick it up); the claim stays this file's. */
  install(): Promise<void>;
}

/**
 * KEDA's ScaledObject CRD removed from the cluster for the rest of this test: waits until no other test file holds
 * it, deletes it, and waits until discovery no longer serves it. When the test ends the CRD is installed again and
 * the claim given back.
 */
export async function withoutKeda(t: TestContext): Promise<KedaAbsence> {
  await ensureCrd(crdObject(), true);
  await kedaClaim("exclusive");
  const ext = kubeConfig().makeApiClient(ApiextensionsV1Api);
  const name = "scaledobjects.keda.sh";
  await ext.deleteCustomResourceDefinition({ name }).catch((e: unknown) => {
    if (!status(404)(e)) throw e;
  });
  const custom = kubeConfig().makeApiClient(CustomObjectsApi);
  for (let i = 0; ; i++) {
    const crdGone = await ext.readCustomResourceDefinition({ name }).then(
      () => false,
      (e: unknown) => (status(404)(e) ? true : Promise.reject(e as Error)),
    );
    const served = await custom.getAPIResources({ group: "keda.sh", version: "v1alpha1" }).then(
      (l) => l.resources.some((r) => r.name === "scaledobjects"),
      (e: unknown) => (status(404)(e) ? false : Promise.reject(e as Error)),
    );
    if (crdGone && !served) break;
    if (i > 600) throw new Error(`${name} still there 60 s after its deletion`);
    await sleep(100);
  }
  const install = async () => {
    await ensureCrd(kedaCrd(), false);
  };
  t.after(async () => {
    await install();
    rmSync(join(lockDir(), "exclusive"), { force: true });
    claimed = undefined;
  });
  return { install };
}

const ref = { group: GROUP, version: VERSION, plural: PLURAL };

/** Creates a pipeline; a CRD just established can take a moment to be served, so a 404 is retried. */
export async function createPipeline(
  namespace: string,
  name: string,
  spec: ArchivePipelineSpec,
): Promise<ArchivePipeline> {
  const custom = kubeConfig().makeApiClient(CustomObjectsApi);
  const body = { apiVersion: `${GROUP}/${VERSION}`, kind: KIND, metadata: { name }, spec };
  for (let i = 0; ; i++) {
    try {
      return (await custom.createNamespacedCustomObject({ ...ref, namespace, body })) as ArchivePipeline;
    } catch (e) {
      if (!status(404)(e) || i >= 50) throw e;
      await sleep(100);
    }
  }
}

// ---- acting as a pipeline's pod ----

/** Server-side applies what the operator renders for a pipeline's pods to run as: ServiceAccount, Role, RoleBinding. */
export async function applyPodRbac(cr: ArchivePipeline): Promise<void> {
  const objects = KubernetesObjectApi.makeApiClient(kubeConfig());
  for (const o of renderAll(cr, { image: "x", kedaInstalled: false, secretHashes: {} }))
    if (["ServiceAccount", "Role", "RoleBinding"].includes(o.kind))
      await objects.patch(
        o as KubernetesObject,
        undefined,
        undefined,
        FIELD_MANAGER,
        true,
        PatchStrategy.ServerSideApply,
      );
}

/**
 * A kubeconfig file holding a TokenRequest token of the ServiceAccount, as a pod running as it would have: its
 * path, to hand a runtime as KUBECONFIG. Removed when the test ends.
 */
export async function serviceAccountKubeconfig(t: TestContext, namespace: string, serviceAccount: string) {
  const core = kubeConfig().makeApiClient(CoreV1Api);
  const tr = await core.createNamespacedServiceAccountToken({
    name: serviceAccount,
    namespace,
    body: { spec: { audiences: [], expirationSeconds: 3600 } },
  });
  const token = tr.status?.token;
  if (!token) throw new Error(`TokenRequest for ${namespace}/${serviceAccount} returned no token`);
  const dir = mkdtempSync(join(tmpdir(), "sa-kubeconfig-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, "kubeconfig");
  writeFileSync(file, kubeConfigForToken(token).exportConfig(), { mode: 0o600 });
  return { token, file };
}

/** The env a container of the Deployment gets: values as written, the downward API's fields as this pod's. */
export function containerEnv(dep: V1Deployment, pod: { name: string; namespace: string }): Record<string, string> {
  const field: Record<string, string> = { "metadata.name": pod.name, "metadata.namespace": pod.namespace };
  const env: Record<string, string> = {};
  for (const e of dep.spec?.template.spec?.containers[0]?.env ?? []) {
    const path = e.valueFrom?.fieldRef?.fieldPath;
    if (e.value !== undefined) env[e.name] = e.value;
    else if (path !== undefined && field[path] !== undefined) env[e.name] = field[path];
    else throw new Error(`env ${e.name}: only values and the pod's name and namespace are stood in for`);
  }
  return env;
}

export async function readPipeline(namespace: string, name: string): Promise<ArchivePipeline> {
  const custom = kubeConfig().makeApiClient(CustomObjectsApi);
  return (await custom.getNamespacedCustomObject({ ...ref, namespace, name })) as ArchivePipeline;
}

export function conditionOf(p: ArchivePipeline, type: string): Condition | undefined {
  return p.status?.conditions?.find((c) => c.type === type);
}

/** Polls `probe` until it yields a value; `detail` adds what a failure should show. */
export async function eventually<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  opts: { ms?: number; detail?: () => string } = {},
): Promise<T> {
  const ms = opts.ms ?? 60_000;
  let value: T | undefined;
  await waitFor(
    async () => (value = await probe()) !== undefined,
    ms,
    () => `${what}: not within ${ms} ms${opts.detail ? `\n${opts.detail()}` : ""}`,
  );
  return value!;
}

/** The operator in this process, watching one namespace, without leader election; shut down when the test ends. */
export async function runOperator(
  t: TestContext,
  namespace: string,
  opts: Partial<OperatorOptions> = {},
): Promise<RunningOperator> {
  const op = await startOperator({
    kubeconfig: need("TESTBED_KUBECONFIG"),
    namespace,
    image: "ghcr.io/dfe/dfe-archiver:test",
    metricsAddr: "127.0.0.1:0",
    leaderElect: false,
    leaseNamespace: namespace,
    log: pino({ level: process.env["OPERATOR_TEST_LOG"] ?? "silent" }),
    ...opts,
  });
  t.after(() => op.shutDown());
  return op;
}
