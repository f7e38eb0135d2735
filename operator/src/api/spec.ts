// The ArchivePipeline spec and status as zod schemas. The spec's runtime part is built from the runtime's own
// configSchema by the mechanical key mapping (keys.ts), so the CRD, the operator's validation and config.yaml share
// one source of truth; the fields only the operator reads (image, replicas, resources, KEDA, ...) are declared here.
import { z } from "zod";
import {
  CONFIG_LEAVES,
  configShape,
  objectOf,
  type Config,
  type ConfigInput,
} from "../../../runtime/src/config/schema.ts";
import { nestedEnvName } from "../../../runtime/src/config/env.ts";
import { validateConfig, validateSchema, type ConfigFault } from "../../../runtime/src/config/validate.ts";
import { CONFIG_RULES, SPEC_RULES, type CelRule } from "./cel.ts";
import { COMPONENTS, type ComponentName, type ComponentState } from "../../../runtime/src/observe/health.ts";
import { camelKey, camelText, camelToSnake, snakeToCamel } from "./keys.ts";

// ---- credentials ----

export const secretKeyRefSchema = z
  .strictObject({
    secretKeyRef: z
      .strictObject({
        name: z.string().min(1).describe("Name of a Secret in the pipeline's namespace."),
        key: z.string().min(1).describe("Key of the Secret whose value is used."),
      })
      .describe("The Secret and key holding the value."),
  })
  .describe("A value held in a Secret; the operator passes it to the pods as a Secret reference, never as text.");

export type SecretKeyRef = z.output<typeof secretKeyRefSchema>;

/**
 * The runtime's secret keys, spelled for the type system. A test holds this list equal to the schema's
 * SECRET_PATHS, so a secret added to the runtime cannot be missed here.
 */
export const SECRET_KEYS = [
  "kafka.sasl_password",
  "archive.s3.access_key_id",
  "archive.s3.secret_access_key",
  "archive.s3.session_token",
  "archive.minio.access_key",
  "archive.minio.secret_key",
  "archive.gcs.service_account_key",
  "archive.azure.account_key",
  "archive.azure.sas_token",
] as const;
export type SecretPath = (typeof SECRET_KEYS)[number];

/** Keys the operator sets itself: the metrics address is pinned by flag, since probes, Service and KEDA read it. */
export const OPERATOR_OWNED_KEYS = ["metrics.addr"] as const;
export type OperatorOwnedPath = (typeof OPERATOR_OWNED_KEYS)[number];

// The seed names AZURE_STORAGE_KEY as the account key's variable (the Azure builder reads it); every other secret
// reaches the runtime under the name its config cascade reads.
const SECRET_ENV_OVERRIDES: Partial<Record<SecretPath, string>> = { "archive.azure.account_key": "AZURE_STORAGE_KEY" };

/** The environment variable each secret reaches the pods under, from a secretKeyRef. */
export const SECRET_ENV: Readonly<Record<SecretPath, string>> = Object.fromEntries(
  SECRET_KEYS.map((key) => {
    const leaf = CONFIG_LEAVES.find((l) => l.key === key);
    return [key, SECRET_ENV_OVERRIDES[key] ?? leaf?.meta.env ?? nestedEnvName(key.split("."))];
  }),
) as Record<SecretPath, string>;

// ---- the runtime part, mapped ----

function camelField(path: string[], field: z.ZodType): z.ZodType | undefined {
  const key = path.join(".");
  if ((OPERATOR_OWNED_KEYS as readonly string[]).includes(key)) return undefined;
  const rules = CONFIG_RULES[key];
  const cel = rules ? { "x-kubernetes-validations": rules } : {};
  const meta = field.meta() ?? {};
  const obj = objectOf(field);
  if (obj) {
    return z
      .strictObject(camelShape(obj.shape as Record<string, z.ZodType>, path))
      .prefault({})
      .meta({ description: meta.description, ...cel });
  }
  if ((SECRET_KEYS as readonly string[]).includes(key)) {
    const env = SECRET_ENV[key as SecretPath];
    return secretKeyRefSchema.optional().meta({
      description: `${meta.description ?? ""} A Secret reference; the pods get the value as ${env}.`,
      ...cel,
    });
  }
  return rules ? field.meta(cel) : field;
}

