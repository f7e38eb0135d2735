// Two electors on one Lease of the testbed's kube-apiserver, with short periods so the test stays quick.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { CoordinationV1Api } from "@kubernetes/client-node";
import pino from "pino";
import { LeaderElector } from "../../src/controller/leader.ts";
import { kubeConfig, kubeNamespace } from "../../../e2e/support/testbed.ts";

const coordination = kubeConfig().makeApiClient(CoordinationV1Api);
const LEASE_SECONDS = 3;

function elector(namespace: string, identity: string, events: string[]): LeaderElector {
  return new LeaderElector({
    coordination,
    namespace,
    identity,
    log: pino({ level: process.env["LOG_LEVEL"] ?? "silent" }),
    leaseDurationSeconds: LEASE_SECONDS,
    renewPeriodMs: 500,
    retryPeriodMs: 200,
    onStartedLeading: () => events.push(`${identity} started`),
    onStoppedLeading: () => events.push(`${identity} stopped`),
  });
}

async function until(what: string, ok: () => boolean, ms: number): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`not ${what} within ${ms} ms`);
    await sleep(25);
  }
}

describe("LeaderElector", () => {
  it("lets one of two lead, and the other take over once the leader stops renewing", async (t) => {
    const namespace = await kubeNamespace(t);
    const events: string[] = [];
    const a = elector(namespace, "a", events);
    const b = elector(namespace, "b", events);
    t.after(() => Promise.all([a.stop(false), b.stop(false)]));
    void a.run();
    await until("leading", () => a.leading, 5000);
    void b.run();
    // b campaigns many times over several renewals and never wins.
    await sleep((LEASE_SECONDS + 1) * 1000);
    assert.equal(a.leading, true);
    assert.equal(b.leading, false);
    const lease = await coordination.readNamespacedLease({ name: "dfe-archiver-operator", namespace });
    assert.equal(lease.spec?.holderIdentity, "a");
    assert.equal(lease.spec?.leaseDurationSeconds, LEASE_SECONDS);

    const stoppedAt = Date.now();
    await a.stop(false);
    assert.equal(a.leading, false);
    await until("taken over", () => b.leading, 2 * LEASE_SECONDS * 1000);
    const took = Date.now() - stoppedAt;
    // Not before the abandoned Lease could have expired (its last renewal was at most one renew period earlier).
    assert.ok(took >= LEASE_SECONDS * 1000 - 500 - 100, `took over after ${took} ms, before the lease expired`);
    const after = await coordination.readNamespacedLease({ name: "dfe-archiver-operator", namespace });
    assert.equal(after.spec?.holderIdentity, "b");
    assert.equal(after.spec?.leaseTransitions, 1);
    assert.deepEqual(events, ["a started", "b started"]);
  });

  it("hands the Lease over at once when the leader releases it", async (t) => {
    const namespace = await kubeNamespace(t);
    const events: string[] = [];
    const a = elector(namespace, "a", events);
    const b = elector(namespace, "b", events);
    t.after(() => Promise.all([a.stop(false), b.stop(false)]));
    void a.run();
    await until("leading", () => a.leading, 5000);
    void b.run();
    await sleep(300);
    const stoppedAt = Date.now();
    await a.stop(true);
    await until("taken over", () => b.leading, 5000);
    assert.ok(Date.now() - stoppedAt < LEASE_SECONDS * 1000 - 500, "waited out the released lease");
  });
});
