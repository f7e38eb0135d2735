// The watches that feed the work queue: ArchivePipelines, and the Deployments the operator manages mapped back to
// their pipeline's key. The client's informer gives up on any error but a 410 (a failed list, a refused watch), so
// each one runs under a wrapper that starts it again with backoff.
import {
  AppsV1Api,
  CustomObjectsApi,
  makeInformer,
  type Informer,
  type KubeConfig,
  type KubernetesListObject,
  type KubernetesObject,
  type V1Deployment,
} from "@kubernetes/client-node";
import type { Logger } from "pino";
import { API_VERSION, FIELD_MANAGER, GROUP, KIND, PLURAL, VERSION } from "../api/group.ts";
import type { ArchivePipeline } from "../api/spec.ts";
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

export interface WatchOptions {
  /** Watch one namespace; all when undefined. */
  namespace?: string;
  log: Logger;
}

/** The operator's two watches, feeding the queue; start() and stop() them together. */
export class Watches {
  readonly informers: RestartingInformer[];

  constructor(kc: KubeConfig, queue: WorkQueue, opts: WatchOptions) {
    const { namespace, log } = opts;
    const custom = kc.makeApiClient(CustomObjectsApi);
    const apps = kc.makeApiClient(AppsV1Api);
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
    const enqueue = (obj: KubernetesObject) => {
      if (obj.metadata?.namespace !== undefined && obj.metadata.name !== undefined)
        queue.add(objectKey(obj.metadata.namespace, obj.metadata.name));
    };
    pipelines.on("add", enqueue);
    pipelines.on("update", enqueue);
    pipelines.on("delete", enqueue);

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

    this.informers = [
      new RestartingInformer(pipelines, { name: PLURAL, log }),
      new RestartingInformer(deployments, { name: "deployments", log }),
    ];
  }

  get synced(): boolean {
    return this.informers.every((i) => i.synced);
  }

  start(): void {
    for (const i of this.informers) i.start();
  }

  async stop(): Promise<void> {
    await Promise.all(this.informers.map((i) => i.stop()));
  }
}