function camelShape(shape: Record<string, z.ZodType>, prefix: string[]): Record<string, z.ZodType> {
  const out: Record<string, z.ZodType> = {};
  for (const [name, field] of Object.entries(shape)) {
    const mapped = camelField([...prefix, name], field);
    if (mapped) out[snakeToCamel(name)] = mapped;
  }
  return out;
}

/** The spec fields that are runtime config, camelCase, each the runtime's own leaf schema. */
export const runtimeSpecShape: Readonly<Record<string, z.ZodType>> = camelShape(
  configShape as Record<string, z.ZodType>,
  [],
);

// ---- type-level mapping, mirroring camelField: keys camelCase, secrets Secret references, owned keys gone ----

type CamelCase<S extends string> = S extends `${infer H}_${infer T}` ? `${H}${Capitalize<CamelCase<T>>}` : S;
type Plain<T> = T extends readonly unknown[] ? never : T extends object ? T : never;
type Mapped<T, P extends string> = {
  [
    K in keyof T as K extends string ? (`${P}${K}` extends OperatorOwnedPath ? never : CamelCase<K>) : never
  ]: K extends string
    ? `${P}${K}` extends SecretPath
      ? SecretKeyRef
      : [Plain<NonNullable<T[K]>>] extends [never]
        ? T[K]
        : Mapped<Plain<NonNullable<T[K]>>, `${P}${K}.`>
    : never;
};

/** The runtime part of a spec as written: ConfigInput with camelCase keys and secrets as Secret references. */
export type RuntimeSpec = Mapped<ConfigInput, "">;
/** The runtime part after parsing: the runtime's static defaults filled in. */
export type ResolvedRuntimeSpec = Mapped<Config, "">;

// ---- the fields only the operator reads ----

