import assert from "node:assert/strict";
import { join } from "node:path";
import { describe, it, type TestContext } from "node:test";
import { dumpYaml, loadYaml, type V1Deployment, type V1EnvVar } from "@kubernetes/client-node";
import { parse, stringify } from "yaml";
import { parseConfigText } from "../../../runtime/src/config/load.ts";
import { ConfigFaultsError } from "../../../runtime/src/config/validate.ts";
import { API_VERSION, KIND } from "../../src/api/group.ts";
import type { ArchivePipelineSpec } from "../../src/api/spec.ts";
import {
  CONFIG_PATH,
  SECRET_HASH_ANNOTATION,
  renderAll,
  type KubeObject,
  type RenderOptions,
  type ScaledObject,
} from "../../src/render/index.ts";
import { UID, pipeline } from "../api/helpers.ts";

const SNAPSHOTS = join(import.meta.dirname, "__snapshots__");
const IMAGE = "ghcr.io/hyperi-io/dfe-archiver:0.1.0";
const ref = (name: string, key: string) => ({ secretKeyRef: { name, key } });
const opts = (o: Partial<RenderOptions> = {}): RenderOptions => ({
  image: IMAGE,
  kedaInstalled: true,
  secretHashes: {},
  ...o,
});

const KAFKA = { brokers: ["kafka-0.kafka:9092", "kafka-1.kafka:9092"], topics: ["events", "logs"] };

/** The cases the seed's Deployment section describes, one per storage backend and transport. */
const CASES: Record<string, { spec: ArchivePipelineSpec; opts: RenderOptions }> = {
  "file-pvc": {
    spec: {
      kafka: KAFKA,
      archive: { destination: "file:///var/data/archive", rollIntervalSecs: 300 },
      compression: { codec: "zstd", level: 3 },
      archiveVolume: { claimName: "archive" },
      replicas: 2,
    },
    opts: opts({ kedaInstalled: false }),
  },
  "s3-irsa": {
    spec: {
      kafka: KAFKA,
      archive: { destination: "s3://dfe-archive/events", s3: { region: "ap-southeast-2" } },
      serviceAccount: { annotations: { "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/dfe-archiver" } },
    },
    opts: opts(),
  },
  "minio-secret": {
    spec: {
      kafka: {
        ...KAFKA,
        saslMechanism: "SCRAM-SHA-256",
        saslUsername: "archiver",
        saslPassword: ref("kafka-credentials", "password"),
      },
      archive: {
        destination: "minio://archive/events",
        minio: {
          endpoint: "http://minio.storage:9000",
          accessKey: ref("minio-credentials", "accesskey"),
          secretKey: ref("minio-credentials", "secretkey"),
        },
      },
    },
    opts: opts({ secretHashes: { "kafka-credentials": "1a2b", "minio-credentials": "3c4d" } }),
  },
  "gcs-key-secret": {
    spec: {
      kafka: KAFKA,
      archive: { destination: "gs://dfe-archive/events", gcs: { projectId: "dfe-prod" } },
      gcsKeySecret: { name: "gcs-service-account" },
    },
    opts: opts({ secretHashes: { "gcs-service-account": "5e6f" } }),
  },
  "azure-key-secret": {
    spec: {
      kafka: KAFKA,
      archive: {
        destination: "az://archive/events",
        azure: { accountName: "dfearchive", accountKey: ref("azure-storage", "account-key") },
      },
    },
    opts: opts({ secretHashes: { "azure-storage": "7a8b" } }),
  },
  grpc: {
    spec: {
      transport: "grpc",
      grpc: { listen: "0.0.0.0:50051" },
      archive: {
        destination: "s3://dfe-archive/pushed",
        s3: { region: "eu-west-1", accessKeyId: ref("aws", "id"), secretAccessKey: ref("aws", "secret") },
      },
      buffer: { spoolDir: "/var/spool/archiver" },
      spool: { sizeLimit: "50Gi" },
      resources: { requests: { cpu: 2, memory: "1Gi" }, limits: { memory: "2Gi" } },
    },
    opts: opts({ image: "registry.example/dfe-archiver:dev", secretHashes: { aws: "9c0d" } }),
  },
};

