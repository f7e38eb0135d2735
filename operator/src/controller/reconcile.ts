// reconcile(key), controller-runtime's contract: level-based and idempotent, reading everything afresh, so running it
// again with nothing changed writes nothing. Read the pipeline -> validate -> KEDA and Secrets -> render and apply ->
// prune the pods' reports of pods gone -> status (only the fields the operator owns).
import { createHash } from "node:crypto";
import {
  ApiException,
  CoreV1Api,
  CustomObjectsApi,
  KubernetesObjectApi,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
  type V1Deployment,
} from "@kubernetes/client-node";
import type { Logger } from "pino";
import { API_VERSION, FIELD_MANAGER, GROUP, KIND, PLURAL, VERSION } from "../api/group.ts";
import { referencedSecretNames, validateSpec, type ArchivePipeline, type ArchivePipelineStatus } from "../api/spec.ts";
import { objectNames, renderAll, type KubeObject } from "../render/index.ts";
import { PIPELINE_LABEL } from "../render/meta.ts";
import { KEDA_API_VERSION } from "../render/keda.ts";
import { Applier, isNotFound } from "./apply.ts";
import { splitKey } from "./queue.ts";
import { KedaWatch, scaledObjectServed, type KedaCheck } from "./keda.ts";
import { computeConditions, type Observed } from "./status.ts";

const CR = { group: GROUP, version: VERSION, plural: PLURAL };

/** A hash of a Secret's data, independent of its keys' order. */
export function secretDataHash(data: Readonly<Record<string, string>> | undefined): string {
  const h = createHash("sha256");
  for (const k of Object.keys(data ?? {}).sort()) h.update(`${k}=${data?.[k] ?? ""}\n`);
  return h.digest("hex");
}

export interface ReconcilerOptions {
  image: string;
  log: Logger;
  /** KEDA's presence; by default a discovery read at most every KEDA_RECHECK_MS. */
  keda?: KedaCheck;
}

export class Reconciler {
  readonly #custom: CustomObjectsApi;
  readonly #core: CoreV1Api;
  readonly #objects: KubernetesObjectApi;
  readonly #applier: Applier;
  readonly #keda: KedaCheck;
  readonly #image: string;
  readonly #log: Logger;

  constructor(kc: KubeConfig, opts: ReconcilerOptions) {
    this.#custom = kc.makeApiClient(CustomObjectsApi);
    this.#core = kc.makeApiClient(CoreV1Api);
    this.#objects = KubernetesObjectApi.makeApiClient(kc);
    this.#applier = new Applier(this.#objects);
    this.#keda = opts.keda ?? new KedaWatch(scaledObjectServed(kc), { log: opts.log });
    this.#image = opts.image;
    this.#log = opts.log;
  }

  async reconcile(key: string): Promise<void> {
    const { namespace, name } = splitKey(key);
    const cr = await this.#read(namespace, name);
    // Gone: the owner references let the garbage collector remove the rest.
    if (cr === undefined) return;
    const generation = cr.metadata.generation ?? 0;
    const pods = await this.#livePodReports(cr);
    const kedaInstalled = await this.#keda.installed();

    const v = validateSpec(cr.spec);
    if ("faults" in v) {
      await this.#writeStatus(cr, { generation, faults: v.faults, kedaInstalled, missingSecrets: [], pods });
      return;
    }
    const spec = {
      kedaEnabled: v.spec.keda.enabled,
      replicas: v.spec.replicas,
      destinationSet: v.spec.archive.destination !== undefined,
    };

    const secretHashes: Record<string, string> = {};
    const missingSecrets: string[] = [];
    for (const secret of referencedSecretNames(v.spec)) {
      try {
        secretHashes[secret] = secretDataHash(
          (await this.#core.readNamespacedSecret({ name: secret, namespace })).data,
        );
      } catch (e) {
        if (!isNotFound(e)) throw e;
        missingSecrets.push(secret);
      }
    }

    const desired = renderAll(cr, { image: this.#image, kedaInstalled, secretHashes });
    let deployment: V1Deployment | undefined;
    try {
      const applied = await this.#applier.applyAll(desired);
      const written = applied.filter((a) => a.written).map((a) => `${a.object.kind}/${a.object.metadata?.name}`);
      if (written.length > 0) this.#log.info({ pipeline: key, written }, "applied");
      deployment = applied.find((a) => a.object.kind === "Deployment")?.object as V1Deployment | undefined;
      if (kedaInstalled) await this.#pruneScaledObject(cr, desired);
    } catch (e) {
      // A refusal no retry changes is shown on the pipeline; the error still goes back to the queue's backoff.
      if (e instanceof ApiException && e.code >= 400 && e.code < 500 && e.code !== 409 && e.code !== 429)
        await this.#writeStatus(cr, {
          generation,
          applyError: apiMessage(e),
          spec,
          kedaInstalled,
          missingSecrets,
          pods,
        });
      throw e;
    }

    await this.#writeStatus(
      cr,
      {
        generation,
        spec,
        kedaInstalled,
        missingSecrets,
        pods,
        deployment: {
          desired: deployment?.spec?.replicas ?? spec.replicas,
          ready: deployment?.status?.readyReplicas ?? 0,
          updated: deployment?.status?.updatedReplicas ?? 0,
        },
      },
      deployment?.status?.readyReplicas ?? 0,
    );
  }

