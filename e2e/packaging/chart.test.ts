// The Helm chart: lint and template clean under every option, values refused by its schema, the CRD byte-identical
// to the generated one and packaged with the chart, versions that follow package.json, a Grafana dashboard of the
// runtime's real metric names, and the rendered manifests accepted by the testbed's apiserver in a server-side dry run.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { parse } from "yaml";
import { CRD_NAME } from "../../operator/src/api/group.ts";
import { crdYaml } from "../../operator/src/api/crd.ts";
import { createMetrics } from "../../runtime/src/observe/metrics.ts";
import { tempDir } from "../support/archiver.ts";
import { chartDir, dryRunApply, helm, kubeVersion, renderChart, repo, type Manifest } from "../support/packaging.ts";
import { kubeNamespace, need, uniqueName } from "../support/testbed.ts";

const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { version: string };
const chart = parse(readFileSync(join(chartDir, "Chart.yaml"), "utf8")) as { version: string; appVersion: string };

/** Every optional part on, and the namespaced-permissions variant. */
const EVERYTHING = {
  serviceMonitor: { enabled: true, labels: { release: "kube-prometheus-stack" } },
  grafanaDashboard: { enabled: true },
  watchNamespace: "archives",
  image: { repository: "registry.example/dfe-archiver-operator", digest: `sha256:${"a".repeat(64)}` },
};

const byKind = (objects: readonly Manifest[], kind: string) => objects.filter((o) => o.kind === kind);
const one = (objects: readonly Manifest[], kind: string) => {
  const found = byKind(objects, kind);
  assert.equal(found.length, 1, `expected one ${kind}, got ${found.length}`);
  return found[0]!;
};

type Container = { image: string; args: string[]; ports: { name: string; containerPort: number }[] };
const container = (objects: readonly Manifest[]) =>
  (one(objects, "Deployment") as unknown as { spec: { template: { spec: { containers: Container[] } } } }).spec.template
    .spec.containers[0]!;

