// The generated CRD and the rendered objects against the testbed's real kube-apiserver: the CRD installs (its CEL
// rules compile within budget), its rules refuse what the runtime refuses, every rendered object applies, the
// ScaledObject fits KEDA's own CRD, and the Role lets a pod touch only its own pipeline's status.
import assert from "node:assert/strict";
import { before, describe, it } from "node:test";
import {
  type ApiException,
  ApiextensionsV1Api,
  CoreV1Api,
  CustomObjectsApi,
  KubernetesObjectApi,
  PatchStrategy,
  setHeaderOptions,
  type KubernetesObject,
} from "@kubernetes/client-node";
import { CRD_NAME, FIELD_MANAGER, GROUP, PLURAL, VERSION } from "../../src/api/group.ts";
import { validateSpec, type ArchivePipeline, type ArchivePipelineSpec } from "../../src/api/spec.ts";
import { renderAll, type KubeObject } from "../../src/render/index.ts";
import { kubeConfig, kubeConfigForToken, kubeNamespace } from "../../../e2e/support/testbed.ts";
import { applyPodRbac, createPipeline, installCrds, status } from "../support/kube.ts";

const kc = kubeConfig();
const ext = kc.makeApiClient(ApiextensionsV1Api);
const custom = kc.makeApiClient(CustomObjectsApi);
const objects = KubernetesObjectApi.makeApiClient(kc);
const ref = { group: GROUP, version: VERSION, plural: PLURAL };

const secretRef = (name: string, key: string) => ({ secretKeyRef: { name, key } });

const SAMPLE: ArchivePipelineSpec = {
  kafka: {
    brokers: ["kafka:9092"],
    topics: ["events"],
    saslMechanism: "SCRAM-SHA-256",
    saslUsername: "archiver",
    saslPassword: secretRef("kafka", "password"),
  },
  archive: {
    destination: "minio://archive/events",
    multipartChunkSize: 16 * 1024 * 1024,
    minio: {
      endpoint: "http://minio:9000",
      accessKey: secretRef("minio", "user"),
      secretKey: secretRef("minio", "pw"),
    },
  },
  compression: { codec: "zstd", level: 9 },
  selfRegulation: { pauseAbove: 0.9, resumeBelow: 0.5 },
  spool: { sizeLimit: "20Gi" },
  resources: { requests: { cpu: 1, memory: "512Mi" } },
  keda: { maxReplicaCount: 4, pressure: { enabled: true } },
};

