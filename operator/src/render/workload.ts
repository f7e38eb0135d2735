// The runtime's workload: its Deployment, the ServiceAccount it runs as (workload identity rides on its
// annotations), the Role that lets its pods report into their own pipeline's status, and the metrics Service.
import { createHash } from "node:crypto";
import type {
  V1Deployment,
  V1EnvVar,
  V1Role,
  V1RoleBinding,
  V1Service,
  V1ServiceAccount,
  V1Volume,
  V1VolumeMount,
} from "@kubernetes/client-node";
import { GROUP, PLURAL } from "../api/group.ts";
import {
  DEFAULT_RESOURCES,
  referencedSecretNames,
  secretUses,
  type ArchivePipeline,
  type ResolvedSpec,
} from "../api/spec.ts";
import { CONFIG_DIR, CONFIG_PATH } from "./config.ts";
import { objectNames, ownedMeta, selectorLabels, labels, type KubeObject } from "./meta.ts";

export const METRICS_PORT = 9090;
export const CONTAINER_NAME = "archiver";
/** Pod-template annotation: a hash of the referenced Secrets' data, so a rotation rolls the pods. */
export const SECRET_HASH_ANNOTATION = `${GROUP}/secret-hash`;
export const GCS_KEY_DIR = "/var/run/secrets/dfe-archiver/gcs";
export const GCS_KEY_FILE = "key.json";
// The image's non-root user (distroless "nonroot"); runAsNonRoot needs it numeric.
const RUN_AS = 65532;

export interface WorkloadOptions {
  image: string;
  /** KEDA owns the replica count: the Deployment leaves `replicas` out, so the HPA's value stands. */
  kedaManaged: boolean;
  /** A hash of each Secret's data, by Secret name, as the controller read them. */
  secretHashes: Readonly<Record<string, string>>;
}

function port(hostPort: string): number {
  return Number(hostPort.slice(hostPort.lastIndexOf(":") + 1));
}

/** The Push listener's port on grpc, or undefined on kafka. */
function grpcPort(spec: ResolvedSpec): number | undefined {
  return spec.transport === "grpc" && spec.grpc.listen !== undefined ? port(spec.grpc.listen) : undefined;
}

// Kubernetes' own rule: a request left unset takes its limit.
function resources(spec: ResolvedSpec): { requests: Record<string, string>; limits?: Record<string, string> } {
  const r = spec.resources;
  if (r === undefined) return { requests: { ...DEFAULT_RESOURCES.requests }, limits: { ...DEFAULT_RESOURCES.limits } };
  const quantities = (list: { cpu?: string | number; memory?: string | number } | undefined) =>
    Object.fromEntries(
      (["cpu", "memory"] as const).flatMap((k) => (list?.[k] === undefined ? [] : [[k, String(list[k])]])),
    ) as Record<string, string>;
  const limits = quantities(r.limits);
  const requests = {
    cpu: quantities(r.requests)["cpu"] ?? limits["cpu"] ?? DEFAULT_RESOURCES.requests.cpu,
    memory: quantities(r.requests)["memory"] ?? limits["memory"] ?? DEFAULT_RESOURCES.requests.memory,
  };
  return Object.keys(limits).length > 0 ? { requests, limits } : { requests };
}

/** One hash over the referenced Secrets' hashes; a Secret not read yet counts as empty, so its arrival rolls too. */
export function secretHash(spec: ResolvedSpec, hashes: Readonly<Record<string, string>>): string | undefined {
  const names = referencedSecretNames(spec);
  if (names.length === 0) return undefined;
  const h = createHash("sha256");
  for (const name of names) h.update(`${name}=${hashes[name] ?? ""}\n`);
  return h.digest("hex");
}

function fileDestinationDir(spec: ResolvedSpec): string | undefined {
  const dest = spec.archive.destination;
  return dest?.startsWith("file://") ? dest.slice("file://".length) : undefined;
}

