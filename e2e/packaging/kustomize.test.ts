// The kustomize bases under config/: `kustomize build config/default` is what `kubectl apply -k config/default`
// installs, so it is built with the testbed's kustomize and dry-run on the testbed's apiserver; its RBAC is the Helm
// chart's, rule for rule. The samples, one per destination kind and one on gRPC, each pass a server-side dry run with
// the generated CRD (its schema and CEL rules) installed, and the operator's own validation.
import assert from "node:assert/strict";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { before, describe, it } from "node:test";
import { stringify } from "yaml";
import { CRD_NAME } from "../../operator/src/api/group.ts";
import { crdYaml } from "../../operator/src/api/crd.ts";
import { validateSpec, type ArchivePipeline } from "../../operator/src/api/spec.ts";
import { installCrds } from "../../operator/test/support/kube.ts";
import {
  dryRunApply,
  kustomize,
  manifestFile,
  manifests,
  renderChart,
  repo,
  type Manifest,
} from "../support/packaging.ts";
import { tempDir } from "../support/archiver.ts";
import { kubeNamespace } from "../support/testbed.ts";

const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { version: string };
const samplesDir = join(repo, "config", "samples");
const build = (dir: string) => manifests(kustomize(["build", join(repo, "config", dir)]).stdout);

type Rules = { apiGroups: string[]; resources: string[]; resourceNames?: string[]; verbs: string[] }[];
/** A role's rules by its name's last part (manager, leader-election). */
const rulesByRole = (objects: readonly Manifest[]) =>
  Object.fromEntries(
    objects
      .filter((o) => o.kind === "ClusterRole" || o.kind === "Role")
      .map((o) => [/-(manager|leader-election)$/.exec(o.metadata.name)?.[1], (o as unknown as { rules: Rules }).rules]),
  );

describe("config/default", () => {
  it("builds the operator's install: the CRD first under Argo CD, its namespace, RBAC, Deployment and Service", () => {
    const objects = build("default");
    assert.deepEqual(objects.map((o) => `${o.kind}/${o.metadata.name}`).sort(), [
      "ClusterRole/dfe-archiver-operator-manager",
      "ClusterRoleBinding/dfe-archiver-operator-manager",
      `CustomResourceDefinition/${CRD_NAME}`,
      "Deployment/dfe-archiver-operator",
      "Namespace/dfe-archiver-system",
      "PodDisruptionBudget/dfe-archiver-operator",
      "Role/dfe-archiver-operator-leader-election",
      "RoleBinding/dfe-archiver-operator-leader-election",
      "Service/dfe-archiver-operator-metrics",
      "ServiceAccount/dfe-archiver-operator",
    ]);
    const crd = objects.find((o) => o.kind === "CustomResourceDefinition")!;
    assert.equal(crd.metadata.annotations?.["argocd.argoproj.io/sync-wave"], "-1");
    for (const o of objects)
      if (!["Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"].includes(o.kind))
        assert.equal(o.metadata.namespace, "dfe-archiver-system", `${o.kind}/${o.metadata.name}`);
    for (const b of objects.filter((o) => o.kind.endsWith("Binding")))
      for (const s of (b as unknown as { subjects: { namespace: string }[] }).subjects)
        assert.equal(
          s.namespace,
          "dfe-archiver-system",
          `${b.kind}/${b.metadata.name} binds another namespace's account`,
        );
  });

  it("installs the same CRD, RBAC and operator flags as the Helm chart", async () => {
    assert.equal(
      readFileSync(join(repo, "config", "crd", "bases", `${CRD_NAME}.yaml`), "utf8"),
      crdYaml(),
      "config/crd/bases is stale: run `node_modules/.bin/node scripts/generate.ts`",
    );
    const kustomized = build("default");
    const helmed = await renderChart("dfe-archiver", "dfe-archiver-system");
    assert.deepEqual(rulesByRole(kustomized), rulesByRole(helmed));
    type Dep = { spec: { replicas: number; template: { spec: { containers: { image: string; args: string[] }[] } } } };
    const [k, h] = [kustomized, helmed].map((l) => l.find((o) => o.kind === "Deployment") as unknown as Dep);
    assert.equal(k!.spec.replicas, h!.spec.replicas);
    assert.equal(k!.spec.template.spec.containers[0]!.image, `ghcr.io/dfe/dfe-archiver-operator:${pkg.version}`);
    // The same flags but the lease namespace, which kustomize reads from the downward API.
    const flags = (d: Dep) =>
      d.spec.template.spec.containers[0]!.args.filter((a) => !a.startsWith("--lease-namespace"));
    assert.deepEqual(flags(k!), flags(h!));
  });

  it("is accepted by the testbed's apiserver in a server-side dry run", async (t) => {
    // A dry run creates no namespace, so an overlay moves the install into one of the test's own, as a user's
    // overlay would (its Namespace object is renamed with it).
    const namespace = await kubeNamespace(t);
    const overlay = tempDir(t);
    writeFileSync(
      join(overlay, "kustomization.yaml"),
      stringify({ namespace, resources: [relative(overlay, join(repo, "config", "default"))] }),
    );
    const objects = manifests(kustomize(["build", overlay]).stdout);
    assert.ok(objects.some((o) => o.kind === "Namespace" && o.metadata.name === namespace));
    await dryRunApply(objects);
  });
});

describe("config/samples", () => {
  before(installCrds);

  const files = readdirSync(samplesDir).filter((f) => f.startsWith("archiver_"));
  const pipelines = files.flatMap((f) =>
    manifestFile(join(samplesDir, f))
      .filter((o) => o.kind === "ArchivePipeline")
      .map((o) => ({ file: f, cr: o as unknown as ArchivePipeline })),
  );

  it("has one pipeline per destination kind, and one on gRPC, all listed in its kustomization", () => {
    const kinds = pipelines.map(({ cr }) => {
      const dest = cr.spec.archive?.destination ?? "";
      const scheme = dest.slice(0, dest.indexOf(":"));
      if (cr.spec.transport === "grpc") return `grpc+${scheme}`;
      if (scheme === "s3" && cr.spec.serviceAccount?.annotations?.["eks.amazonaws.com/role-arn"]) return "s3-irsa";
      return scheme;
    });
    assert.deepEqual(kinds.sort(), ["az", "file", "grpc+minio", "gs", "minio", "s3-irsa"]);
    const listed = build("samples");
    assert.equal(listed.filter((o) => o.kind === "ArchivePipeline").length, pipelines.length);
  });

  it("each is a spec the operator accepts", () => {
    for (const { file, cr } of pipelines) {
      const v = validateSpec(cr.spec);
      assert.ok(!("faults" in v), `${file}: ${JSON.stringify("faults" in v ? v.faults : [])}`);
    }
  });

  it("each passes a server-side dry run with the CRD installed", async (t) => {
    const namespace = await kubeNamespace(t);
    for (const f of files) await dryRunApply(manifestFile(join(samplesDir, f)), namespace);
  });

  it("a spec the CRD's CEL rules refuse is refused by the same dry run", async (t) => {
    // The proof the dry run reaches the CRD's validation: a file:// destination without its volume.
    const namespace = await kubeNamespace(t);
    const file = pipelines.find((p) => p.file.endsWith("_file.yaml"))!.cr;
    const { archiveVolume: _dropped, ...spec } = file.spec;
    await assert.rejects(
      dryRunApply([{ ...(file as unknown as Manifest), spec } as Manifest], namespace),
      /archiveVolume/,
    );
  });
});
