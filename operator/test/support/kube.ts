// The operator's tests on the testbed's shared kube-apiserver: CRDs installed idempotently (the ArchivePipeline CRD
// this revision generates, KEDA's ScaledObject CRD from the testbed's copy; never deleted, since they are
// cluster-scoped and other tests may be using them), and pipelines created as soon as their CRD is served.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import {
  ApiException,
  ApiextensionsV1Api,
  CustomObjectsApi,
  loadYaml,
  type V1CustomResourceDefinition,
} from "@kubernetes/client-node";
import { parse } from "yaml";
import { crdObject } from "../../src/api/crd.ts";
import { GROUP, KIND, PLURAL, VERSION } from "../../src/api/group.ts";
import type { ArchivePipeline, ArchivePipelineSpec } from "../../src/api/spec.ts";
import { kubeConfig, need } from "../../../e2e/support/testbed.ts";

const INSTALLED_HASH = "dfe-archiver.test/crd-sha256";

/** A predicate for assert.rejects: an ApiException with this HTTP status. */
export const status = (code: number) => (e: unknown) => e instanceof ApiException && e.code === code;

async function waitEstablished(ext: ApiextensionsV1Api, name: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const crd = await ext.readCustomResourceDefinition({ name });
    if (crd.status?.conditions?.some((c) => c.type === "Established" && c.status === "True")) return;
    await sleep(100);
  }
  throw new Error(`CRD ${name} not Established after 10 s`);
}

/** Installs a CRD unless the cluster has it; `refresh` also replaces a copy some other revision installed. */
export async function ensureCrd(raw: object, refresh: boolean): Promise<string> {
  const ext = kubeConfig().makeApiClient(ApiextensionsV1Api);
  const hash = createHash("sha256").update(JSON.stringify(raw)).digest("hex");
  const body = loadYaml<V1CustomResourceDefinition>(JSON.stringify(raw));
  body.metadata!.annotations = { ...body.metadata!.annotations, [INSTALLED_HASH]: hash };
  const name = body.metadata!.name!;
  for (let attempt = 0; ; attempt++) {
    try {
      const current = await ext.readCustomResourceDefinition({ name });
      if (refresh && current.metadata?.annotations?.[INSTALLED_HASH] !== hash) {
        body.metadata!.resourceVersion = current.metadata!.resourceVersion;
        await ext.replaceCustomResourceDefinition({ name, body });
      }
      break;
    } catch (e) {
      if (status(404)(e)) {
        try {
          await ext.createCustomResourceDefinition({ body });
          break;
        } catch (e2) {
          if (!status(409)(e2) || attempt > 3) throw e2;
        }
      } else if (!status(409)(e) || attempt > 3) throw e;
    }
  }
  await waitEstablished(ext, name);
  return name;
}

/** The ArchivePipeline CRD as generated, and KEDA's ScaledObject CRD. */
export async function installCrds(): Promise<void> {
  await ensureCrd(crdObject(), true);
  const keda = parse(readFileSync(join(need("TESTBED_KEDA_CRDS"), "keda.sh_scaledobjects.yaml"), "utf8")) as object;
  await ensureCrd(keda, false);
}

const ref = { group: GROUP, version: VERSION, plural: PLURAL };

/** Creates a pipeline; a CRD just established can take a moment to be served, so a 404 is retried. */
export async function createPipeline(
  namespace: string,
  name: string,
  spec: ArchivePipelineSpec,
): Promise<ArchivePipeline> {
  const custom = kubeConfig().makeApiClient(CustomObjectsApi);
  const body = { apiVersion: `${GROUP}/${VERSION}`, kind: KIND, metadata: { name }, spec };
  for (let i = 0; ; i++) {
    try {
      return (await custom.createNamespacedCustomObject({ ...ref, namespace, body })) as ArchivePipeline;
    } catch (e) {
      if (!status(404)(e) || i >= 50) throw e;
      await sleep(100);
    }
  }
}