  async #read(namespace: string, name: string): Promise<ArchivePipeline | undefined> {
    try {
      return (await this.#custom.getNamespacedCustomObject({ ...CR, namespace, name })) as ArchivePipeline;
    } catch (e) {
      if (isNotFound(e)) return undefined;
      throw e;
    }
  }

  /** The pods' reports, with those of pods that no longer exist removed from the pipeline's status. */
  async #livePodReports(cr: ArchivePipeline) {
    const reports = cr.status?.pods ?? [];
    if (reports.length === 0) return reports;
    const { namespace, name } = cr.metadata;
    const list = await this.#core.listNamespacedPod({ namespace, labelSelector: `${PIPELINE_LABEL}=${name}` });
    const live = new Set(list.items.map((p) => p.metadata?.name));
    const gone = reports.flatMap((r, i) => (live.has(r.name) ? [] : [{ i, name: r.name }]));
    if (gone.length > 0) {
      // The entries are the pods' own, under their field managers: a JSON patch removes them without taking them
      // over, and its test ops refuse the patch should a pod have rewritten the list meanwhile.
      const body = gone.reverse().flatMap(({ i, name: pod }) => [
        { op: "test", path: `/status/pods/${i}/name`, value: pod },
        { op: "remove", path: `/status/pods/${i}` },
      ]);
      await this.#custom.patchNamespacedCustomObjectStatus(
        { ...CR, namespace, name, body },
        setHeaderOptions("Content-Type", PatchStrategy.JsonPatch),
      );
      this.#log.info({ pipeline: `${namespace}/${name}`, pruned: gone.map((g) => g.name) }, "pruned pod reports");
    }
    return reports.filter((r) => live.has(r.name));
  }

  /** KEDA turned off for a pipeline: its ScaledObject, if the operator made it, goes. */
  async #pruneScaledObject(cr: ArchivePipeline, desired: readonly KubeObject[]): Promise<void> {
    if (desired.some((o) => o.kind === "ScaledObject")) return;
    const meta = { name: objectNames(cr.metadata.name).workload, namespace: cr.metadata.namespace };
    const header = { apiVersion: KEDA_API_VERSION, kind: "ScaledObject", metadata: meta };
    try {
      const live = await this.#objects.read(header);
      if (!live.metadata?.ownerReferences?.some((r) => r.uid === cr.metadata.uid)) return;
      await this.#objects.delete(header);
    } catch (e) {
      if (!isNotFound(e)) throw e;
    }
  }

  /** Server-side applies the operator's status fields; skipped when they already read so. */
  async #writeStatus(cr: ArchivePipeline, o: Observed, readyReplicas?: number): Promise<void> {
    const status: ArchivePipelineStatus = {
      observedGeneration: o.generation,
      ...(readyReplicas === undefined ? {} : { readyReplicas }),
      conditions: computeConditions(o, cr.status?.conditions, new Date()),
    };
    if (sameStatus(cr.status, status)) return;
    const { namespace, name } = cr.metadata;
    const body = { apiVersion: API_VERSION, kind: KIND, metadata: { name, namespace }, status };
    await this.#custom.patchNamespacedCustomObjectStatus(
      { ...CR, namespace, name, body, fieldManager: FIELD_MANAGER, force: true },
      setHeaderOptions("Content-Type", PatchStrategy.ServerSideApply),
    );
  }
}

function sameStatus(live: ArchivePipelineStatus | undefined, want: ArchivePipelineStatus): boolean {
  if (live === undefined) return false;
  if (live.observedGeneration !== want.observedGeneration || live.readyReplicas !== want.readyReplicas) return false;
  const conditions = want.conditions ?? [];
  return conditions.every((c) => {
    const l = live.conditions?.find((x) => x.type === c.type);
    return (
      l !== undefined &&
      l.status === c.status &&
      l.reason === c.reason &&
      l.message === c.message &&
      l.lastTransitionTime === c.lastTransitionTime &&
      l.observedGeneration === c.observedGeneration
    );
  });
}

/** The message of the apiserver's Status in an error answer, else its HTTP status. */
export function apiMessage(e: ApiException<unknown>): string {
  const body: unknown = typeof e.body === "string" ? safeJson(e.body) : e.body;
  const message = (body as { message?: unknown } | undefined)?.message;
  return typeof message === "string" ? message : `HTTP ${e.code}`;
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