// A Kubernetes quantity (10Gi, 500m, 2): a number or a string of the apiserver's quantity grammar.
const QUANTITY = /^[+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$/;
const quantity = () =>
  z
    .union([
      z.number().int().min(0),
      z.string().regex(QUANTITY, "must be a Kubernetes quantity such as 500m, 2 or 10Gi"),
    ])
    .meta({ "x-kubernetes-int-or-string": true });

const resourceList = (what: string) =>
  z.strictObject({
    cpu: quantity().optional().describe(`CPU ${what}, in cores (2) or millicores (500m).`),
    memory: quantity().optional().describe(`Memory ${what}, in bytes or with a suffix (256Mi, 1Gi).`),
  });

export const DEFAULT_RESOURCES = {
  requests: { cpu: "500m", memory: "256Mi" },
  limits: { cpu: "2", memory: "1Gi" },
} as const;

const resourcesSchema = z
  .strictObject({
    requests: resourceList("requested")
      .optional()
      .describe(
        "Requests; KEDA's cpu trigger reads utilisation against the CPU request. A request left unset takes its limit, else the default.",
      ),
    limits: resourceList("limit")
      .optional()
      .describe("Limits; the memory guard reads the memory limit from the cgroup."),
  })
  .describe(
    `CPU and memory of each runtime pod. Unset: requests cpu ${DEFAULT_RESOURCES.requests.cpu}, memory ${DEFAULT_RESOURCES.requests.memory} (the seed's minimum); limits cpu ${DEFAULT_RESOURCES.limits.cpu}, memory ${DEFAULT_RESOURCES.limits.memory} (its recommendation). Set, it is used as written, a missing request filled as Kubernetes would.`,
  );

const HOST_PORT = /^[A-Za-z0-9.-]+(?::[0-9]{1,5})?$/;

const triggerSchema = z
  .strictObject({
    type: z.string().min(1).describe("KEDA scaler type, e.g. cpu, metrics-api, kafka."),
    name: z.string().min(1).optional().describe("Trigger name, unique within the ScaledObject."),
    metadata: z.record(z.string(), z.string()).describe("The scaler's metadata, passed through as written."),
    metricType: z
      .enum(["AverageValue", "Value", "Utilization"])
      .optional()
      .describe("How the HPA reads the metric: AverageValue, Value or Utilization (cpu and memory)."),
    useCachedMetrics: z.boolean().optional().describe("Serves the HPA the value cached at the last polling interval."),
    authenticationRef: z
      .strictObject({
        name: z.string().min(1).describe("Name of the TriggerAuthentication or ClusterTriggerAuthentication."),
        kind: z
          .enum(["TriggerAuthentication", "ClusterTriggerAuthentication"])
          .optional()
          .describe("Kind of the referenced authentication; TriggerAuthentication when unset."),
      })
      .optional()
      .describe("KEDA authentication the scaler uses."),
  })
  .describe("One KEDA ScaledObject trigger, passed through verbatim.");

/** The replica bounds KEDA gets when the spec leaves them unset. */
export const KEDA_REPLICAS = { min: 1, max: 10 } as const;

export const kedaSchema = z
  .strictObject({
    enabled: z
      .boolean()
      .default(true)
      .describe(
        "Scales the runtime with a KEDA ScaledObject when KEDA is installed; false, or KEDA absent, runs spec.replicas pods.",
      ),
    minReplicaCount: z
      .number()
      .int()
      .min(1)
      .default(KEDA_REPLICAS.min)
      .describe("Fewest pods KEDA runs; no scale to zero."),
    maxReplicaCount: z.number().int().min(1).default(KEDA_REPLICAS.max).describe("Most pods KEDA runs."),
    cpu: z
      .strictObject({
        target: z
          .number()
          .int()
          .min(1)
          .max(100)
          .default(70)
          .describe("CPU utilisation, percent of the CPU request, the default cpu trigger holds the pods at."),
      })
      .prefault({})
      .describe("The default trigger: KEDA's cpu scaler (metrics-server)."),
    pressure: z
      .strictObject({
        enabled: z
          .boolean()
          .default(false)
          .describe("Adds the scaling-pressure trigger beside the cpu one; KEDA takes the higher of the two."),
        target: z
          .number()
          .int()
          .min(1)
          .max(100)
          .default(70)
          .describe("Scaling pressure (0-100) of the hottest pod the trigger holds the pods at."),
        shimAddress: z
          .string()
          .regex(HOST_PORT, "must be host or host:port, e.g. dfe-keda-shim.dfe.svc:8080")
          .optional()
          .describe(
            "host:port of the fleet's dfe-keda-shim; set, KEDA reads the reported service's pressure there. Unset, KEDA reads each runtime pod's /scaling/pressure through the metrics Service and takes the highest.",
          ),
        service: z
          .string()
          .min(1)
          .optional()
          .describe("Service name the shim matches the pods' pressure gauge by. Default: the pipeline's name."),
      })
      .prefault({})
      .describe("The opt-in scaling-pressure trigger (KEDA metrics-api), read against the runtime's composite."),
    triggers: z
      .array(triggerSchema)
      .min(1)
      .optional()
      .describe(
        "Triggers passed to the ScaledObject verbatim; set, they replace the default triggers outright, cpu included.",
      ),
  })
  .superRefine((v, ctx) => {
    if (v.minReplicaCount > v.maxReplicaCount)
      ctx.addIssue({
        code: "custom",
        path: ["minReplicaCount"],
        input: v.minReplicaCount,
        message: `must not exceed maxReplicaCount (${v.maxReplicaCount})`,
      });
    if (v.triggers !== undefined && v.pressure.enabled)
      ctx.addIssue({
        code: "custom",
        path: ["pressure", "enabled"],
        input: true,
        message: "has no effect while keda.triggers replaces the default triggers; unset one of them",
      });
  })
  .prefault({})
  .meta({
    description: "Autoscaling with KEDA.",
    "x-kubernetes-validations": [
      {
        rule: `(has(self.minReplicaCount) ? self.minReplicaCount : ${KEDA_REPLICAS.min}) <= (has(self.maxReplicaCount) ? self.maxReplicaCount : ${KEDA_REPLICAS.max})`,
        message: "minReplicaCount must not exceed maxReplicaCount",
      },
      {
        rule: "!has(self.triggers) || !has(self.pressure) || !has(self.pressure.enabled) || !self.pressure.enabled",
        message: "pressure.enabled has no effect while triggers replaces the default triggers; unset one of them",
      },
    ] satisfies CelRule[],
  });

export const DEFAULT_SPOOL_SIZE = "10Gi";
// Bytes as a quantity: the suffixes the runtime reads in SCALO_WRITABLE_PATH_LIMITS (no milli- or micro-bytes).
const BYTES_QUANTITY = /^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[kMGTPE]|[eE][+-]?[0-9]+)?$/;

