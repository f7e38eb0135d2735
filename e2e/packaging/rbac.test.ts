// Least privilege, measured: the real operator (operator/src/operator.ts's startOperator) runs under a ServiceAccount
// bound only to the chart's rendered ClusterRoles and Role, against the testbed's kube-apiserver, and drives a
// pipeline through create, spec edits, a pod report to prune, KEDA turned off, deletion and a leader hand-back.
//
// Method: the operator's kubeconfig points at a recording proxy on loopback that forwards every request to the
// apiserver. Each request is classified the way the apiserver's RequestInfo does (group, resource/subresource,
// verb: GET named = get, GET collection = list, ?watch = watch, POST = create, PATCH = patch, PUT = update,
// DELETE = delete), and a server-side apply answered 201 also counts as create, which the apiserver authorizes
// inside that PATCH. Discovery (non-resource URLs) is left out: every authenticated user may read it.
// A verb the operator needs without ever sending it is derived from what it renders, never listed by hand:
//   - the Role it gives each pipeline's pods: RBAC lets it create a Role or RoleBinding only with the permissions in
//     it (no escalate or bind verb granted instead);
//   - owner references with blockOwnerDeletion: update on the owner's finalizers where OwnerReferencesPermission-
//     Enforcement runs (not on the testbed, on OpenShift by default).
// The test fails when a request is forbidden, when the operator does not do its job, and when the chart grants any
// (group, resource, verb) that is neither requested nor derived; a rule with resourceNames must cover the names used.
// The binding is the chart's watchNamespace variant (a RoleBinding), so that this operator sees only the test's
// namespace on a shared apiserver; the all-namespaces variant binds the same ClusterRole.
import assert from "node:assert/strict";
import { createServer, type IncomingMessage, type Server } from "node:http";
import { request as httpsRequest } from "node:https";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  CoreV1Api,
  CustomObjectsApi,
  KubernetesObjectApi,
  PatchStrategy,
  setHeaderOptions,
  type KubernetesObject,
} from "@kubernetes/client-node";
import { GROUP, PLURAL, VERSION } from "../../operator/src/api/group.ts";
import type { ArchivePipeline } from "../../operator/src/api/spec.ts";
import { isNotFound } from "../../operator/src/controller/apply.ts";
import { LEASE_NAME } from "../../operator/src/controller/leader.ts";
import { objectNames, renderAll, renderRole } from "../../operator/src/render/index.ts";
import { createPipeline, installCrds, runOperator } from "../../operator/test/support/kube.ts";
import { tempDir, waitFor } from "../support/archiver.ts";
import { FIELD_MANAGER, renderChart, type Manifest } from "../support/packaging.ts";
import { kubeConfig, kubeConfigForToken, kubeNamespace, need, uniqueName } from "../support/testbed.ts";

const CR = { group: GROUP, version: VERSION, plural: PLURAL };
const RBAC_KINDS = ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"];

interface Rule {
  apiGroups: string[];
  resources: string[];
  resourceNames?: string[];
  verbs: string[];
}

interface Recorded {
  group: string;
  resource: string;
  verb: string;
  name?: string;
  status: number;
}

const key = (group: string, resource: string, verb: string) => `${group || "core"} ${resource} ${verb}`;
const expand = (rules: readonly Rule[]) =>
  rules.flatMap((r) => r.apiGroups.flatMap((g) => r.resources.flatMap((res) => r.verbs.map((v) => key(g, res, v)))));

/** The apiserver's view of a request: undefined for discovery and other non-resource URLs. */
function classify(method: string, url: string): Omit<Recorded, "status"> | undefined {
  const u = new URL(url, "http://x");
  const parts = u.pathname.split("/").filter((p) => p !== "");
  let rest: string[];
  let group: string;
  if (parts[0] === "api" && parts.length > 2) [group, rest] = ["", parts.slice(2)];
  else if (parts[0] === "apis" && parts.length > 3) [group, rest] = [parts[1]!, parts.slice(3)];
  else return undefined;
  if (rest[0] === "namespaces" && rest.length > 2) rest = rest.slice(2);
  const [resource, name, sub] = rest;
  if (resource === undefined) return undefined;
  const watch = ["true", "1"].includes(u.searchParams.get("watch") ?? "");
  const verb =
    method === "GET"
      ? name === undefined
        ? watch
          ? "watch"
          : "list"
        : "get"
      : ({ POST: "create", PUT: "update", PATCH: "patch", DELETE: name === undefined ? "deletecollection" : "delete" }[
          method
        ] ?? method.toLowerCase());
  return { group, resource: sub === undefined ? resource : `${resource}/${sub}`, verb, ...(name ? { name } : {}) };
}