/** The ScaledObject cases: KEDA's triggers for one workload. */
const KEDA_CASES: Record<string, ArchivePipelineSpec> = {
  "keda-cpu-default": { kafka: KAFKA, archive: { destination: "s3://dfe-archive/events" } },
  "keda-pressure-aggregation": {
    kafka: KAFKA,
    archive: { destination: "s3://dfe-archive/events" },
    keda: { pressure: { enabled: true } },
  },
  "keda-pressure-shim": {
    kafka: KAFKA,
    archive: { destination: "s3://dfe-archive/events" },
    keda: {
      maxReplicaCount: 20,
      pressure: {
        enabled: true,
        target: 80,
        shimAddress: "dfe-keda-shim.dfe-system.svc:8080",
        service: "dfe-archiver-events",
      },
    },
  },
  "keda-triggers-verbatim": {
    kafka: KAFKA,
    archive: { destination: "s3://dfe-archive/events" },
    keda: {
      minReplicaCount: 2,
      triggers: [
        {
          type: "kafka",
          name: "lag",
          metadata: { bootstrapServers: "kafka-0.kafka:9092", consumerGroup: "dfe-archiver", lagThreshold: "10000" },
          authenticationRef: { name: "kafka-auth" },
        },
        { type: "cpu", metricType: "Utilization", metadata: { value: "50" } },
      ],
    },
  },
};

const yamlOf = (objects: readonly unknown[]) =>
  objects.map((o) => stringify(o, { lineWidth: 0, aliasDuplicateObjects: false })).join("---\n");

function snapshot(t: TestContext, name: string, objects: readonly unknown[]) {
  t.assert.fileSnapshot(objects, join(SNAPSHOTS, `${name}.yaml`), { serializers: [(v) => yamlOf(v as unknown[])] });
}

const kind = <T = KubeObject>(objects: KubeObject[], k: string) => objects.find((o) => o.kind === k) as T | undefined;
const deployment = (objects: KubeObject[]) => kind<V1Deployment & KubeObject>(objects, "Deployment")!;
const container = (objects: KubeObject[]) => deployment(objects).spec!.template.spec!.containers[0]!;
const envOf = (objects: KubeObject[]) => new Map((container(objects).env ?? []).map((e) => [e.name, e]));

describe("render snapshots", () => {
  for (const [name, c] of Object.entries(CASES))
    it(name, (t) => {
      snapshot(t, name, renderAll(pipeline(c.spec), c.opts));
    });
  for (const [name, spec] of Object.entries(KEDA_CASES))
    it(name, (t) => {
      const objects = renderAll(pipeline(spec), opts());
      snapshot(t, name, [kind(objects, "ScaledObject")]);
    });
});

