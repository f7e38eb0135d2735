// A runtime pod's report of itself into its ArchivePipeline's status.pods: on each health change (debounced) and at a
// heartbeat, by server-side apply under a field manager of the pod's own, so every pod owns exactly its entry of the
// list (keyed by name) and pods never overwrite each other. Reporting is best effort: a failure is logged and retried
// with backoff, and nothing here ever blocks or stops the pipeline.
import { createHash } from "node:crypto";
import type * as KubeClientModule from "@kubernetes/client-node";
import type { ConfigurationOptions, CustomObjectsApi } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { API_VERSION, GROUP, KIND, PLURAL, VERSION } from "../../../operator/src/api/group.ts";
import { snakeToCamel } from "../../../operator/src/api/keys.ts";
import type { PodReport } from "../../../operator/src/api/spec.ts";
import { COMPONENTS, type Health, type HealthSnapshot } from "./health.ts";

/** The env the operator's Deployment gives each pod: the downward API's pod name and namespace, and the pipeline. */
export const POD_ENV = {
  pod: "POD_NAME",
  namespace: "POD_NAMESPACE",
  pipeline: "DFE_ARCHIVER_PIPELINE_NAME",
} as const;

export const DEBOUNCE_MS = 1_000;
export const HEARTBEAT_MS = 60_000;
export const RETRY_BASE_MS = 1_000;
export const RETRY_MAX_MS = 60_000;
export const REQUEST_TIMEOUT_MS = 15_000;
const FIELD_MANAGER_MAX = 128;

/** The field manager a pod applies its entry as: its own, so it owns nothing but its entry. */
export function podFieldManager(pod: string): string {
  const name = `dfe-archiver-pod/${pod}`;
  if (name.length <= FIELD_MANAGER_MAX) return name;
  return `dfe-archiver-pod/${createHash("sha256").update(pod).digest("hex").slice(0, 32)}`;
}

/** metav1 time: whole seconds. */
const metaTime = (at: Date) => at.toISOString().replace(/\.\d+Z$/, "Z");

/**
 * The pod's entry from a health snapshot. Idle (no destination) unless a component has failed or the last config
 * change was refused (a change that did not take is a fault to show, not a state to wait in); Degraded when any
 * component is not ok, its reason naming each such component; Running otherwise.
 */
export function podReport(pod: string, s: HealthSnapshot, at: Date, deliveryGuarantee?: string): PodReport {
  const components = Object.fromEntries(
    COMPONENTS.map((name) => {
      const c = s.components[name];
      return [snakeToCamel(name), c.reason === undefined ? { state: c.state } : { state: c.state, reason: c.reason }];
    }),
  ) as PodReport["components"];
  const faults = COMPONENTS.filter((n) => s.components[n].state !== "ok");
  const failed = faults.some((n) => s.components[n].state === "failed");
  const base = { name: pod, components, lastReport: metaTime(at) };
  if (s.idle && !failed && !s.configRefused) {
    const reason = s.components.work_config.reason;
    return { ...base, state: "Idle", ...(reason === undefined ? {} : { reason }) };
  }
  const guarantee = deliveryGuarantee === undefined ? {} : { deliveryGuarantee };
  if (faults.length === 0) return { ...base, state: "Running", ...guarantee };
  const reason = faults
    .map((n) => {
      const c = s.components[n];
      return `${n} ${c.state}${c.reason === undefined ? "" : `: ${c.reason}`}`;
    })
    .join("; ");
  return { ...base, state: "Degraded", reason, ...guarantee };
}

export interface PodIdentity {
  pod: string;
  namespace: string;
  pipeline: string;
}

/** The pod's name, namespace and pipeline from its env, or undefined when the process is not one of its pods. */
export function podIdentity(env: NodeJS.ProcessEnv): PodIdentity | undefined {
  const pod = env[POD_ENV.pod];
  const namespace = env[POD_ENV.namespace];
  const pipeline = env[POD_ENV.pipeline];
  if (!pod || !namespace || !pipeline) return undefined;
  return { pod, namespace, pipeline };
}

export interface ReporterOptions {
  health: Health;
  env: NodeJS.ProcessEnv;
  log: Logger;
  /** The delivery guarantee in force, when a pipeline runs. */
  deliveryGuarantee?: () => string | undefined;
  debounceMs?: number;
  heartbeatMs?: number;
  retryBaseMs?: number;
  retryMaxMs?: number;
}

export interface StatusReporter {
  /** Stops reporting; waits for a report in flight (at most its request timeout). */
  close(): Promise<void>;
}

// Loaded only in a pod that reports: the client takes about 0.4 s to load, which every other start would pay.
type KubeClient = typeof KubeClientModule;

// The apply patch's content type, and a deadline so a hung apiserver cannot hold the next report back forever.
const applyRequest = ({ PatchStrategy, Observable }: KubeClient, timeoutMs: number): ConfigurationOptions => ({
  middlewareMergeStrategy: "append",
  middleware: [
    {
      pre: (ctx) => {
        ctx.setHeaderParam("Content-Type", PatchStrategy.ServerSideApply);
        ctx.setSignal(AbortSignal.timeout(timeoutMs));
        return new Observable(Promise.resolve(ctx));
      },
      post: (res) => new Observable(Promise.resolve(res)),
    },
  ],
});

