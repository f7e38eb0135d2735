// The packaging tests' tools: helm and kustomize from the testbed (e2e/testbed/tools/up.sh), the chart rendered into
// objects, and a server-side dry run of objects on the testbed's kube-apiserver (what `kubectl apply --server-side
// --dry-run=server` does: every admission step, schema and CEL rule, nothing stored).
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import {
  ApiException,
  KubernetesObjectApi,
  PatchStrategy,
  VersionApi,
  loadYaml,
  type KubernetesObject,
} from "@kubernetes/client-node";
import { parseAllDocuments } from "yaml";
import { kubeConfig, need } from "./testbed.ts";

export const repo = join(import.meta.dirname, "..", "..");
export const chartDir = join(repo, "charts", "dfe-archiver-operator");
export const FIELD_MANAGER = "dfe-archiver-packaging-test";

/** A Kubernetes object as a manifest holds it. */
export interface Manifest extends KubernetesObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [field: string]: unknown;
}

/** Runs a testbed tool; a non-zero exit throws with its output. */
export function tool(name: "TESTBED_HELM" | "TESTBED_KUSTOMIZE" | "TESTBED_HADOLINT" | "TESTBED_SHELLCHECK") {
  const bin = need(name);
  return (args: readonly string[], opts: { cwd?: string; allowFailure?: boolean } = {}) => {
    const r = spawnSync(bin, args, { cwd: opts.cwd ?? repo, encoding: "utf8", maxBuffer: 64 << 20 });
    if (r.error) throw r.error;
    if (r.status !== 0 && opts.allowFailure !== true)
      throw new Error(`${bin} ${args.join(" ")} exited ${r.status}:\n${r.stdout}\n${r.stderr}`);
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
  };
}

export const helm = tool("TESTBED_HELM");
export const kustomize = tool("TESTBED_KUSTOMIZE");

/** Every document of a YAML stream that holds an object (helm leaves empty ones between templates). */
export function manifests(text: string): Manifest[] {
  return parseAllDocuments(text)
    .map((d) => {
      if (d.errors.length > 0) throw new Error(`invalid YAML: ${d.errors.map((e) => e.message).join("; ")}`);
      return d.toJS() as Manifest | null;
    })
    .filter((o): o is Manifest => o !== null);
}

export function manifestFile(path: string): Manifest[] {
  return manifests(readFileSync(path, "utf8"));
}

/** The testbed apiserver's version (v1.36.3), for `helm template --kube-version`. */
export async function kubeVersion(): Promise<string> {
  return (await kubeConfig().makeApiClient(VersionApi).getCode()).gitVersion;
}

/** `helm template` of the chart, with --set-json values; the CRD included unless `crds` is false. */
export async function renderChart(
  release: string,
  namespace: string,
  values: Record<string, unknown> = {},
  opts: { crds?: boolean } = {},
): Promise<Manifest[]> {
  const args = ["template", release, chartDir, "--namespace", namespace, "--kube-version", await kubeVersion()];
  if (opts.crds !== false) args.push("--include-crds");
  for (const [k, v] of Object.entries(values)) args.push("--set-json", `${k}=${JSON.stringify(v)}`);
  return manifests(helm(args).stdout);
}

/** Server-side applies each object with dryRun=All: resolves, or rejects naming the object and the apiserver's word. */
export async function dryRunApply(objects: readonly Manifest[], namespace?: string): Promise<void> {
  const api = KubernetesObjectApi.makeApiClient(kubeConfig());
  for (const o of objects) {
    const raw = namespace === undefined || o.metadata.namespace !== undefined ? o : withNamespace(o, namespace);
    // Into the client's typed model first: its serializer drops the keys it does not know by their wire names
    // (x-kubernetes-int-or-string in a CRD, say) from a plain object.
    const body = loadYaml<KubernetesObject>(JSON.stringify(raw));
    try {
      await api.patch(body, undefined, "All", FIELD_MANAGER, true, PatchStrategy.ServerSideApply);
    } catch (e) {
      const detail = e instanceof ApiException ? `${e.code} ${String(e.body)}` : String(e);
      throw new Error(`server-side dry run refused ${o.kind}/${o.metadata.name}: ${detail}`, { cause: e });
    }
  }
}

function withNamespace(o: Manifest, namespace: string): Manifest {
  return { ...o, metadata: { ...o.metadata, namespace } };
}