describe("rendered objects", () => {
  const all = Object.values(CASES).map((c) => renderAll(pipeline(c.spec), c.opts));

  it("are each labelled and owned by their pipeline", () => {
    for (const objects of all)
      for (const o of objects) {
        assert.deepEqual(o.metadata.labels, {
          "app.kubernetes.io/name": "dfe-archiver",
          "app.kubernetes.io/instance": "events",
          "app.kubernetes.io/managed-by": "dfe-archiver-operator",
          "archiver.dfe.io/pipeline": "events",
        });
        assert.equal(o.metadata.namespace, "dfe");
        assert.deepEqual(o.metadata.ownerReferences, [
          { apiVersion: API_VERSION, kind: KIND, name: "events", uid: UID, controller: true, blockOwnerDeletion: true },
        ]);
        assert.match(o.metadata.name, /^events-archiver/);
      }
  });

  it("survive the Kubernetes client's typed model unchanged (no misspelt field)", () => {
    for (const objects of all)
      for (const o of objects.filter((x) => x.kind !== "ScaledObject"))
        assert.deepEqual(parse(dumpYaml(loadYaml(JSON.stringify(o)))), JSON.parse(JSON.stringify(o)), o.kind);
  });

  it("give the runtime a config file it boots with, secrets arriving through env", () => {
    const secrets: Record<string, string> = {
      "kafka-credentials/password": "kafka-pass",
      "minio-credentials/accesskey": "minio-user",
      "minio-credentials/secretkey": "minio-pass",
      "aws/id": "AKIA",
      "aws/secret": "aws-secret",
      "azure-storage/account-key": "azure-key",
    };
    for (const objects of all) {
      const text = kind<{ data: Record<string, string> }>(objects, "ConfigMap")!.data["config.yaml"]!;
      for (const value of Object.values(secrets)) assert.ok(!text.includes(value));
      const env: Record<string, string> = {};
      for (const e of container(objects).env ?? []) {
        const s = e.valueFrom?.secretKeyRef;
        env[e.name] = s ? secrets[`${s.name}/${s.key}`]! : (e.value ?? "");
      }
      const args = container(objects).args!;
      assert.deepEqual(args, ["run", "--config", CONFIG_PATH, "--metrics-addr", "0.0.0.0:9090"]);
      const { config } = parseConfigText(text, { env, cli: { metricsAddr: args[4], positionals: [] } });
      assert.equal(config.metrics.addr, "0.0.0.0:9090");
      if ("DFE_ARCHIVER_KAFKA_SASL_PASSWORD" in env) assert.equal(config.kafka.sasl_password, "kafka-pass");
      if ("DFE_ARCHIVER_ARCHIVE__MINIO__ACCESS_KEY" in env) {
        assert.equal(config.archive.minio.access_key, "minio-user");
        assert.equal(config.archive.minio.secret_key, "minio-pass");
      }
      if ("DFE_ARCHIVER_S3_ACCESS_KEY_ID" in env) assert.equal(config.archive.s3.secret_access_key, "aws-secret");
      assert.ok(!("DFE_ARCHIVER_MEMORY_LIMIT_BYTES" in env), "the memory guard reads the cgroup");
    }
  });

  it("size the spool emptyDir and the runtime's spool budget from one value, at spool_dir", () => {
    for (const [name, c] of Object.entries(CASES)) {
      const objects = renderAll(pipeline(c.spec), c.opts);
      const pod = deployment(objects).spec!.template.spec!;
      const mount = container(objects).volumeMounts!.find((m) => m.name === "spool")!;
      const size = pod.volumes!.find((v) => v.name === "spool")!.emptyDir!.sizeLimit;
      const spoolDir = c.spec.buffer?.spoolDir ?? "/var/spool/dfe/archiver";
      assert.equal(mount.mountPath, spoolDir, name);
      assert.equal(envOf(objects).get("SCALO_WRITABLE_PATH_LIMITS")?.value, `${spoolDir}=${size}`, name);
      assert.ok(container(objects).volumeMounts!.some((m) => m.mountPath === "/tmp"));
    }
  });

  it("mount the file destination's claim at its path", () => {
    const objects = renderAll(pipeline(CASES["file-pvc"]!.spec), opts());
    const pod = deployment(objects).spec!.template.spec!;
    assert.deepEqual(pod.volumes!.find((v) => v.name === "archive")!.persistentVolumeClaim, { claimName: "archive" });
    assert.equal(container(objects).volumeMounts!.find((m) => m.name === "archive")!.mountPath, "/var/data/archive");
  });

  it("hash the referenced Secrets, not the config, into the pod template", () => {
    const c = CASES["minio-secret"]!;
    const template = (spec: ArchivePipelineSpec, hashes: Record<string, string>) =>
      deployment(renderAll(pipeline(spec), opts({ secretHashes: hashes }))).spec!.template;
    const base = template(c.spec, c.opts.secretHashes);
    assert.match(base.metadata!.annotations![SECRET_HASH_ANNOTATION]!, /^[0-9a-f]{64}$/);
    // A config change reaches the pods through the mounted ConfigMap, without a roll.
    assert.deepEqual(template({ ...c.spec, compression: { codec: "gzip" } }, c.opts.secretHashes), base);
    // A rotated Secret rolls them; one they do not read does not.
    const rotated = template(c.spec, { ...c.opts.secretHashes, "minio-credentials": "ffff" });
    assert.notEqual(
      rotated.metadata!.annotations![SECRET_HASH_ANNOTATION],
      base.metadata!.annotations![SECRET_HASH_ANNOTATION],
    );
    assert.deepEqual(template(c.spec, { ...c.opts.secretHashes, unrelated: "0000" }), base);
    // No Secret referenced: no annotation.
    const irsa = template(CASES["s3-irsa"]!.spec, {});
    assert.equal(irsa.metadata!.annotations, undefined);
  });

  it("mount the ConfigMap as a directory, so its updates reach the pods live", () => {
    for (const objects of all) {
      const mount = container(objects).volumeMounts!.find((m) => m.name === "config")!;
      assert.equal(mount.subPath, undefined);
      assert.equal(`${mount.mountPath}/config.yaml`, CONFIG_PATH);
      assert.equal(mount.readOnly, true);
    }
  });

  it("run the pods locked down", () => {
    for (const objects of all) {
      const pod = deployment(objects).spec!.template.spec!;
      const sc = container(objects).securityContext!;
      assert.equal(sc.readOnlyRootFilesystem, true);
      assert.equal(sc.allowPrivilegeEscalation, false);
      assert.deepEqual(sc.capabilities, { drop: ["ALL"] });
      assert.equal(pod.securityContext!.runAsNonRoot, true);
      assert.equal(pod.securityContext!.seccompProfile!.type, "RuntimeDefault");
      const env = envOf(objects);
      assert.equal(env.get("POD_NAME")?.valueFrom?.fieldRef?.fieldPath, "metadata.name");
      assert.equal(env.get("POD_NAMESPACE")?.valueFrom?.fieldRef?.fieldPath, "metadata.namespace");
      assert.equal(env.get("DFE_ARCHIVER_PIPELINE_NAME")?.value, "events");
      // Credentials only ever as Secret references.
      for (const e of env.values() as Iterable<V1EnvVar>)
        if (/KEY|SECRET|PASSWORD|TOKEN/.test(e.name) && e.name !== "GOOGLE_APPLICATION_CREDENTIALS")
          assert.ok(e.valueFrom?.secretKeyRef && e.value === undefined, e.name);
      assert.ok(container(objects).resources?.requests?.["cpu"], "KEDA's cpu trigger needs a CPU request");
    }
  });

  it("fill a missing request from its limit, as Kubernetes would", () => {
    const objects = renderAll(pipeline({ resources: { limits: { cpu: "250m", memory: "512Mi" } } }), opts());
    assert.deepEqual(container(objects).resources, {
      requests: { cpu: "250m", memory: "512Mi" },
      limits: { cpu: "250m", memory: "512Mi" },
    });
    assert.deepEqual(container(renderAll(pipeline({}), opts())).resources, {
      requests: { cpu: "500m", memory: "256Mi" },
      limits: { cpu: "2", memory: "1Gi" },
    });
  });

  it("let the pods read their own pipeline and patch only its status", () => {
    const role = kind<{ rules: unknown[] }>(renderAll(pipeline({}), opts()), "Role")!;
    assert.deepEqual(role.rules, [
      { apiGroups: ["archiver.dfe.io"], resources: ["archivepipelines"], resourceNames: ["events"], verbs: ["get"] },
      {
        apiGroups: ["archiver.dfe.io"],
        resources: ["archivepipelines/status"],
        resourceNames: ["events"],
        verbs: ["get", "patch"],
      },
    ]);
  });

  it("refuse a spec the runtime would refuse, naming every fault", () => {
    assert.throws(
      () => renderAll(pipeline({ transport: "grpc", archive: { multipartChunkSize: 1024 } }), opts()),
      (e: unknown) =>
        e instanceof ConfigFaultsError &&
        e.faults
          .map((f) => f.key)
          .sort()
          .join() === "archive.multipartChunkSize,grpc.listen",
    );
  });
});

