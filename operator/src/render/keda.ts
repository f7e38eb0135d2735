// The KEDA ScaledObject. CPU (~70% of the request) is the default trigger; the scaling-pressure trigger is opt-in,
// read from the fleet's dfe-keda-shim or, without one, from every runtime pod through the metrics Service with KEDA
// taking the hottest. keda.triggers replaces both outright.
import type { ArchivePipeline, ResolvedSpec } from "../api/spec.ts";
import { objectNames, ownedMeta, type KubeObject } from "./meta.ts";
import { METRICS_PORT } from "./workload.ts";

export const KEDA_API_VERSION = "keda.sh/v1alpha1";

export interface ScaledObjectTrigger {
  type: string;
  name?: string;
  metadata: Record<string, string>;
  metricType?: string;
  useCachedMetrics?: boolean;
  authenticationRef?: { name: string; kind?: string };
}

export interface ScaledObject extends KubeObject {
  spec: {
    scaleTargetRef: { apiVersion: string; kind: string; name: string };
    minReplicaCount: number;
    maxReplicaCount: number;
    triggers: ScaledObjectTrigger[];
    fallback?: { failureThreshold: number; replicas: number; behavior: string };
  };
}

/** Failed reads of the pressure trigger before its fallback holds the replica count. */
export const FALLBACK_FAILURE_THRESHOLD = 3;

function pressureTrigger(cr: ArchivePipeline, spec: ResolvedSpec): ScaledObjectTrigger {
  const p = spec.keda.pressure;
  const common = { format: "json", valueLocation: "value", targetValue: String(p.target) };
  const metadata =
    p.shimAddress !== undefined
      ? {
          ...common,
          url: `http://${p.shimAddress}/scaling-pressure?service=${encodeURIComponent(p.service ?? cr.metadata.name)}`,
        }
      : {
          ...common,
          url: `http://${objectNames(cr.metadata.name).workload}.${cr.metadata.namespace}.svc:${METRICS_PORT}/scaling/pressure`,
          aggregateFromKubeServiceEndpoints: "true",
          aggregationType: "max",
        };
  // Value, not AverageValue: the reading is already the hottest pod's ratio, not a total to share out among pods.
  return { type: "metrics-api", name: "scaling-pressure", metricType: "Value", metadata };
}

export function renderScaledObject(cr: ArchivePipeline, spec: ResolvedSpec): ScaledObject {
  const k = spec.keda;
  const name = objectNames(cr.metadata.name).workload;
  const cpu: ScaledObjectTrigger = {
    type: "cpu",
    name: "cpu",
    metricType: "Utilization",
    metadata: { value: String(k.cpu.target) },
  };
  const triggers = k.triggers ?? (k.pressure.enabled ? [cpu, pressureTrigger(cr, spec)] : [cpu]);
  const pressure = k.triggers === undefined && k.pressure.enabled;
  return {
    apiVersion: KEDA_API_VERSION,
    kind: "ScaledObject",
    metadata: ownedMeta(cr, name),
    spec: {
      scaleTargetRef: { apiVersion: "apps/v1", kind: "Deployment", name },
      minReplicaCount: k.minReplicaCount,
      maxReplicaCount: k.maxReplicaCount,
      triggers,
      // A failed pressure read holds the current replica count rather than scaling on no signal; cpu still scales.
      ...(pressure
        ? {
            fallback: {
              failureThreshold: FALLBACK_FAILURE_THRESHOLD,
              replicas: k.minReplicaCount,
              behavior: "currentReplicas",
            },
          }
        : {}),
    },
  };
}
