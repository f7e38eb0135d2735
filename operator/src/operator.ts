// The operator: watches ArchivePipelines and keeps each one's objects and status as its spec says. It finds its
// cluster (kubeconfig.ts), checks with a first request that it may talk to it, campaigns for a Lease (one replica
// reconciles at a time), serves /healthz, /readyz and /metrics, and on shutDown stops its watches, drains its queue and
// hands the Lease back. cli.ts runs it as dfe-archiver-operator.
import { createServer, type Server } from "node:http";
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import { CoordinationV1Api, CustomObjectsApi } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { ArchiverError } from "../../runtime/src/errors.ts";
import { parseListenAddr } from "../../runtime/src/observe/http.ts";
import { GROUP, PLURAL, VERSION } from "./api/group.ts";
import { Controller } from "./controller/controller.ts";
import { Watches } from "./controller/informers.ts";
import { KedaWatch, scaledObjectServed } from "./controller/keda.ts";
import { LEASE_NAME, LeaderElector } from "./controller/leader.ts";
import { OperatorMetrics } from "./controller/metrics.ts";
import { WorkQueue } from "./controller/queue.ts";
import { Reconciler } from "./controller/reconcile.ts";
import { isNotFound } from "./controller/apply.ts";
import { loadCluster, requestError, type ClusterSource } from "./kubeconfig.ts";

const WORKERS = 2;
/** The wait between first requests that failed as a retry may clear, doubling from the first to the last. */
const PROBE_RETRY_MS = [500, 10_000] as const;

export interface OperatorOptions {
  /** --kubeconfig; without it the cluster is found as kubectl finds it (kubeconfig.ts). */
  kubeconfig?: string | undefined;
  /** --context: a context of the kubeconfig other than its current one. */
  context?: string | undefined;
  /** The one namespace watched; all when undefined. */
  namespace?: string | undefined;
  image: string;
  metricsAddr: string;
  leaderElect: boolean;
  /** The Lease's namespace; see leaseNamespace() for where it comes from otherwise. */
  leaseNamespace?: string | undefined;
  log: Logger;
  /** How often KEDA's presence is looked up again; KEDA_RECHECK_MS by default. */
  kedaRecheckMs?: number;
  /** Aborts a start still waiting for the apiserver (a SIGTERM then): startOperator rejects with the reason. */
  signal?: AbortSignal;
}

/** The Lease's namespace and what chose it: a flag, the pod's, the source's, else kubectl's `default`, said so. */
export function leaseNamespace(
  o: Pick<OperatorOptions, "leaseNamespace" | "namespace">,
  cluster: ClusterSource,
  env: NodeJS.ProcessEnv = process.env,
): { namespace: string; from: string } {
  if (o.leaseNamespace !== undefined) return { namespace: o.leaseNamespace, from: "--lease-namespace" };
  if (o.namespace !== undefined) return { namespace: o.namespace, from: "--namespace" };
  if (env["POD_NAMESPACE"]) return { namespace: env["POD_NAMESPACE"], from: "POD_NAMESPACE" };
  if (cluster.namespace !== undefined)
    return {
      namespace: cluster.namespace,
      from: cluster.context === undefined ? "the service account's" : `context ${cluster.context}'s`,
    };
  return {
    namespace: "default",
    from: `kubectl's default: ${cluster.context === undefined ? "the service account" : `context ${cluster.context}`} names no namespace; --lease-namespace picks one`,
  };
}

/**
 * The first requests, as the operator will make them: a page of ArchivePipelines where it watches, and its Lease.
 * A refusal (401, 403, no CRD, TLS, a bad address) throws; a failure a retry may clear waits and tries again.
 */
async function probe(cluster: ClusterSource, o: OperatorOptions, lease: string | undefined): Promise<void> {
  const custom = cluster.kc.makeApiClient(CustomObjectsApi);
  const coordination = cluster.kc.makeApiClient(CoordinationV1Api);
  const crd = { group: GROUP, version: VERSION, plural: PLURAL, limit: 1 };
  const where = o.namespace === undefined ? "in all namespaces" : `in namespace ${o.namespace}`;
  const request = <T>(what: string, call: () => Promise<T>) =>
    call().catch((e: unknown) => {
      throw requestError(e, what, cluster);
    });
  for (let wait: number = PROBE_RETRY_MS[0]; ; wait = Math.min(wait * 2, PROBE_RETRY_MS[1])) {
    try {
      await Promise.all([
        request(`listing ArchivePipelines ${where}`, () =>
          o.namespace === undefined
            ? custom.listClusterCustomObject(crd)
            : custom.listNamespacedCustomObject({ ...crd, namespace: o.namespace }),
        ),
        lease === undefined
          ? undefined
          : request(`reading the Lease ${lease}/${LEASE_NAME}`, () =>
              coordination.readNamespacedLease({ name: LEASE_NAME, namespace: lease }).catch((e: unknown) => {
                if (!isNotFound(e)) throw e;
              }),
            ),
      ]);
      return;
    } catch (e) {
      if (!(e instanceof ArchiverError) || !e.retryable) throw e;
      o.log.warn({ err: e.message, retryInMs: wait }, "the apiserver is not answering yet; trying again");
      await sleep(wait, undefined, o.signal === undefined ? {} : { signal: o.signal });
    }
  }
}