describe("KEDA", () => {
  it("owns the replica count only when installed and enabled", () => {
    const cases: [Partial<RenderOptions>, ArchivePipelineSpec, number | undefined][] = [
      [{ kedaInstalled: true }, {}, undefined],
      [{ kedaInstalled: false }, {}, 1],
      [{ kedaInstalled: false }, { replicas: 3 }, 3],
      [{ kedaInstalled: true }, { replicas: 3, keda: { enabled: false } }, 3],
    ];
    for (const [o, spec, replicas] of cases) {
      const objects = renderAll(pipeline(spec), opts(o));
      assert.equal(kind(objects, "ScaledObject") === undefined, replicas !== undefined, JSON.stringify([o, spec]));
      const d = deployment(objects).spec!;
      assert.equal(d.replicas, replicas);
      assert.equal("replicas" in d, replicas !== undefined);
    }
  });

  it("scales on CPU at 70% by default, with no fallback", () => {
    const so = kind<ScaledObject>(renderAll(pipeline({}), opts()), "ScaledObject")!;
    assert.deepEqual(so.spec.triggers, [
      { type: "cpu", name: "cpu", metricType: "Utilization", metadata: { value: "70" } },
    ]);
    assert.equal(so.spec.minReplicaCount, 1);
    assert.equal(so.spec.fallback, undefined);
    assert.deepEqual(so.spec.scaleTargetRef, { apiVersion: "apps/v1", kind: "Deployment", name: "events-archiver" });
  });

  it("reads the hottest pod through the metrics Service, or the shim, and holds replicas when reads fail", () => {
    const agg = kind<ScaledObject>(
      renderAll(pipeline(KEDA_CASES["keda-pressure-aggregation"]!), opts()),
      "ScaledObject",
    )!;
    const pressure = agg.spec.triggers[1]!;
    assert.equal(agg.spec.triggers[0]!.type, "cpu");
    assert.equal(pressure.type, "metrics-api");
    assert.equal(pressure.metadata["url"], "http://events-archiver.dfe.svc:9090/scaling/pressure");
    assert.equal(pressure.metadata["aggregateFromKubeServiceEndpoints"], "true");
    assert.equal(pressure.metadata["aggregationType"], "max");
    assert.equal(pressure.metadata["valueLocation"], "value");
    assert.notEqual(pressure.metricType, "Utilization", "KEDA's fallback needs Value or AverageValue");
    assert.deepEqual(agg.spec.fallback, { failureThreshold: 3, replicas: 1, behavior: "currentReplicas" });

    const shim = kind<ScaledObject>(renderAll(pipeline(KEDA_CASES["keda-pressure-shim"]!), opts()), "ScaledObject")!;
    const viaShim = shim.spec.triggers[1]!;
    assert.equal(
      viaShim.metadata["url"],
      "http://dfe-keda-shim.dfe-system.svc:8080/scaling-pressure?service=dfe-archiver-events",
    );
    assert.equal(viaShim.metadata["aggregateFromKubeServiceEndpoints"], undefined);
    assert.equal(viaShim.metadata["targetValue"], "80");
    assert.ok(shim.spec.fallback);
  });

  it("passes keda.triggers through verbatim, replacing the defaults", () => {
    const spec = KEDA_CASES["keda-triggers-verbatim"]!;
    const so = kind<ScaledObject>(renderAll(pipeline(spec), opts()), "ScaledObject")!;
    assert.deepEqual(so.spec.triggers, spec.keda!.triggers);
    assert.equal(so.spec.fallback, undefined);
    assert.equal(so.spec.minReplicaCount, 2);
  });
});