export function renderDeployment(
  cr: ArchivePipeline,
  spec: ResolvedSpec,
  opts: WorkloadOptions,
): V1Deployment & KubeObject {
  const name = cr.metadata.name;
  const names = objectNames(name);
  const spoolDir = spec.buffer.spoolDir;
  const sizeLimit = String(spec.spool.sizeLimit);

  const env: V1EnvVar[] = [
    { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
    { name: "POD_NAMESPACE", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
    { name: "DFE_ARCHIVER_PIPELINE_NAME", value: name },
    // The runtime's spool budget is read from here, and must match the emptyDir's limit below.
    { name: "SCALO_WRITABLE_PATH_LIMITS", value: `${spoolDir}=${sizeLimit}` },
    ...secretUses(spec).map((u) => ({
      name: u.env,
      valueFrom: { secretKeyRef: { name: u.ref.name, key: u.ref.key } },
    })),
  ];
  const volumes: V1Volume[] = [
    { name: "config", configMap: { name: names.config } },
    { name: "spool", emptyDir: { sizeLimit } },
    { name: "tmp", emptyDir: {} },
  ];
  // The config is mounted as a directory, not by subPath: only then do ConfigMap updates reach the pods live.
  const mounts: V1VolumeMount[] = [
    { name: "config", mountPath: CONFIG_DIR, readOnly: true },
    { name: "spool", mountPath: spoolDir },
    { name: "tmp", mountPath: "/tmp" },
  ];
  const archiveDir = fileDestinationDir(spec);
  if (archiveDir !== undefined && spec.archiveVolume !== undefined) {
    volumes.push({ name: "archive", persistentVolumeClaim: { claimName: spec.archiveVolume.claimName } });
    mounts.push({ name: "archive", mountPath: archiveDir });
  }
  if (spec.gcsKeySecret !== undefined) {
    volumes.push({
      name: "gcs-key",
      secret: { secretName: spec.gcsKeySecret.name, items: [{ key: spec.gcsKeySecret.key, path: GCS_KEY_FILE }] },
    });
    mounts.push({ name: "gcs-key", mountPath: GCS_KEY_DIR, readOnly: true });
    env.push({ name: "GOOGLE_APPLICATION_CREDENTIALS", value: `${GCS_KEY_DIR}/${GCS_KEY_FILE}` });
  }

  const grpc = grpcPort(spec);
  const hash = secretHash(spec, opts.secretHashes);
  const probe = (path: string) => ({
    httpGet: { path, port: "metrics" },
    periodSeconds: 10,
    timeoutSeconds: 5,
    failureThreshold: 3,
  });

  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: ownedMeta(cr, names.workload),
    spec: {
      ...(opts.kedaManaged ? {} : { replicas: spec.replicas }),
      selector: { matchLabels: selectorLabels(name) },
      template: {
        metadata: {
          labels: labels(name),
          ...(hash === undefined ? {} : { annotations: { [SECRET_HASH_ANNOTATION]: hash } }),
        },
        spec: {
          serviceAccountName: names.workload,
          automountServiceAccountToken: true,
          // The drain flushes, completes every open file and gives uploads 20 s; the default 30 s is too tight.
          terminationGracePeriodSeconds: 60,
          securityContext: {
            runAsNonRoot: true,
            runAsUser: RUN_AS,
            runAsGroup: RUN_AS,
            fsGroup: RUN_AS,
            seccompProfile: { type: "RuntimeDefault" },
          },
          containers: [
            {
              name: CONTAINER_NAME,
              image: spec.image ?? opts.image,
              args: ["run", "--config", CONFIG_PATH, "--metrics-addr", `0.0.0.0:${METRICS_PORT}`],
              ports: [
                { name: "metrics", containerPort: METRICS_PORT, protocol: "TCP" },
                ...(grpc === undefined ? [] : [{ name: "grpc", containerPort: grpc, protocol: "TCP" }]),
              ],
              env,
              resources: resources(spec),
              livenessProbe: probe("/livez"),
              readinessProbe: probe("/readyz"),
              volumeMounts: mounts,
              securityContext: {
                readOnlyRootFilesystem: true,
                runAsNonRoot: true,
                allowPrivilegeEscalation: false,
                capabilities: { drop: ["ALL"] },
                seccompProfile: { type: "RuntimeDefault" },
              },
            },
          ],
          volumes,
        },
      },
    },
  };
}

export function renderServiceAccount(cr: ArchivePipeline, spec: ResolvedSpec): V1ServiceAccount & KubeObject {
  return {
    apiVersion: "v1",
    kind: "ServiceAccount",
    metadata: ownedMeta(cr, objectNames(cr.metadata.name).workload, spec.serviceAccount.annotations),
  };
}

/** The pods may read their own pipeline and patch its status, nothing else. */
export function renderRole(cr: ArchivePipeline): V1Role & KubeObject {
  const own = cr.metadata.name;
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "Role",
    metadata: ownedMeta(cr, objectNames(cr.metadata.name).workload),
    rules: [
      { apiGroups: [GROUP], resources: [PLURAL], resourceNames: [own], verbs: ["get"] },
      { apiGroups: [GROUP], resources: [`${PLURAL}/status`], resourceNames: [own], verbs: ["get", "patch"] },
    ],
  };
}

export function renderRoleBinding(cr: ArchivePipeline): V1RoleBinding & KubeObject {
  const name = objectNames(cr.metadata.name).workload;
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "RoleBinding",
    metadata: ownedMeta(cr, name),
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name },
    subjects: [{ kind: "ServiceAccount", name, namespace: cr.metadata.namespace }],
  };
}

/** The metrics Service (KEDA reads each pod's /scaling/pressure through it), and the Push port on grpc. */
export function renderService(cr: ArchivePipeline, spec: ResolvedSpec): V1Service & KubeObject {
  const grpc = grpcPort(spec);
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: ownedMeta(cr, objectNames(cr.metadata.name).workload),
    spec: {
      type: "ClusterIP",
      selector: selectorLabels(cr.metadata.name),
      ports: [
        { name: "metrics", port: METRICS_PORT, targetPort: "metrics", protocol: "TCP" },
        ...(grpc === undefined ? [] : [{ name: "grpc", port: grpc, targetPort: "grpc", protocol: "TCP" }]),
      ],
    },
  };
}
