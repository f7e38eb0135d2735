// The pod's report of itself, from the health model: its state and reason, its components, the env that names the
// pod, and its field manager. Every report is held to the CRD's own status.pods schema, so the runtime cannot write
// an entry the apiserver would refuse.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import pino from "pino";
import { podReportSchema } from "../../../operator/src/api/spec.ts";
import { Health } from "../../src/observe/health.ts";
import { podFieldManager, podIdentity, podReport, startStatusReporter } from "../../src/observe/report.ts";

const AT = new Date("2026-03-01T12:00:00.456Z");
const report = (h: Health, guarantee?: string) => podReportSchema.parse(podReport("p-1", h.snapshot(), AT, guarantee));

describe("podReport", () => {
  it("reports Running with every component ok, and the guarantee in force", () => {
    const r = report(new Health(), "at_least_once");
    assert.deepEqual(r, {
      name: "p-1",
      state: "Running",
      deliveryGuarantee: "at_least_once",
      lastReport: "2026-03-01T12:00:00Z",
      components: { workConfig: { state: "ok" }, transport: { state: "ok" }, sink: { state: "ok" } },
    });
  });

  it("reports Idle with the idle reason, and no guarantee while nothing runs", () => {
    const h = new Health();
    h.setIdle(true);
    h.set("work_config", "degraded", "no destination configured");
    h.set("transport", "ok", "idle: no connection opened");
    const r = report(h, "at_least_once");
    assert.equal(r.state, "Idle");
    assert.equal(r.reason, "no destination configured");
    assert.equal(r.deliveryGuarantee, undefined);
    assert.deepEqual(r.components?.transport, { state: "ok", reason: "idle: no connection opened" });
  });

  it("reports Degraded naming each component that is not ok, even while idle once one has failed", () => {
    const h = new Health();
    h.set("sink", "degraded", "store unreachable");
    h.set("transport", "failed", "brokers unreachable");
    let r = report(h);
    assert.equal(r.state, "Degraded");
    assert.equal(r.reason, "transport failed: brokers unreachable; sink degraded: store unreachable");
    assert.deepEqual(r.components?.sink, { state: "degraded", reason: "store unreachable" });
    h.setIdle(true);
    r = report(h);
    assert.equal(r.state, "Degraded");
  });

  it("reports Degraded while idle when the last config change was refused, and Idle again once it is fixed", () => {
    const h = new Health();
    h.setIdle(true);
    h.set("work_config", "degraded", "config change refused, running config kept: compression.codec: ...");
    h.setConfigRefused(true);
    assert.equal(report(h).state, "Degraded");
    assert.match(report(h).reason ?? "", /^work_config degraded: config change refused/);
    h.setConfigRefused(false);
    h.set("work_config", "degraded", "no destination configured");
    assert.equal(report(h).state, "Idle");
  });
});

describe("podIdentity and podFieldManager", () => {
  it("needs the pod's name, namespace and pipeline, all three", () => {
    const env = { POD_NAME: "p-1", POD_NAMESPACE: "ns", DFE_ARCHIVER_PIPELINE_NAME: "events" };
    assert.deepEqual(podIdentity(env), { pod: "p-1", namespace: "ns", pipeline: "events" });
    for (const missing of Object.keys(env))
      assert.equal(podIdentity({ ...env, [missing]: "" }), undefined, `${missing} empty`);
  });

  it("gives each pod a manager of its own, within the apiserver's 128 characters", () => {
    assert.equal(podFieldManager("events-archiver-7d9c-x2k4p"), "dfe-archiver-pod/events-archiver-7d9c-x2k4p");
    assert.notEqual(podFieldManager("a"), podFieldManager("b"));
    const long = podFieldManager("x".repeat(253));
    assert.ok(long.length <= 128);
    assert.notEqual(long, podFieldManager(`${"x".repeat(252)}y`));
  });

  it("starts no reporter outside a pod, or in one without readable credentials", async () => {
    const log = pino({ level: "silent" });
    assert.equal(await startStatusReporter({ health: new Health(), env: {}, log }), undefined);
    const pod = { POD_NAME: "p-1", POD_NAMESPACE: "ns", DFE_ARCHIVER_PIPELINE_NAME: "events" };
    assert.equal(await startStatusReporter({ health: new Health(), env: pod, log }), undefined);
    const unreadable = { ...pod, KUBECONFIG: "/nonexistent/kubeconfig" };
    assert.equal(await startStatusReporter({ health: new Health(), env: unreadable, log }), undefined);
  });
});