/**
 * Starts reporting when the env names a pod of a pipeline (POD_NAME, POD_NAMESPACE, DFE_ARCHIVER_PIPELINE_NAME);
 * undefined otherwise. Credentials are the pod's service account, or the kubeconfig KUBECONFIG names when set (a
 * process standing in for a pod outside the cluster).
 */
export async function startStatusReporter(o: ReporterOptions): Promise<StatusReporter | undefined> {
  const id = podIdentity(o.env);
  if (id === undefined) return undefined;
  const kubeconfig = o.env["KUBECONFIG"];
  if (!kubeconfig && !o.env["KUBERNETES_SERVICE_HOST"]) {
    o.log.warn({ pod: id.pod }, "status report off: neither in a cluster nor given KUBECONFIG");
    return undefined;
  }
  const client = await import("@kubernetes/client-node");
  const kc = new client.KubeConfig();
  try {
    if (kubeconfig) kc.loadFromFile(kubeconfig);
    else kc.loadFromCluster();
  } catch (err) {
    // Unreadable credentials turn the report off; the pipeline runs on regardless.
    o.log.warn({ pod: id.pod, err: describe(err) }, "status report off: credentials unreadable");
    return undefined;
  }
  return new Reporter(kc.makeApiClient(client.CustomObjectsApi), () => applyRequest(client, REQUEST_TIMEOUT_MS), id, o);
}

type Next = "debounce" | "heartbeat" | "retry";

class Reporter implements StatusReporter {
  readonly #api: CustomObjectsApi;
  /** Each request's options: its own deadline. */
  readonly #apply: () => ConfigurationOptions;
  readonly #id: PodIdentity;
  readonly #o: ReporterOptions;
  readonly #log: Logger;
  readonly #unsubscribe: () => void;
  #timer: NodeJS.Timeout | undefined;
  #next: Next = "debounce";
  #inflight: Promise<void> | undefined;
  /** A change arrived while a report was in flight. */
  #dirty = false;
  #failures = 0;
  #closed = false;

  constructor(api: CustomObjectsApi, apply: () => ConfigurationOptions, id: PodIdentity, o: ReporterOptions) {
    this.#api = api;
    this.#apply = apply;
    this.#id = id;
    this.#o = o;
    this.#log = o.log.child({ component: "status-report", pipeline: `${id.namespace}/${id.pipeline}` });
    this.#unsubscribe = o.health.onChange(() => this.#changed());
    this.#schedule("debounce", 0);
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#unsubscribe();
    clearTimeout(this.#timer);
    await this.#inflight;
  }

  #changed(): void {
    if (this.#inflight !== undefined) this.#dirty = true;
    // A retry keeps its backoff (it sends the newest state anyway); a pending debounce is not pushed back.
    else if (this.#next === "heartbeat") this.#schedule("debounce", this.#o.debounceMs ?? DEBOUNCE_MS);
  }

  #schedule(next: Next, ms: number): void {
    if (this.#closed) return;
    clearTimeout(this.#timer);
    this.#next = next;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#inflight = this.#report().finally(() => (this.#inflight = undefined));
    }, ms);
    this.#timer.unref();
  }

  async #report(): Promise<void> {
    this.#dirty = false;
    const { pod, namespace, pipeline } = this.#id;
    const entry = podReport(pod, this.#o.health.snapshot(), new Date(), this.#o.deliveryGuarantee?.());
    const body = {
      apiVersion: API_VERSION,
      kind: KIND,
      metadata: { name: pipeline, namespace },
      status: { pods: [entry] },
    };
    try {
      await this.#api.patchNamespacedCustomObjectStatus(
        {
          group: GROUP,
          version: VERSION,
          plural: PLURAL,
          namespace,
          name: pipeline,
          body,
          fieldManager: podFieldManager(pod),
          force: true,
        },
        this.#apply(),
      );
      if (this.#failures > 0) this.#log.info({ state: entry.state, afterFailures: this.#failures }, "status reported");
      else this.#log.debug({ state: entry.state }, "status reported");
      this.#failures = 0;
      if (this.#dirty) this.#schedule("debounce", this.#o.debounceMs ?? DEBOUNCE_MS);
      else this.#schedule("heartbeat", this.#o.heartbeatMs ?? HEARTBEAT_MS);
    } catch (err) {
      const delay = Math.min(
        (this.#o.retryBaseMs ?? RETRY_BASE_MS) * 2 ** this.#failures,
        this.#o.retryMaxMs ?? RETRY_MAX_MS,
      );
      this.#failures++;
      this.#log.warn({ err: describe(err), retryInMs: delay, failures: this.#failures }, "status report failed");
      this.#schedule("retry", delay);
    }
  }
}

/** An API refusal as its HTTP code and the apiserver's message, anything else as its message. */
function describe(err: unknown): string {
  if (typeof err === "object" && err !== null && "code" in err && "body" in err) {
    const body = (err as { body: unknown }).body;
    let message: unknown;
    try {
      message = (typeof body === "string" ? (JSON.parse(body) as { message?: unknown }) : undefined)?.message;
    } catch {
      message = undefined;
    }
    return `HTTP ${String((err as { code: unknown }).code)}${typeof message === "string" ? `: ${message}` : ""}`;
  }
  return err instanceof Error ? err.message : String(err);
}