/** A plain-HTTP proxy on loopback to the apiserver's TLS port that records every resource request and its status. */
async function recordingProxy(): Promise<{ url: string; requests: Recorded[]; close(): Promise<void> }> {
  const upstream = new URL(need("TESTBED_KUBE_SERVER"));
  const ca = readFileSync(need("TESTBED_KUBE_CA"));
  const requests: Recorded[] = [];
  const server: Server = createServer((req: IncomingMessage, res) => {
    const what = classify(req.method ?? "GET", req.url ?? "/");
    const up = httpsRequest(
      {
        host: upstream.hostname,
        port: upstream.port,
        path: req.url,
        method: req.method,
        headers: { ...req.headers, host: upstream.host },
        ca,
      },
      (answer) => {
        const status = answer.statusCode ?? 0;
        if (what) {
          requests.push({ ...what, status });
          // A server-side apply that made the object was authorized as create too.
          if (what.verb === "patch" && status === 201) requests.push({ ...what, verb: "create", status });
        }
        res.writeHead(status, answer.headers);
        answer.pipe(res);
      },
    );
    up.on("error", () => res.destroy());
    // The client gave up (a watch it stopped): so does the upstream request.
    res.on("close", () => {
      if (!res.writableFinished) up.destroy();
    });
    req.pipe(up);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const addr = server.address();
  const port = typeof addr === "object" && addr !== null ? addr.port : 0;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

describe("the chart's RBAC", () => {
  it("is exactly what the operator uses: nothing forbidden, nothing granted that it never needs", async (t) => {
    await installCrds();
    const admin = kubeConfig();
    const objects = KubernetesObjectApi.makeApiClient(admin);
    const core = admin.makeApiClient(CoreV1Api);
    const custom = admin.makeApiClient(CustomObjectsApi);
    const namespace = await kubeNamespace(t);
    const release = uniqueName("lp");

    // The chart's ServiceAccount and RBAC, applied for real; the cluster-scoped ones removed at the end.
    const rendered = (await renderChart(release, namespace, { watchNamespace: namespace })).filter((o) =>
      RBAC_KINDS.includes(o.kind),
    );
    for (const o of rendered)
      await objects.patch(o, undefined, undefined, FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
    t.after(async () => {
      for (const o of rendered.filter((r) => r.kind.startsWith("Cluster")))
        await objects
          .delete(o as KubernetesObject)
          .catch((e: unknown) => (isNotFound(e) ? undefined : Promise.reject(e)));
    });
    const sa = rendered.find((o) => o.kind === "ServiceAccount")!.metadata.name;
    const token = (
      await core.createNamespacedServiceAccountToken({ name: sa, namespace, body: { spec: { audiences: [] } } })
    ).status?.token;
    assert.ok(token, "no token for the operator's ServiceAccount");

    // Its kubeconfig, through the proxy.
    const proxy = await recordingProxy();
    t.after(() => proxy.close());
    const config = JSON.parse(kubeConfigForToken(token).exportConfig()) as {
      clusters: { cluster: Record<string, unknown> }[];
    };
    // Plain HTTP on loopback: the client allows it only with verification off, which has nothing to verify here.
    for (const c of config.clusters) c.cluster = { server: proxy.url, "insecure-skip-tls-verify": true };
    const kubeconfig = join(tempDir(t), "kubeconfig");
    writeFileSync(kubeconfig, JSON.stringify(config), { mode: 0o600 });

    const op = await runOperator(t, namespace, { kubeconfig, leaderElect: true });

    const names = objectNames("lp");
    const read = (apiVersion: string, kind: string, name: string) =>
      objects
        .read({ apiVersion, kind, metadata: { name, namespace } })
        .catch((e: unknown) => (isNotFound(e) ? undefined : Promise.reject(e)));
    const pipeline = () =>
      custom.getNamespacedCustomObject({ ...CR, namespace, name: "lp" }) as Promise<ArchivePipeline>;
    const until = (what: string, cond: () => Promise<boolean>, ms = 60_000) =>
      waitFor(cond, ms, () => `${what}: not within ${ms} ms; requests: ${JSON.stringify(proxy.requests.slice(-20))}`);

    // Create, with a Secret reference and KEDA on.
    await core.createNamespacedSecret({
      namespace,
      body: { metadata: { name: "minio-credentials" }, stringData: { accesskey: "a", secretkey: "b" } },
    });
    await createPipeline(namespace, "lp", {
      kafka: { brokers: ["kafka:9092"], topics: ["events"] },
      archive: {
        destination: "minio://archive/events",
        minio: {
          endpoint: "http://minio:9000",
          accessKey: { secretKeyRef: { name: "minio-credentials", key: "accesskey" } },
          secretKey: { secretKeyRef: { name: "minio-credentials", key: "secretkey" } },
        },
      },
    });
    await until("the ScaledObject and status", async () => {
      const p = await pipeline();
      return (
        (await read("keda.sh/v1alpha1", "ScaledObject", names.workload)) !== undefined &&
        p.status?.observedGeneration === 1 &&
        p.status.conditions?.find((c) => c.type === "Ready")?.reason === "PodsNotReady"
      );
    });

    // A spec edit.
    const merge = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
    await custom.patchNamespacedCustomObject(
      { ...CR, namespace, name: "lp", body: { spec: { compression: { codec: "lz4" } } } },
      merge,
    );
    await until("the ConfigMap to follow", async () => {
      const cm = (await read("v1", "ConfigMap", names.config)) as { data?: Record<string, string> } | undefined;
      return cm?.data?.["config.yaml"]?.includes("codec: lz4") === true;
    });

    // A report from a pod that no longer exists, as a pod writes it: the operator lists the pods and prunes it.
    await custom.patchNamespacedCustomObjectStatus(
      {
        ...CR,
        namespace,
        name: "lp",
        body: {
          status: { pods: [{ name: "lp-archiver-gone", state: "Running", lastReport: new Date().toISOString() }] },
        },
      },
      merge,
    );
    await until("the gone pod's report pruned", async () => {
      const p = await pipeline();
      return (p.status?.pods ?? []).length === 0 && proxy.requests.some((r) => r.resource === "pods");
    });

    // KEDA off: the ScaledObject goes.
    await custom.patchNamespacedCustomObject(
      { ...CR, namespace, name: "lp", body: { spec: { keda: { enabled: false } } } },
      merge,
    );
    await until(
      "the ScaledObject deleted",
      async () => (await read("keda.sh/v1alpha1", "ScaledObject", names.workload)) === undefined,
    );
    const cr = await pipeline();
    const desired = renderAll(cr, { image: "ghcr.io/dfe/dfe-archiver:test", kedaInstalled: true, secretHashes: {} });

    // Deleted: the garbage collector takes the rest; the operator reconciles the key once more.
    await custom.deleteNamespacedCustomObject({ ...CR, namespace, name: "lp" });
    await until(
      "garbage collection",
      async () => (await read("apps/v1", "Deployment", names.workload)) === undefined,
      90_000,
    );
    // The Lease renewed at least once (a renewal is an update) before the leader hands it back.
    await until(
      "a Lease renewal",
      async () => proxy.requests.some((r) => r.resource === "leases" && r.verb === "update"),
      30_000,
    );
    await op.shutDown();

    // Nothing forbidden.
    const refused = proxy.requests.filter((r) => r.status === 401 || r.status === 403);
    assert.deepEqual(refused, [], "requests the chart's RBAC refused");

    // What the operator needs: what it sent, and what RBAC makes it hold for what it renders.
    // (Every request above was authorized: a refused one is answered 403 before any 404 or 409.)
    const sent = new Set(proxy.requests.map((r) => key(r.group, r.resource, r.verb)));
    const delegated = new Set(expand(renderRole(cr).rules as Rule[]));
    const ownerGuarded = new Set(
      desired.some((o) => o.metadata.ownerReferences.some((r) => r.blockOwnerDeletion === true))
        ? [key(GROUP, `${PLURAL}/finalizers`, "update")]
        : [],
    );
    const needed = new Set([...sent, ...delegated, ...ownerGuarded]);

    const roles = rendered.filter((o) => o.kind === "ClusterRole" || o.kind === "Role") as (Manifest & {
      rules: Rule[];
    })[];
    const granted = new Set(roles.flatMap((r) => expand(r.rules)));
    const extra = [...granted].filter((g) => !needed.has(g)).sort();
    assert.deepEqual(extra, [], "granted but never needed");
    const missing = [...needed].filter((n) => !granted.has(n)).sort();
    assert.deepEqual(missing, [], "needed but not granted");

    // A rule narrowed by resourceNames covers every name the operator used it on.
    for (const role of roles)
      for (const rule of role.rules.filter((r) => r.resourceNames !== undefined))
        for (const r of proxy.requests.filter(
          (x) => rule.apiGroups.includes(x.group) && rule.resources.includes(x.resource) && rule.verbs.includes(x.verb),
        ))
          assert.ok(
            rule.resourceNames!.includes(r.name ?? ""),
            `${role.metadata.name}: ${r.verb} ${r.resource}/${r.name} is outside resourceNames`,
          );
    assert.ok(proxy.requests.some((r) => r.resource === "leases" && r.name === LEASE_NAME));
  });
});