export const operatorSpecShape = {
  image: z.string().min(1).optional().describe("Runtime image; unset, the operator's default runtime image."),
  replicas: z
    .number()
    .int()
    .min(0)
    .default(1)
    .describe("Pods to run when KEDA does not scale them (KEDA absent, or keda.enabled false)."),
  resources: resourcesSchema.optional(),
  spool: z
    .strictObject({
      sizeLimit: z
        .union([
          z.number().int().min(1),
          z.string().regex(BYTES_QUANTITY, "must be bytes, as a number or with a suffix such as 10Gi"),
        ])
        .meta({ "x-kubernetes-int-or-string": true })
        .default(DEFAULT_SPOOL_SIZE)
        .describe(
          "Size limit of the spool emptyDir at buffer.spool_dir; the runtime reads it as its spool budget (90% of it) through SCALO_WRITABLE_PATH_LIMITS.",
        ),
    })
    .prefault({})
    .describe("The local spool volume where object-store files are staged before upload."),
  serviceAccount: z
    .strictObject({
      annotations: z
        .record(z.string(), z.string())
        .optional()
        .describe(
          "Annotations of the runtime's ServiceAccount, for workload identity: eks.amazonaws.com/role-arn (IRSA), iam.gke.io/gcp-service-account (GKE), azure.workload.identity/client-id (Azure).",
        ),
    })
    .prefault({})
    .describe("The ServiceAccount the runtime pods run as."),
  gcsKeySecret: z
    .strictObject({
      name: z.string().min(1).describe("Name of the Secret holding the service account key file."),
      key: z.string().min(1).default("key.json").describe("Key of the Secret holding the key file."),
    })
    .optional()
    .describe(
      "A Secret with a GCS service account key file, mounted read-only; GOOGLE_APPLICATION_CREDENTIALS points at it.",
    ),
  archiveVolume: z
    .strictObject({
      claimName: z.string().min(1).describe("Name of a PersistentVolumeClaim in the pipeline's namespace."),
    })
    .optional()
    .describe(
      "The volume of a file:// destination, mounted at its path (the root filesystem is read-only); more than one replica needs a ReadWriteMany claim.",
    ),
  keda: kedaSchema,
};

// ---- the whole spec ----

const destinationOf = (spec: { archive?: { destination?: unknown } }): unknown => spec.archive?.destination;

export const specSchema = z
  .strictObject({ ...runtimeSpecShape, ...operatorSpecShape })
  .superRefine((v, ctx) => {
    const dest = destinationOf(v as { archive?: { destination?: unknown } });
    if (typeof dest === "string" && dest.startsWith("file://") && v.archiveVolume === undefined)
      ctx.addIssue({
        code: "custom",
        path: ["archiveVolume"],
        input: undefined,
        message:
          "is required for a file:// destination: the claim mounted at its path (the root filesystem is read-only)",
      });
  })
  .meta({
    description:
      "Desired state of an archive pipeline: the runtime's configuration (the keys of its config.yaml, camelCase, credentials as Secret references) and how the operator deploys it.",
    "x-kubernetes-validations": SPEC_RULES,
  });

type OperatorInput = z.input<z.ZodObject<typeof operatorSpecShape>>;
type OperatorOutput = z.output<z.ZodObject<typeof operatorSpecShape>>;

/** The spec as written in the CR. */
export type ArchivePipelineSpec = RuntimeSpec & OperatorInput;
/** The spec after validateSpec: the operator's and the runtime's static defaults filled in. */
export type ResolvedSpec = ResolvedRuntimeSpec & OperatorOutput;
export type KedaSpec = OperatorOutput["keda"];

// ---- status ----

export const POD_STATES = ["Running", "Idle", "Degraded"] as const;
export type PodState = (typeof POD_STATES)[number];
export const CONDITION_TYPES = ["Ready", "Idle", "Degraded", "ScalingReady"] as const;
const CONDITION_LIST = `${CONDITION_TYPES.slice(0, -1).join(", ")} and ${CONDITION_TYPES.at(-1)}`;
const COMPONENT_STATES = ["ok", "degraded", "failed"] as const satisfies readonly ComponentState[];
type Camel<S extends string> = S extends `${infer A}_${infer B}` ? `${A}${Capitalize<Camel<B>>}` : S;
type ComponentShape = { [K in ComponentName as Camel<K>]: ReturnType<typeof componentSchema> };

const timestamp = (what: string) => z.iso.datetime({ offset: true }).describe(what);

