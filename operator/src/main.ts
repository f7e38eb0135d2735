// dfe-archiver-operator: watches ArchivePipelines and keeps each one's objects and status as its spec says. It
// campaigns for a Lease first (one replica reconciles at a time), serves /healthz, /readyz and /metrics, and on
// SIGTERM stops its watches, drains its queue and hands the Lease back.
import { existsSync, readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { hostname } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { randomBytes } from "node:crypto";
import { parseArgs } from "node:util";
import { CoordinationV1Api, KubeConfig } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { createLogger, type LogFormat } from "../../runtime/src/observe/log.ts";
import { parseListenAddr } from "../../runtime/src/observe/http.ts";
import { Controller } from "./controller/controller.ts";
import { Watches } from "./controller/informers.ts";
import { KedaWatch, scaledObjectServed } from "./controller/keda.ts";
import { LeaderElector } from "./controller/leader.ts";
import { OperatorMetrics } from "./controller/metrics.ts";
import { WorkQueue } from "./controller/queue.ts";
import { Reconciler } from "./controller/reconcile.ts";

const WORKERS = 2;
const SA_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

/** The package's version, from the package.json above this file (in the source tree or in dist/). */
export function packageVersion(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); dir !== dirname(dir); dir = dirname(dir)) {
    const file = join(dir, "package.json");
    if (!existsSync(file)) continue;
    const pkg = JSON.parse(readFileSync(file, "utf8")) as { name?: string; version?: string };
    if (pkg.name === "dfe-archiver" && pkg.version !== undefined) return pkg.version;
  }
  throw new Error("dfe-archiver's package.json not found above the operator");
}

export interface OperatorOptions {
  kubeconfig?: string;
  namespace?: string;
  image: string;
  metricsAddr: string;
  leaderElect: boolean;
  leaseNamespace: string;
  log: Logger;
  /** How often KEDA's presence is looked up again; KEDA_RECHECK_MS by default. */
  kedaRecheckMs?: number;
}

export interface RunningOperator {
  /** host:port the health and metrics server listens on. */
  readonly address: string;
  /** Stops watching, drains the queue, releases the Lease, closes the server. */
  shutDown(): Promise<void>;
  /** Resolves when leadership is lost: the process should exit. */
  readonly lost: Promise<void>;
}

export async function startOperator(o: OperatorOptions): Promise<RunningOperator> {
  const kc = new KubeConfig();
  if (o.kubeconfig !== undefined) kc.loadFromFile(o.kubeconfig);
  else kc.loadFromCluster();
  const log = o.log;
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
        namespace: o.leaseNamespace,
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

function leaseNamespace(flag: string | undefined, watched: string | undefined): string {
  if (flag !== undefined) return flag;
  if (watched !== undefined) return watched;
  if (process.env["POD_NAMESPACE"]) return process.env["POD_NAMESPACE"];
  return existsSync(SA_NAMESPACE_FILE) ? readFileSync(SA_NAMESPACE_FILE, "utf8").trim() : "default";
}

async function main(argv: string[]): Promise<void> {
  // --leader-elect=false, as Go controllers spell it, is the negated flag.
  const args = argv.map((a) =>
    a === "--leader-elect=false" ? "--no-leader-elect" : a === "--leader-elect=true" ? "--leader-elect" : a,
  );
  const { values } = parseArgs({
    args,
    allowNegative: true,
    options: {
      kubeconfig: { type: "string" },
      namespace: { type: "string" },
      image: { type: "string" },
      "metrics-addr": { type: "string", default: "0.0.0.0:8080" },
      "leader-elect": { type: "boolean", default: true },
      "lease-namespace": { type: "string" },
      "log-level": { type: "string", default: "info" },
      "log-format": { type: "string", default: "json" },
    },
  });
  const log = createLogger(values["log-level"], values["log-format"] as LogFormat).child({
    component: "dfe-archiver-operator",
  });
  // Signals are taken before the start: "operator listening" is logged while the start is still under way, and a
  // SIGTERM then must still shut down cleanly rather than kill the process.
  const starting = startOperator({
    ...(values.kubeconfig === undefined ? {} : { kubeconfig: values.kubeconfig }),
    ...(values.namespace === undefined ? {} : { namespace: values.namespace }),
    image: values.image ?? `ghcr.io/dfe/dfe-archiver:${packageVersion()}`,
    metricsAddr: values["metrics-addr"],
    leaderElect: values["leader-elect"],
    leaseNamespace: leaseNamespace(values["lease-namespace"], values.namespace),
    log,
  });
  const stop = (code: number) => () =>
    void starting
      .then((op) => op.shutDown())
      .then(
        () => process.exit(code),
        (e: unknown) => {
          log.error({ err: e }, "shutdown failed");
          process.exit(1);
        },
      );
  process.once("SIGTERM", stop(0));
  process.once("SIGINT", stop(0));
  const op = await starting;
  // Leadership lost: another replica may already be reconciling, so this one stops and lets its pod restart.
  void op.lost.then(() => {
    log.error("leader lease lost; exiting");
    stop(1)();
  });
}

if (import.meta.main) {
  main(process.argv.slice(2)).catch((e: unknown) => {
    console.error(e instanceof Error ? e.message : e);
    process.exit(2);
  });
}
