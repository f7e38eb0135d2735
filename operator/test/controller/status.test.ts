import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { PodReport } from "../../src/api/spec.ts";
import { OPERATOR_CONDITIONS, computeConditions, type Observed } from "../../src/controller/status.ts";

const T0 = new Date("2026-01-01T00:00:00.123Z");
const T1 = new Date("2026-01-01T00:05:00Z");
const base: Observed = {
  generation: 3,
  spec: { kedaEnabled: true, replicas: 1, destinationSet: true },
  kedaInstalled: true,
  missingSecrets: [],
  deployment: { desired: 2, ready: 2, updated: 2 },
  pods: [],
};
const pod = (name: string, state: PodReport["state"], reason?: string): PodReport => ({
  name,
  state,
  ...(reason === undefined ? {} : { reason }),
  lastReport: "2026-01-01T00:00:00Z",
});
const byType = (o: Observed) => Object.fromEntries(computeConditions(o, undefined, T0).map((c) => [c.type, c]));

describe("computeConditions", () => {
  it("writes the four conditions in metav1.Condition shape", () => {
    const cs = computeConditions(base, undefined, T0);
    assert.deepEqual(
      cs.map((c) => c.type),
      [...OPERATOR_CONDITIONS],
    );
    for (const c of cs) {
      assert.match(c.reason, /^[A-Z][A-Za-z]*$/);
      assert.match(c.message, /\.$/);
      assert.equal(c.lastTransitionTime, "2026-01-01T00:00:00Z");
      assert.equal(c.observedGeneration, 3);
    }
  });

  it("moves lastTransitionTime only when a status changes", () => {
    const first = computeConditions(base, undefined, T0);
    const notReady = { ...base, deployment: { desired: 2, ready: 1, updated: 2 } };
    const second = computeConditions(notReady, first, T1);
    const ready = second.find((c) => c.type === "Ready")!;
    assert.equal(ready.status, "False");
    assert.equal(ready.lastTransitionTime, "2026-01-01T00:05:00Z");
    assert.equal(second.find((c) => c.type === "Degraded")!.lastTransitionTime, "2026-01-01T00:00:00Z");
    // Same status, another reason or message: the time stays.
    const third = computeConditions({ ...notReady, deployment: { desired: 3, ready: 0, updated: 0 } }, second, T1);
    assert.equal(third.find((c) => c.type === "Ready")!.lastTransitionTime, "2026-01-01T00:05:00Z");
  });

  it("reads Ready from the Deployment", () => {
    assert.equal(byType(base)["Ready"]!.reason, "PodsReady");
    assert.equal(byType({ ...base, deployment: { desired: 2, ready: 2, updated: 1 } })["Ready"]!.status, "False");
    assert.equal(byType({ ...base, deployment: { desired: 0, ready: 0, updated: 0 } })["Ready"]!.status, "False");
  });

  it("puts a refused spec on Ready and Degraded, and Unknown on the rest", () => {
    const { spec: _, ...rest } = base;
    const c = byType({ ...rest, faults: [{ key: "kafka.brokers", message: "needs at least one broker" }] });
    assert.deepEqual([c["Ready"]!.status, c["Ready"]!.reason], ["False", "InvalidSpec"]);
    assert.match(c["Ready"]!.message, /kafka\.brokers needs at least one broker/);
    assert.equal(c["Degraded"]!.status, "True");
    assert.equal(c["Idle"]!.status, "Unknown");
    assert.equal(c["ScalingReady"]!.status, "Unknown");
  });

  it("names missing Secrets", () => {
    const c = byType({ ...base, missingSecrets: ["kafka", "minio"] });
    assert.equal(c["Ready"]!.reason, "SecretMissing");
    assert.match(c["Ready"]!.message, /Secrets kafka, minio do not exist/);
    assert.equal(c["Degraded"]!.reason, "SecretMissing");
  });

  it("derives Idle and Degraded from the pods' reports", () => {
    let c = byType({ ...base, pods: [pod("a", "Idle", "no destination"), pod("b", "Idle", "no destination")] });
    assert.deepEqual([c["Idle"]!.status, c["Idle"]!.reason], ["True", "PodsIdle"]);
    assert.equal(c["Idle"]!.message, "Every pod reports idle (a, b): no destination.");
    c = byType({ ...base, pods: [pod("a", "Idle"), pod("b", "Running")] });
    assert.equal(c["Idle"]!.status, "False");
    assert.equal(c["Idle"]!.message, "1 of 2 reporting pods not idle: b Running.");
    assert.equal(c["Degraded"]!.status, "False");
    c = byType({ ...base, pods: [pod("a", "Degraded", "store unreachable"), pod("b", "Running")] });
    assert.deepEqual([c["Degraded"]!.status, c["Degraded"]!.reason], ["True", "PodsDegraded"]);
    assert.match(c["Degraded"]!.message, /a: store unreachable/);
    assert.equal(byType(base)["Idle"]!.status, "Unknown", "no reports yet");
    const noDest = byType({ ...base, spec: { ...base.spec!, destinationSet: false } });
    assert.deepEqual([noDest["Idle"]!.status, noDest["Idle"]!.reason], ["True", "NoDestination"]);
  });

  it("reports KEDA's absence on ScalingReady only when the spec asks for KEDA", () => {
    const absent = byType({ ...base, kedaInstalled: false });
    assert.deepEqual([absent["ScalingReady"]!.status, absent["ScalingReady"]!.reason], ["False", "KEDANotInstalled"]);
    const off = byType({ ...base, kedaInstalled: false, spec: { ...base.spec!, kedaEnabled: false } });
    assert.deepEqual([off["ScalingReady"]!.status, off["ScalingReady"]!.reason], ["True", "FixedReplicas"]);
    assert.equal(byType(base)["ScalingReady"]!.reason, "ScaledObjectApplied");
  });
});