export interface RunningOperator {
  /** host:port the health and metrics server listens on. */
  readonly address: string;
  /** Stops watching, drains the queue, releases the Lease, closes the server. */
  shutDown(): Promise<void>;
  /** Resolves when leadership is lost: the process should exit. */
  readonly lost: Promise<void>;
}

/** Starts the operator; rejects with a ClusterConfigError, its message one line, when the cluster refuses it. */
export async function startOperator(o: OperatorOptions): Promise<RunningOperator> {
  const cluster = loadCluster({ kubeconfig: o.kubeconfig, context: o.context });
  const kc = cluster.kc;
  const log = o.log;
  const lease = leaseNamespace(o, cluster);
  log.info(
    {
      source: cluster.source,
      ...(cluster.context === undefined ? {} : { context: cluster.context }),
      server: cluster.server,
      ...(cluster.skipped.length ? { skipped: cluster.skipped } : {}),
      ...(o.leaderElect ? { leaseNamespace: lease.namespace, leaseNamespaceFrom: lease.from } : {}),
    },
    `apiserver ${cluster.server}, from ${cluster.source}`,
  );
  const queue = new WorkQueue();
  const metrics = new OperatorMetrics(() => queue.length);
  const watches = new Watches(kc, queue, { ...(o.namespace === undefined ? {} : { namespace: o.namespace }), log });
  const keda = new KedaWatch(scaledObjectServed(kc), {
    log,
    ...(o.kedaRecheckMs === undefined ? {} : { recheckMs: o.kedaRecheckMs }),
  });
  const reconciler = new Reconciler(kc, { image: o.image, log, keda });
  const controller = new Controller(reconciler, queue, {
    workers: WORKERS,
    log,
    observe: (ok, s) => metrics.reconciled(ok, s),
  });
  let leading = false;
  const begin = () => {
    leading = true;
    watches.start();
    // KEDA installed or removed: every pipeline renders differently (a ScaledObject, or a plain replica count).
    keda.start(() => {
      for (const key of watches.pipelineKeys()) queue.add(key);
    });
    controller.start();
  };
  let onLost: () => void = () => undefined;
  const lost = new Promise<void>((resolve) => (onLost = resolve));
  const elector = o.leaderElect
    ? new LeaderElector({
        coordination: kc.makeApiClient(CoordinationV1Api),
        namespace: lease.namespace,
        identity: `${hostname()}_${randomBytes(4).toString("hex")}`,
        log,
        onStartedLeading: begin,
        onStoppedLeading: () => {
          leading = false;
          onLost();
        },
      })
    : undefined;

  const server = await listen(o.metricsAddr, async (path) => {
    switch (path) {
      case "/healthz":
        return { code: 200, body: "ok\n" };
      case "/readyz": {
        // A standby replica is ready: it serves nothing but health until it leads.
        const ready = !leading || watches.synced;
        return { code: ready ? 200 : 503, body: ready ? "ok\n" : "informers not synced\n" };
      }
      case "/metrics":
        return { code: 200, body: await metrics.registry.metrics(), type: metrics.registry.contentType };
      default:
        return { code: 404, body: "not found\n" };
    }
  });
  const addr = server.address();
  const address = typeof addr === "object" && addr !== null ? `${addr.address}:${addr.port}` : o.metricsAddr;
  log.info({ address, namespace: o.namespace ?? "(all)", leaderElect: o.leaderElect }, "operator listening");
  try {
    await probe(cluster, o, o.leaderElect ? lease.namespace : undefined);
  } catch (e) {
    await new Promise<void>((resolve) => server.close(() => resolve()));
    throw e;
  }

  if (elector) void elector.run();
  else begin();

  let stopping: Promise<void> | undefined;
  return {
    address,
    lost,
    shutDown() {
      stopping ??= (async () => {
        keda.stop();
        await watches.stop();
        await controller.stop();
        await elector?.stop(true);
        await new Promise<void>((resolve) => server.close(() => resolve()));
        log.info("operator stopped");
      })();
      return stopping;
    },
  };
}

type Handler = (path: string) => Promise<{ code: number; body: string; type?: string }>;

async function listen(addr: string, handle: Handler): Promise<Server> {
  const { host, port } = parseListenAddr(addr);
  const server = createServer((req, res) => {
    handle((req.url ?? "/").split("?")[0] ?? "/").then(
      (r) => res.writeHead(r.code, { "content-type": r.type ?? "text/plain" }).end(r.body),
      (e: unknown) => res.writeHead(500).end(String(e)),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  return server;
}