// metav1.Condition, as the apiserver's own types declare it.
export const conditionSchema = z
  .strictObject({
    type: z
      .string()
      .min(1)
      .max(316)
      .regex(
        /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$/,
      )
      .describe(`Condition type: ${CONDITION_LIST}.`),
    status: z.enum(["True", "False", "Unknown"]).describe("Status of the condition: True, False or Unknown."),
    observedGeneration: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe("The .metadata.generation the condition was computed from."),
    lastTransitionTime: timestamp("When the condition last changed status."),
    reason: z
      .string()
      .min(1)
      .max(1024)
      .regex(/^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$/)
      .describe("Machine-readable CamelCase reason for the condition's last transition."),
    message: z.string().max(32768).describe("Human-readable details of the last transition."),
  })
  .describe("One condition of the pipeline (metav1.Condition).");

const componentSchema = (name: ComponentName) =>
  z
    .strictObject({
      state: z.enum(COMPONENT_STATES).describe("ok, degraded or failed."),
      reason: z.string().optional().describe("Why, in the pod's own words."),
    })
    .describe(`State of the pod's ${name.replace(/_/g, " ")}.`);

export const podReportSchema = z
  .strictObject({
    name: z.string().min(1).describe("Name of the pod the report is from."),
    state: z.enum(POD_STATES).describe("The pod's own state: Running, Idle (no destination) or Degraded."),
    reason: z.string().optional().describe("Why the pod is Idle or Degraded, in its own words."),
    components: z
      .strictObject(Object.fromEntries(COMPONENTS.map((n) => [snakeToCamel(n), componentSchema(n)])) as ComponentShape)
      .optional()
      .describe("The pod's health by component, as its /health endpoint serves it."),
    deliveryGuarantee: z
      .string()
      .optional()
      .describe("Delivery guarantee in force on the pod: at_least_once or best_effort."),
    lastReport: timestamp("When the pod last reported."),
  })
  .describe("One runtime pod's report of itself.");

export const statusSchema = z
  .strictObject({
    observedGeneration: z
      .number()
      .int()
      .min(0)
      .optional()
      .describe("The .metadata.generation the operator last reconciled."),
    readyReplicas: z.number().int().min(0).optional().describe("Runtime pods that are ready."),
    conditions: z
      .array(conditionSchema)
      .optional()
      .meta({
        description: `${CONDITION_LIST}, computed by the operator from the owned objects, KEDA's presence and the pods' reports.`,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
      }),
    pods: z
      .array(podReportSchema)
      .optional()
      .meta({
        description: "Each runtime pod's report of itself, written by the pod.",
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
      }),
  })
  .describe("Observed state of the pipeline.");

export type ArchivePipelineStatus = z.output<typeof statusSchema>;
export type Condition = z.output<typeof conditionSchema>;
export type PodReport = z.output<typeof podReportSchema>;

// ---- validation ----

const RUNTIME_SPEC_KEYS = new Set(Object.keys(runtimeSpecShape));
const SECRET_SPEC_KEYS = SECRET_KEYS.map(camelKey);

const within = (key: string, prefix: string) =>
  key === prefix || key.startsWith(`${prefix}.`) || key.startsWith(`${prefix}[`);

/**
 * Validates a spec: the runtime part by the runtime's own validateConfig (every check it makes at boot, cross-section
 * ones included), the rest by the spec schema. Secrets count as present where referenced, since their values are in
 * Secrets the operator does not read. Fault keys are spec paths (archive.multipartChunkSize).
 */
