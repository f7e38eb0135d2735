// The watches that feed the work queue: ArchivePipelines, the Deployments the operator manages and their pods mapped
// back to their pipeline's key, and the Secrets pipelines reference. The client's informer gives up on any error but a 410 (a failed list, a refused watch), so
// each one runs under a wrapper that starts it again with backoff.
import {
  AppsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  makeInformer,
  type Informer,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  type ObjectCache,
  type V1Deployment,
  type V1Pod,
  type V1Secret,
} from "@kubernetes/client-node";
import type { Logger } from "pino";
import { API_VERSION, FIELD_MANAGER, GROUP, KIND, PLURAL, VERSION } from "../api/group.ts";
import { referencedSecretNames, type ArchivePipeline } from "../api/spec.ts";
import { PIPELINE_LABEL } from "../render/meta.ts";
import { objectKey, type WorkQueue } from "./queue.ts";

export const MANAGED_SELECTOR = `app.kubernetes.io/managed-by=${FIELD_MANAGER}`;
export const RESTART_BASE_MS = 500;
export const RESTART_MAX_MS = 30_000;

/** What the wrapper needs of an informer: its error event, start and stop. */
export type Startable = Pick<Informer<KubernetesObject>, "start" | "stop"> & {
  on(verb: "error", cb: (err?: unknown) => void): void;
};

export interface RestartOptions {
  name: string;
  log: Logger;
  baseMs?: number;
  maxMs?: number;
}

/** Runs an informer, starting it again after each error with backoff doubling from baseMs to maxMs. */
export class RestartingInformer {
  readonly #informer: Startable;
  readonly #opts: Required<RestartOptions>;
  #stopped = true;
  #timer: NodeJS.Timeout | undefined;
  #failures = 0;
  #attempt = 0;
  #failedAttempt = -1;
  #synced = false;
  /** Starts made so far, first included. */
  starts = 0;

  constructor(informer: Startable, opts: RestartOptions) {
    this.#informer = informer;
    this.#opts = { baseMs: RESTART_BASE_MS, maxMs: RESTART_MAX_MS, ...opts };
    informer.on("error", (err) => this.#failed(err));
  }

  /** True once a start has listed and begun watching. */
  get synced(): boolean {
    return this.#synced;
  }

  start(): void {
    this.#stopped = false;
    void this.#start();
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#informer.stop();
  }

  async #start(): Promise<void> {
    if (this.#stopped) return;
    const attempt = ++this.#attempt;
    this.starts++;
    try {
      await this.#informer.start();
    } catch (e) {
      this.#failed(e);
      return;
    }
    // A failed list does not reject start(): it reports on "error" before start() resolves.
    if (this.#failedAttempt !== attempt && !this.#stopped) {
      this.#failures = 0;
      this.#synced = true;
    }
  }

  #failed(err: unknown): void {
    this.#failedAttempt = this.#attempt;
    if (this.#stopped || this.#timer !== undefined) return;
    const delay = Math.min(this.#opts.baseMs * 2 ** this.#failures, this.#opts.maxMs);
    this.#failures++;
    this.#opts.log.warn({ informer: this.#opts.name, err, retryInMs: delay }, "informer failed; restarting");
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.#start();
    }, delay);
  }
}

/** The key of the ArchivePipeline that controls an object, if one does. */
export function ownerKey(obj: KubernetesObject): string | undefined {
  const owner = obj.metadata?.ownerReferences?.find(
    (r) => r.controller === true && r.kind === KIND && r.apiVersion === API_VERSION,
  );
  const namespace = obj.metadata?.namespace;
  return owner === undefined || namespace === undefined ? undefined : objectKey(namespace, owner.name);
}

/** Which pipelines read which Secrets, by namespace/secret, kept from the pipeline watch's events. */
export class SecretIndex {
  readonly #bySecret = new Map<string, Set<string>>();
  readonly #byPipeline = new Map<string, string[]>();

  /** Records the Secrets a pipeline references now, replacing what it referenced before. */
  set(p: ArchivePipeline): void {
    const key = objectKey(p.metadata.namespace, p.metadata.name);
    this.delete(key);
    // A spec the apiserver let through is an object; anything odd in it just references nothing.
    const secrets = typeof p.spec === "object" && p.spec !== null ? referencedSecretNames(p.spec) : [];
    const refs = secrets.map((s) => objectKey(p.metadata.namespace, s));
    this.#byPipeline.set(key, refs);
    for (const r of refs) {
      let set = this.#bySecret.get(r);
      if (set === undefined) this.#bySecret.set(r, (set = new Set()));
      set.add(key);
    }
  }

  delete(pipelineKey: string): void {
    for (const r of this.#byPipeline.get(pipelineKey) ?? []) {
      const set = this.#bySecret.get(r);
      set?.delete(pipelineKey);
      if (set?.size === 0) this.#bySecret.delete(r);
    }
    this.#byPipeline.delete(pipelineKey);
  }

