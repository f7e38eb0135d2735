// The pipeline's conditions, from what one reconcile saw: the spec's validity, the Secrets, KEDA, the Deployment and
// the pods' own reports. Pure, so every rule is tested without a cluster.
import type { ConfigFault } from "../../../runtime/src/config/validate.ts";
import { CONDITION_TYPES, type Condition, type PodReport } from "../api/spec.ts";

/** The conditions the operator owns, in the order it writes them. */
export const OPERATOR_CONDITIONS = CONDITION_TYPES;
export type OperatorCondition = (typeof OPERATOR_CONDITIONS)[number];

/** What a reconcile saw; `spec` is absent when the spec was refused. */
export interface Observed {
  generation: number;
  faults?: readonly ConfigFault[];
  /** The apply failed for good; its message. */
  applyError?: string;
  spec?: { kedaEnabled: boolean; replicas: number; destinationSet: boolean };
  kedaInstalled: boolean;
  missingSecrets: readonly string[];
  deployment?: { desired: number; ready: number; updated: number };
  /** The reports of pods that still exist. */
  pods: readonly PodReport[];
}

type Computed = Pick<Condition, "status" | "reason" | "message">;

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`;
const names = (pods: readonly PodReport[]) => pods.map((p) => p.name).join(", ");

function faultText(faults: readonly ConfigFault[]): string {
  return faults.map((f) => `${f.key} ${f.message}`).join("; ");
}

function missingText(names: readonly string[]): string {
  const list = names.join(", ");
  return names.length === 1 ? `Secret ${list} does not exist` : `Secrets ${list} do not exist`;
}

function ready(o: Observed): Computed {
  if (o.faults)
    return { status: "False", reason: "InvalidSpec", message: `The spec is invalid: ${faultText(o.faults)}.` };
  if (o.applyError !== undefined)
    return { status: "False", reason: "ApplyFailed", message: `Applying the owned objects failed: ${o.applyError}.` };
  if (o.missingSecrets.length > 0)
    return {
      status: "False",
      reason: "SecretMissing",
      message: `${missingText(o.missingSecrets)}; the pods cannot start without it.`,
    };
  const d = o.deployment;
  if (d === undefined) return { status: "Unknown", reason: "DeploymentPending", message: "No Deployment yet." };
  const counts = `${d.ready} of ${plural(d.desired, "pod")} ready`;
  if (d.desired > 0 && d.ready >= d.desired && d.updated >= d.desired)
    return { status: "True", reason: "PodsReady", message: `${counts}.` };
  return { status: "False", reason: "PodsNotReady", message: `${counts}.` };
}

function idle(o: Observed): Computed {
  if (o.spec === undefined) return { status: "Unknown", reason: "InvalidSpec", message: "The spec is invalid." };
  if (o.pods.length > 0) {
    const idlePods = o.pods.filter((p) => p.state === "Idle");
    if (idlePods.length === o.pods.length) {
      const reasons = [...new Set(idlePods.map((p) => p.reason).filter((r) => r !== undefined))];
      return {
        status: "True",
        reason: "PodsIdle",
        message: `Every pod reports idle (${names(idlePods)})${reasons.length > 0 ? `: ${reasons.join("; ")}` : ""}.`,
      };
    }
    const busy = o.pods.filter((p) => p.state !== "Idle");
    return {
      status: "False",
      reason: "PodsArchiving",
      message: `${busy.length} of ${plural(o.pods.length, "reporting pod")} not idle: ${busy.map((p) => `${p.name} ${p.state}`).join(", ")}.`,
    };
  }
  if (!o.spec.destinationSet)
    return {
      status: "True",
      reason: "NoDestination",
      message: "spec.archive.destination is unset; the pods idle until one is set.",
    };
  return { status: "Unknown", reason: "NoReports", message: "No pod has reported yet." };
}

function degraded(o: Observed): Computed {
  if (o.faults)
    return { status: "True", reason: "InvalidSpec", message: `The spec is invalid: ${faultText(o.faults)}.` };
  if (o.applyError !== undefined)
    return { status: "True", reason: "ApplyFailed", message: `Applying the owned objects failed: ${o.applyError}.` };
  if (o.missingSecrets.length > 0)
    return { status: "True", reason: "SecretMissing", message: `${missingText(o.missingSecrets)}.` };
  const bad = o.pods.filter((p) => p.state === "Degraded");
  if (bad.length > 0)
    return {
      status: "True",
      reason: "PodsDegraded",
      message: `${bad.map((p) => (p.reason === undefined ? p.name : `${p.name}: ${p.reason}`)).join("; ")}.`,
    };
  return { status: "False", reason: "AsExpected", message: "No pod reports a fault." };
}

function scalingReady(o: Observed): Computed {
  if (o.spec === undefined) return { status: "Unknown", reason: "InvalidSpec", message: "The spec is invalid." };
  const fixed = `the Deployment runs ${plural(o.spec.replicas, "pod")} (spec.replicas)`;
  if (!o.spec.kedaEnabled) return { status: "True", reason: "FixedReplicas", message: `KEDA is off; ${fixed}.` };
  if (!o.kedaInstalled)
    return {
      status: "False",
      reason: "KEDANotInstalled",
      message: `spec.keda.enabled is true but KEDA's ScaledObject CRD is not installed; ${fixed}.`,
    };
  return { status: "True", reason: "ScaledObjectApplied", message: "KEDA scales the Deployment." };
}

const RULES: Record<OperatorCondition, (o: Observed) => Computed> = {
  Ready: ready,
  Idle: idle,
  Degraded: degraded,
  ScalingReady: scalingReady,
};

/** metav1 time: whole seconds, as the apiserver stores them, so a re-read compares equal. */
export function conditionTime(now: Date): string {
  return now.toISOString().replace(/\.\d+Z$/, "Z");
}

/**
 * The operator's conditions; each keeps its previous lastTransitionTime unless its status changed, as
 * meta.SetStatusCondition does.
 */
export function computeConditions(o: Observed, previous: readonly Condition[] | undefined, now: Date): Condition[] {
  return OPERATOR_CONDITIONS.map((type) => {
    const c = RULES[type](o);
    const before = previous?.find((p) => p.type === type);
    const lastTransitionTime =
      before !== undefined && before.status === c.status ? before.lastTransitionTime : conditionTime(now);
    return { type, ...c, lastTransitionTime, observedGeneration: o.generation };
  });
}