export function validateSpec(spec: unknown): { spec: ResolvedSpec } | { faults: ConfigFault[] } {
  const own = validateSchema(specSchema, spec);
  const faults: ConfigFault[] = [];
  if ("faults" in own)
    for (const f of own.faults) {
      const top = f.key.split(/[.[]/, 1)[0] as string;
      // The runtime part is judged below, by the runtime; only a Secret reference's own shape is judged here.
      if (!RUNTIME_SPEC_KEYS.has(top) || SECRET_SPEC_KEYS.some((s) => within(f.key, s))) faults.push(f);
    }
  if (typeof spec === "object" && spec !== null && !Array.isArray(spec)) {
    // A fault about a referenced secret's stand-in value says nothing about the value in the Secret.
    const referenced = SECRET_KEYS.filter((k) => valueAt(spec, camelKey(k)) !== undefined);
    const runtime = validateConfig(toRuntimeKeys(spec as Record<string, unknown>, configShape, [], "placeholder"));
    if ("faults" in runtime)
      for (const f of runtime.faults)
        if (!referenced.some((s) => within(f.key, s)))
          faults.push({ key: camelKey(f.key), message: camelText(f.message) });
  }
  for (const key of OPERATOR_OWNED_KEYS)
    if (valueAt(spec, camelKey(key)) !== undefined)
      faults.push({
        key: camelKey(key),
        message: "is set by the operator (the probes, Service and KEDA read it); remove it",
      });
  // Never an empty refusal: should the two judges ever disagree, the spec schema's own word stands.
  if ("faults" in own && faults.length === 0) faults.push(...own.faults);
  if (faults.length > 0 || "faults" in own) return { faults };
  return { spec: own.data as ResolvedSpec };
}

function valueAt(root: unknown, dotted: string): unknown {
  let node = root;
  for (const seg of dotted.split("."))
    node = typeof node === "object" && node !== null ? (node as Record<string, unknown>)[seg] : undefined;
  return node;
}

// A referenced secret, as the runtime's checks see it: present, with a value the operator never knows.
const SECRET_PLACEHOLDER = "<from a Secret>";

/**
 * The runtime keys of a spec's runtime part, by the mechanical mapping. Secrets are dropped ("drop", for config.yaml)
 * or stand in as present ("placeholder", for validation); keys the runtime does not know are kept in snake_case
 * under "placeholder", so the runtime's refusal names them, and dropped otherwise.
 */
export function toRuntimeKeys(
  spec: Record<string, unknown>,
  shape: Record<string, z.ZodType>,
  prefix: string[],
  secrets: "drop" | "placeholder",
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  // In the schema's order, so config.yaml does not change with the order a client wrote the spec in.
  for (const [name, field] of Object.entries(shape)) {
    const value = spec[snakeToCamel(name)];
    if (value === undefined) continue;
    const path = [...prefix, name];
    const key = path.join(".");
    if ((OPERATOR_OWNED_KEYS as readonly string[]).includes(key)) continue;
    if ((SECRET_KEYS as readonly string[]).includes(key)) {
      if (secrets === "placeholder") out[name] = SECRET_PLACEHOLDER;
      continue;
    }
    const obj = objectOf(field);
    if (obj && typeof value === "object" && value !== null && !Array.isArray(value)) {
      const section = toRuntimeKeys(
        value as Record<string, unknown>,
        obj.shape as Record<string, z.ZodType>,
        path,
        secrets,
      );
      // A section left empty (only secrets, say) says nothing the runtime's defaults do not.
      if (Object.keys(section).length > 0) out[name] = section;
    } else out[name] = value;
  }
  if (secrets === "placeholder" && prefix.length > 0) {
    const known = new Set(Object.keys(shape).map(snakeToCamel));
    for (const [camel, value] of Object.entries(spec)) if (!known.has(camel)) out[camelToSnake(camel)] = value;
  }
  return out;
}

// ---- the resource ----

/** An ArchivePipeline as the apiserver returns it: named, namespaced, with the uid its owned objects point at. */
export interface ArchivePipeline {
  apiVersion: string;
  kind: string;
  metadata: {
    name: string;
    namespace: string;
    uid: string;
    generation?: number;
    resourceVersion?: string;
    labels?: Record<string, string>;
    annotations?: Record<string, string>;
  };
  spec: ArchivePipelineSpec;
  status?: ArchivePipelineStatus;
}

/** A secret the spec references, with the variable it reaches the pods under. */
export interface SecretUse {
  path: SecretPath;
  env: string;
  ref: SecretKeyRef["secretKeyRef"];
}

/** Every secret a spec references, in SECRET_KEYS order. */
export function secretUses(spec: ArchivePipelineSpec): SecretUse[] {
  const out: SecretUse[] = [];
  for (const path of SECRET_KEYS) {
    const ref = (valueAt(spec, camelKey(path)) as SecretKeyRef | undefined)?.secretKeyRef;
    if (ref !== undefined) out.push({ path, env: SECRET_ENV[path], ref });
  }
  return out;
}

/** Names of the Secrets a spec's pods read, sorted: the ones whose data rolls the pods when it changes. */
export function referencedSecretNames(spec: ArchivePipelineSpec): string[] {
  const names = new Set(secretUses(spec).map((u) => u.ref.name));
  if (spec.gcsKeySecret !== undefined) names.add(spec.gcsKeySecret.name);
  return [...names].sort();
}