describe("the Helm chart", () => {
  it("lints clean (strict) with the defaults and with every option", async () => {
    for (const set of [[], ["--set-json", `serviceMonitor=${JSON.stringify(EVERYTHING.serviceMonitor)}`]]) {
      const r = helm(["lint", chartDir, "--strict", "--kube-version", await kubeVersion(), ...set]);
      assert.match(r.stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/);
      assert.doesNotMatch(r.stdout + r.stderr, /\[(WARNING|ERROR)\]/);
    }
  });

  it("renders the operator: two replicas, leader election, the runtime image, metrics on a named port", async () => {
    const objects = await renderChart("dfe", "ops");
    const kinds = objects.map((o) => o.kind).sort();
    assert.deepEqual(kinds, [
      "ClusterRole",
      "ClusterRoleBinding",
      "CustomResourceDefinition",
      "Deployment",
      "PodDisruptionBudget",
      "Role",
      "RoleBinding",
      "Service",
      "ServiceAccount",
    ]);
    const dep = one(objects, "Deployment") as unknown as { spec: { replicas: number } };
    assert.equal(dep.spec.replicas, 2);
    const c = container(objects);
    assert.equal(c.image, `ghcr.io/dfe/dfe-archiver-operator:${pkg.version}`);
    assert.ok(c.args.includes("--leader-elect=true"));
    assert.ok(c.args.includes("--lease-namespace=ops"));
    assert.ok(c.args.includes(`--image=ghcr.io/dfe/dfe-archiver:${pkg.version}`));
    assert.ok(!c.args.some((a) => a.startsWith("--namespace")), "watches every namespace by default");
    assert.deepEqual(
      c.ports.map((p) => [p.name, p.containerPort]),
      [["metrics", 8080]],
    );
    assert.ok(c.args.includes("--metrics-addr=0.0.0.0:8080"));
  });

  it("with every option: a digest-pinned image, one watched namespace bound by a RoleBinding, monitors, a dashboard", async () => {
    const objects = await renderChart("dfe", "ops", EVERYTHING);
    const c = container(objects);
    assert.equal(c.image, `registry.example/dfe-archiver-operator@sha256:${"a".repeat(64)}`);
    assert.ok(c.args.includes("--namespace=archives"));
    const managerBinding = objects.find(
      (o) => o.metadata.name === "dfe-dfe-archiver-operator-manager" && /Binding/.test(o.kind),
    );
    assert.equal(managerBinding?.kind, "RoleBinding");
    assert.equal(managerBinding?.metadata.namespace, "archives");
    assert.deepEqual(byKind(objects, "ClusterRoleBinding"), [], "no permission reaches past the watched namespace");
    const monitors = byKind(objects, "ServiceMonitor") as unknown as {
      metadata: Manifest["metadata"];
      spec: {
        selector: { matchLabels: Record<string, string> };
        endpoints: { port: string }[];
        namespaceSelector?: unknown;
      };
    }[];
    assert.equal(monitors.length, 2);
    // The operator's monitor selects the chart's metrics Service by its labels and names its port.
    const service = one(objects, "Service") as unknown as {
      metadata: Manifest["metadata"];
      spec: { ports: { name: string }[] };
    };
    const operatorMonitor = monitors.find((m) => m.metadata.name === "dfe-dfe-archiver-operator")!;
    for (const [k, v] of Object.entries(operatorMonitor.spec.selector.matchLabels))
      assert.equal(service.metadata.labels?.[k], v, `Service lacks the monitor's label ${k}`);
    assert.equal(operatorMonitor.spec.endpoints[0]?.port, service.spec.ports[0]?.name);
    assert.equal(operatorMonitor.metadata.labels?.["release"], "kube-prometheus-stack");
    // The pipelines' monitor selects what the operator renders for every pipeline, in the watched namespace.
    const pipelines = monitors.find((m) => m.metadata.name === "dfe-dfe-archiver-operator-pipelines")!;
    assert.deepEqual(pipelines.spec.namespaceSelector, { matchNames: ["archives"] });
    assert.deepEqual(pipelines.spec.selector.matchLabels, {
      "app.kubernetes.io/name": "dfe-archiver",
      "app.kubernetes.io/managed-by": "dfe-archiver-operator",
    });
    assert.equal(pipelines.spec.endpoints[0]?.port, "metrics");

    const dashboard = one(objects, "ConfigMap") as unknown as {
      metadata: Manifest["metadata"];
      data: Record<string, string>;
    };
    assert.equal(dashboard.metadata.labels?.["grafana_dashboard"], "1");
    assert.doesNotThrow(() => JSON.parse(dashboard.data["dfe-archiver.json"]!));
  });

  it("prints NOTES that name the release's Deployment, the Lease and what it watches", () => {
    const notes = (values: string[]) => {
      const out = helm([
        "install",
        "dfe",
        chartDir,
        "--namespace",
        "ops",
        "--dry-run=client",
        "--kubeconfig",
        need("TESTBED_KUBECONFIG"),
        ...values,
      ]).stdout;
      return out.slice(out.indexOf("NOTES:"));
    };
    const all = notes([]);
    assert.match(all, /kubectl -n ops get deploy dfe-dfe-archiver-operator/);
    assert.match(all, /get lease dfe-archiver-operator/);
    assert.match(all, /watches ArchivePipelines in every namespace/);
    assert.match(notes(["--set", "watchNamespace=archives"]), /in namespace archives only/);
  });

  it("refuses values its schema does not allow, naming the key", async () => {
    const bad: [string, string, RegExp][] = [
      ["replicaCount", '"two"', /replicaCount/],
      ["replicas", "3", /replicas/],
      ["logFormat", '"xml"', /logFormat/],
      ["image", '{"repository":"r","digest":"sha256:short"}', /digest/],
      ["watchNamespace", '"Not_A_Namespace"', /watchNamespace/],
    ];
    for (const [key, value, names] of bad) {
      const r = helm(
        ["template", "dfe", chartDir, "--kube-version", await kubeVersion(), "--set-json", `${key}=${value}`],
        { allowFailure: true },
      );
      assert.notEqual(r.status, 0, `${key}=${value} was accepted`);
      assert.match(r.stderr, names);
    }
    const unsafe = helm(
      ["template", "dfe", chartDir, "--kube-version", await kubeVersion(), "--set", "leaderElection.enabled=false"],
      { allowFailure: true },
    );
    assert.notEqual(unsafe.status, 0);
    assert.match(unsafe.stderr, /replicaCount: 1 or enable leader election/);
  });

  it("ships the generated CRD, byte for byte, in its package", (t) => {
    assert.equal(
      readFileSync(join(chartDir, "crds", `${CRD_NAME}.yaml`), "utf8"),
      crdYaml(),
      "the chart's CRD is stale: run `node_modules/.bin/node scripts/generate.ts`",
    );
    const out = tempDir(t);
    helm(["package", chartDir, "--destination", out]);
    const [tgz] = readdirSync(out);
    assert.equal(tgz, `dfe-archiver-operator-${chart.version}.tgz`);
    const listing = helm(["show", "crds", join(out, tgz)]).stdout;
    assert.equal(listing.trim(), crdYaml().trim());
  });

  it("follows package.json's version", () => {
    assert.equal(chart.version, pkg.version);
    assert.equal(chart.appVersion, pkg.version);
  });

  it("has a Grafana dashboard of the runtime's own metric names, covering what an operator watches", () => {
    const registry = createMetrics({ defaultMetrics: false }).registry;
    const names = new Set<string>();
    for (const m of registry.getMetricsAsArray()) {
      names.add(m.name);
      if (String(m.type) === "histogram") for (const s of ["_bucket", "_sum", "_count"]) names.add(m.name + s);
    }
    const dashboard = JSON.parse(readFileSync(join(chartDir, "dashboards", "dfe-archiver.json"), "utf8")) as {
      panels: { title: string; targets?: { expr: string }[] }[];
    };
    const used = new Set<string>();
    for (const panel of dashboard.panels)
      for (const { expr } of panel.targets ?? [])
        for (const m of expr.matchAll(/\b([a-z_][a-z0-9_]*)\{/g)) {
          assert.ok(names.has(m[1]!), `panel "${panel.title}": ${m[1]} is not a runtime metric`);
          used.add(m[1]!);
        }
    for (const wanted of [
      "messages_received_total",
      "messages_archived_total",
      "kafka_lag",
      "staged_bytes",
      "uploads_pending",
      "messages_dropped_total",
      "scaling_pressure",
      "self_regulation_paused",
    ])
      assert.ok(used.has(wanted), `the dashboard has no panel on ${wanted}`);
    assert.ok(
      dashboard.panels.some((p) =>
        p.targets?.some((t) => /sum by \([^)]*reason[^)]*\) \(rate\(messages_dropped_total/.test(t.expr)),
      ),
      "drops are shown by reason",
    );
  });

  it("renders manifests the testbed's apiserver accepts in a server-side dry run", async (t) => {
    const namespace = await kubeNamespace(t);
    const release = uniqueName("r");
    for (const values of [{}, { ...EVERYTHING, watchNamespace: namespace }]) {
      const objects = await renderChart(release, namespace, values);
      // monitoring.coreos.com is not installed on the testbed: the ServiceMonitors are checked by the test above.
      const served = objects.filter((o) => o.kind !== "ServiceMonitor");
      assert.ok(served.length >= 9);
      await dryRunApply(served);
    }
  });
});