  /** Keys of the pipelines that reference this Secret. */
  pipelines(namespace: string, secret: string): string[] {
    return [...(this.#bySecret.get(objectKey(namespace, secret)) ?? [])];
  }
}

export interface WatchOptions {
  /** Watch one namespace; all when undefined. */
  namespace?: string;
  log: Logger;
}

/**
 * The operator's watches, feeding the queue: its pipelines; the Deployments it manages; the Secrets pipelines
 * reference (a rotation re-renders the pod-template hash); and the pipelines' pods, whose deletion prunes their
 * reports. start() and stop() them together.
 */
export class Watches {
  readonly informers: RestartingInformer[];
  readonly secrets = new SecretIndex();
  readonly #pipelines: ObjectCache<ArchivePipeline & KubernetesObject>;

  constructor(kc: KubeConfig, queue: WorkQueue, opts: WatchOptions) {
    const { namespace, log } = opts;
    const custom = kc.makeApiClient(CustomObjectsApi);
    const apps = kc.makeApiClient(AppsV1Api);
    const core = kc.makeApiClient(CoreV1Api);
    const scope = namespace === undefined ? "" : `/namespaces/${namespace}`;

    const pipelines = makeInformer<ArchivePipeline & KubernetesObject>(
      kc,
      `/apis/${GROUP}/${VERSION}${scope}/${PLURAL}`,
      async () =>
        (namespace === undefined
          ? await custom.listClusterCustomObject({ group: GROUP, version: VERSION, plural: PLURAL })
          : await custom.listNamespacedCustomObject({
              group: GROUP,
              version: VERSION,
              plural: PLURAL,
              namespace,
            })) as KubernetesListObject<ArchivePipeline & KubernetesObject>,
    );
    this.#pipelines = pipelines;
    const enqueue = (obj: KubernetesObject) => {
      if (obj.metadata?.namespace !== undefined && obj.metadata.name !== undefined)
        queue.add(objectKey(obj.metadata.namespace, obj.metadata.name));
    };
    const indexed = (p: ArchivePipeline & KubernetesObject) => {
      this.secrets.set(p);
      enqueue(p);
    };
    pipelines.on("add", indexed);
    pipelines.on("update", indexed);
    pipelines.on("delete", (p) => {
      this.secrets.delete(objectKey(p.metadata.namespace, p.metadata.name));
      enqueue(p);
    });

    const deployments = makeInformer<V1Deployment>(
      kc,
      `/apis/apps/v1${scope}/deployments`,
      () =>
        namespace === undefined
          ? apps.listDeploymentForAllNamespaces({ labelSelector: MANAGED_SELECTOR })
          : apps.listNamespacedDeployment({ namespace, labelSelector: MANAGED_SELECTOR }),
      MANAGED_SELECTOR,
    );
    const enqueueOwner = (obj: V1Deployment) => {
      const key = ownerKey(obj);
      if (key !== undefined) queue.add(key);
    };
    deployments.on("add", enqueueOwner);
    deployments.on("update", enqueueOwner);
    deployments.on("delete", enqueueOwner);

    // Every Secret in scope: which ones matter is only known from the pipelines, and they may come later.
    const secrets = makeInformer<V1Secret>(kc, `/api/v1${scope}/secrets`, () =>
      namespace === undefined ? core.listSecretForAllNamespaces() : core.listNamespacedSecret({ namespace }),
    );
    const enqueueReaders = (s: V1Secret) => {
      if (s.metadata?.namespace === undefined || s.metadata.name === undefined) return;
      for (const key of this.secrets.pipelines(s.metadata.namespace, s.metadata.name)) queue.add(key);
    };
    secrets.on("add", enqueueReaders);
    secrets.on("update", enqueueReaders);
    secrets.on("delete", enqueueReaders);

    const pods = makeInformer<V1Pod>(
      kc,
      `/api/v1${scope}/pods`,
      () =>
        namespace === undefined
          ? core.listPodForAllNamespaces({ labelSelector: PIPELINE_LABEL })
          : core.listNamespacedPod({ namespace, labelSelector: PIPELINE_LABEL }),
      PIPELINE_LABEL,
    );
    pods.on("delete", (pod) => {
      const pipeline = pod.metadata?.labels?.[PIPELINE_LABEL];
      if (pod.metadata?.namespace !== undefined && pipeline !== undefined)
        queue.add(objectKey(pod.metadata.namespace, pipeline));
    });

    this.informers = [
      new RestartingInformer(pipelines, { name: PLURAL, log }),
      new RestartingInformer(deployments, { name: "deployments", log }),
      new RestartingInformer(secrets, { name: "secrets", log }),
      new RestartingInformer(pods, { name: "pods", log }),
    ];
  }

  get synced(): boolean {
    return this.informers.every((i) => i.synced);
  }

  /** Keys of every pipeline the watch has seen. */
  pipelineKeys(): string[] {
    return this.#pipelines.list().map((p) => objectKey(p.metadata.namespace, p.metadata.name));
  }

  start(): void {
    for (const i of this.informers) i.start();
  }

  async stop(): Promise<void> {
    await Promise.all(this.informers.map((i) => i.stop()));
  }
}