describe("ArchivePipeline on the testbed's kube-apiserver", () => {
  before(async () => {
    await installCrds();
  });

  it("installs the CRD and stores a sample pipeline, with transport's default", async (t) => {
    const namespace = await kubeNamespace(t);
    assert.ok("spec" in validateSpec(SAMPLE));
    const created = await createPipeline(namespace, "sample", SAMPLE);
    assert.equal(created.spec.transport, "kafka");
    assert.deepEqual(created.spec.kafka?.saslPassword, SAMPLE.kafka?.saslPassword);
    const crd = await ext.readCustomResourceDefinition({ name: CRD_NAME });
    assert.deepEqual(crd.spec.names.shortNames, ["ap"]);
  });

  it("refuses, as validateSpec does, what the runtime would refuse", async (t) => {
    const namespace = await kubeNamespace(t);
    // Each refusal, with words of the rule the apiserver should give it by.
    const bad: [string, ArchivePipelineSpec, string][] = [
      [
        "multipartChunkSize of 1Mi",
        { archive: { multipartChunkSize: 1024 * 1024 } },
        "greater than or equal to 5242880",
      ],
      ["grpc with no listen address", { transport: "grpc" }, "grpc.listen is required"],
      ["an unknown scheme", { archive: { destination: "ftp://host/x" } }, "must start with one of"],
      [
        "credentials in the URL",
        { archive: { destination: "s3://key:secret@bucket/x" } },
        "must not carry credentials",
      ],
      ["no bucket", { archive: { destination: "gs:///x" } }, "names no bucket"],
      [
        "a file destination with no volume",
        { archive: { destination: "file:///var/data/archive" } },
        "needs archiveVolume",
      ],
      [
        "a relative file destination",
        { archive: { destination: "file://data" }, archiveVolume: { claimName: "a" } },
        "needs an absolute directory",
      ],
      ["SASL with no password", { kafka: { saslMechanism: "PLAIN", saslUsername: "u" } }, "saslPassword are required"],
      ["a password as text", { kafka: { saslPassword: "hunter2" as never } }, "must be of type object"],
      ["snappy with a level", { compression: { codec: "snappy", level: 3 } }, "codec's range"],
      ["zstd past its range", { compression: { level: 23 } }, "codec's range"],
      ["an unknown path token", { archive: { pathTemplate: "{year}/{topic}" } }, "may hold only the tokens"],
      ["a climbing path template", { archive: { pathTemplate: "{year}/../x" } }, "must be relative"],
      ["a latch that never resumes", { selfRegulation: { resumeBelow: 0.9 } }, "resumeBelow must be below pauseAbove"],
      ["TLS with a certificate and no key", { kafka: { tls: { certPath: "/tls/cert.pem" } } }, "set together"],
      ["KMS key without aws:kms", { archive: { s3: { sseKmsKeyId: "k" } } }, "must be aws:kms"],
      ["no broker on kafka", { kafka: { brokers: [] } }, "at least one broker"],
      ["more KEDA minimum than maximum", { keda: { minReplicaCount: 5, maxReplicaCount: 3 } }, "must not exceed"],
      [
        "pressure beside verbatim triggers",
        { keda: { pressure: { enabled: true }, triggers: [{ type: "cpu", metadata: { value: "60" } }] } },
        "has no effect while triggers",
      ],
    ];
    for (const [what, spec, words] of bad) {
      assert.ok("faults" in validateSpec(spec), `validateSpec accepts ${what}`);
      await assert.rejects(
        createPipeline(namespace, "bad", spec),
        (e: unknown) => status(422)(e) && String((e as ApiException<unknown>).body).includes(words),
        `the apiserver accepts ${what}, or refuses it for another reason`,
      );
    }
    // Names become <name>-archiver Services: a DNS label of 63 at most.
    await assert.rejects(createPipeline(namespace, "a".repeat(55), {}), status(422));
    await assert.rejects(createPipeline(namespace, "dotted.name", {}), status(422));
    await createPipeline(namespace, "a".repeat(54), {});
  });

  it("takes a pod's report and the operator's conditions in status", async (t) => {
    const namespace = await kubeNamespace(t);
    await createPipeline(namespace, "reported", SAMPLE);
    const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    const body = {
      status: {
        observedGeneration: 1,
        readyReplicas: 1,
        conditions: [
          {
            type: "Ready",
            status: "True",
            reason: "PodsReady",
            message: "1/1 ready",
            lastTransitionTime: now,
            observedGeneration: 1,
          },
          { type: "Idle", status: "False", reason: "DestinationSet", message: "", lastTransitionTime: now },
          { type: "Degraded", status: "False", reason: "AsExpected", message: "", lastTransitionTime: now },
        ],
        pods: [
          { name: "reported-archiver-abc", state: "Running", deliveryGuarantee: "at_least_once", lastReport: now },
        ],
      },
    };
    const merge = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
    const patched = (await custom.patchNamespacedCustomObjectStatus(
      { ...ref, namespace, name: "reported", body },
      merge,
    )) as ArchivePipeline;
    assert.equal(patched.status?.pods?.[0]?.state, "Running");
    const badState = { status: { pods: [{ name: "p", state: "Exploded", lastReport: now }] } };
    await assert.rejects(
      custom.patchNamespacedCustomObjectStatus({ ...ref, namespace, name: "reported", body: badState }, merge),
      status(422),
    );
  });

  it("applies every rendered object, the ScaledObject with nothing KEDA's CRD would prune", async (t) => {
    const namespace = await kubeNamespace(t);
    const cases: ArchivePipelineSpec[] = [
      SAMPLE,
      { ...SAMPLE, keda: { pressure: { enabled: true, shimAddress: "dfe-keda-shim.dfe.svc:8080" } } },
      {
        ...SAMPLE,
        keda: { triggers: [{ type: "kafka", metadata: { lagThreshold: "100" }, authenticationRef: { name: "a" } }] },
      },
      {
        transport: "grpc",
        grpc: { listen: "0.0.0.0:50051" },
        archive: { destination: "file:///var/data/archive" },
        archiveVolume: { claimName: "archive" },
      },
      {
        archive: { destination: "gs://b/p" },
        gcsKeySecret: { name: "gcs" },
        serviceAccount: { annotations: { "iam.gke.io/gcp-service-account": "a@b.iam.gserviceaccount.com" } },
      },
    ];
    for (const [i, spec] of cases.entries()) {
      const cr = await createPipeline(namespace, `p${i}`, spec);
      for (const kedaInstalled of [true, false]) {
        const rendered = renderAll(cr, {
          image: "ghcr.io/hyperi-io/dfe-archiver:0.1.0",
          kedaInstalled,
          secretHashes: { kafka: "x" },
        });
        for (const o of rendered) {
          const applied = await objects.patch(
            o as KubernetesObject,
            undefined,
            "All",
            FIELD_MANAGER,
            true,
            PatchStrategy.ServerSideApply,
          );
          if (o.kind === "ScaledObject") assert.deepEqual((applied as KubeObject)["spec"], o["spec"], `case ${i}`);
        }
      }
    }
  });

  it("lets a pod's ServiceAccount read its own pipeline and patch only its status", async (t) => {
    const namespace = await kubeNamespace(t);
    const own = await createPipeline(namespace, "own", {});
    await createPipeline(namespace, "other", {});
    await applyPodRbac(own);
    const core = kc.makeApiClient(CoreV1Api);
    const tr = await core.createNamespacedServiceAccountToken({
      name: "own-archiver",
      namespace,
      body: { spec: { audiences: [], expirationSeconds: 600 } },
    });
    assert.ok(tr.status?.token, "TokenRequest returned no token");
    const asPod = kubeConfigForToken(tr.status.token).makeApiClient(CustomObjectsApi);
    const merge = setHeaderOptions("Content-Type", PatchStrategy.MergePatch);
    const now = new Date().toISOString().replace(/\.\d+Z$/, "Z");
    const report = {
      status: { pods: [{ name: "own-archiver-1", state: "Idle", reason: "no destination", lastReport: now }] },
    };

    await asPod.getNamespacedCustomObject({ ...ref, namespace, name: "own" });
    await asPod.getNamespacedCustomObjectStatus({ ...ref, namespace, name: "own" });
    await asPod.patchNamespacedCustomObjectStatus({ ...ref, namespace, name: "own", body: report }, merge);
    const forbidden = status(403);
    await assert.rejects(asPod.getNamespacedCustomObject({ ...ref, namespace, name: "other" }), forbidden);
    await assert.rejects(
      asPod.patchNamespacedCustomObjectStatus({ ...ref, namespace, name: "other", body: report }, merge),
      forbidden,
    );
    await assert.rejects(
      asPod.patchNamespacedCustomObject({ ...ref, namespace, name: "own", body: { spec: { replicas: 9 } } }, merge),
      forbidden,
    );
    await assert.rejects(asPod.listNamespacedCustomObject({ ...ref, namespace }), forbidden);
  });
});
