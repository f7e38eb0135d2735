// The restart wrapper around the client's informer, with a fake informer that fails as the real one does (its
// "error" event, before start() resolves or after), ownerKey's mapping of owned objects back to a pipeline, and the
// index from a Secret to the pipelines that read it.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import pino from "pino";
import type { ArchivePipeline, ArchivePipelineSpec } from "../../src/api/spec.ts";
import { RestartingInformer, SecretIndex, ownerKey, type Startable } from "../../src/controller/informers.ts";

class FakeInformer implements Startable {
  readonly #errorCbs: ((err?: unknown) => void)[] = [];
  starts: number[] = [];
  stops = 0;
  /** How each start goes: "list-error" reports on the error event and resolves, "reject" rejects, "ok" succeeds. */
  script: ("list-error" | "reject" | "ok")[];

  constructor(script: ("list-error" | "reject" | "ok")[]) {
    this.script = script;
  }

  on(_verb: "error", cb: (err?: unknown) => void): void {
    this.#errorCbs.push(cb);
  }

  fail(err: unknown): void {
    for (const cb of this.#errorCbs) cb(err);
  }

  start(): Promise<void> {
    this.starts.push(Date.now());
    const step = this.script.shift() ?? "ok";
    if (step === "reject") return Promise.reject(new Error("watch refused"));
    if (step === "list-error") this.fail(new Error("list failed"));
    return Promise.resolve();
  }

  stop(): Promise<void> {
    this.stops++;
    return Promise.resolve();
  }
}

const log = pino({ level: "silent" });

describe("RestartingInformer", () => {
  it("starts the informer again after each error, backing off, until a start succeeds", async () => {
    const fake = new FakeInformer(["list-error", "reject", "list-error", "ok"]);
    const r = new RestartingInformer(fake, { name: "fake", log, baseMs: 20, maxMs: 1000 });
    r.start();
    for (let i = 0; i < 100 && !r.synced; i++) await sleep(10);
    assert.equal(r.synced, true);
    assert.equal(fake.starts.length, 4);
    const gaps = fake.starts.slice(1).map((t, i) => t - fake.starts[i]!);
    // 20, 40, 80 ms: each wait at least the one before doubled (timers never fire early).
    assert.ok(gaps[0]! >= 19 && gaps[1]! >= 39 && gaps[2]! >= 79, `gaps ${gaps.join(",")}`);
    await r.stop();
  });

  it("restarts after an error once running, once for a burst of errors", async () => {
    const fake = new FakeInformer(["ok", "ok"]);
    const r = new RestartingInformer(fake, { name: "fake", log, baseMs: 20, maxMs: 1000 });
    r.start();
    await sleep(5);
    fake.fail(new Error("connection reset"));
    await sleep(60);
    assert.equal(fake.starts.length, 2);
    // Two errors in a row are one restart, not two.
    fake.fail(new Error("a"));
    fake.fail(new Error("b"));
    await sleep(60);
    assert.equal(fake.starts.length, 3);
    await r.stop();
  });

  it("does not restart once stopped", async () => {
    const fake = new FakeInformer(["ok"]);
    const r = new RestartingInformer(fake, { name: "fake", log, baseMs: 10, maxMs: 10 });
    r.start();
    await sleep(5);
    fake.fail(new Error("x"));
    await r.stop();
    await sleep(40);
    assert.equal(fake.starts.length, 1);
    assert.equal(fake.stops, 1);
  });
});

describe("ownerKey", () => {
  const ref = { apiVersion: "archiver.dfe.io/v1alpha1", kind: "ArchivePipeline", name: "events", uid: "u" };
  it("maps an object its pipeline controls to the pipeline's key", () => {
    assert.equal(
      ownerKey({ metadata: { namespace: "ns", ownerReferences: [{ ...ref, controller: true }] } }),
      "ns/events",
    );
  });
  it("ignores owners that are not a controlling ArchivePipeline", () => {
    assert.equal(ownerKey({ metadata: { namespace: "ns", ownerReferences: [ref] } }), undefined);
    assert.equal(
      ownerKey({ metadata: { namespace: "ns", ownerReferences: [{ ...ref, kind: "ReplicaSet", controller: true }] } }),
      undefined,
    );
    assert.equal(ownerKey({ metadata: { namespace: "ns" } }), undefined);
  });
});

describe("SecretIndex", () => {
  const pipeline = (namespace: string, name: string, spec: ArchivePipelineSpec): ArchivePipeline => ({
    apiVersion: "archiver.dfe.io/v1alpha1",
    kind: "ArchivePipeline",
    metadata: { namespace, name, uid: `${namespace}-${name}` },
    spec,
  });
  const ref = (name: string) => ({ secretKeyRef: { name, key: "k" } });

  it("maps each referenced Secret, credentials and the GCS key file, to the pipelines reading it, per namespace", () => {
    const idx = new SecretIndex();
    idx.set(pipeline("a", "one", { kafka: { saslPassword: ref("kafka") }, gcsKeySecret: { name: "gcs" } }));
    idx.set(pipeline("a", "two", { kafka: { saslPassword: ref("kafka") } }));
    idx.set(pipeline("b", "three", { kafka: { saslPassword: ref("kafka") } }));
    assert.deepEqual(idx.pipelines("a", "kafka").sort(), ["a/one", "a/two"]);
    assert.deepEqual(idx.pipelines("a", "gcs"), ["a/one"]);
    assert.deepEqual(idx.pipelines("b", "kafka"), ["b/three"]);
    assert.deepEqual(idx.pipelines("a", "other"), []);
  });

  it("follows a spec that stops referencing a Secret, and a pipeline's deletion", () => {
    const idx = new SecretIndex();
    idx.set(pipeline("a", "one", { kafka: { saslPassword: ref("old") } }));
    idx.set(pipeline("a", "one", { kafka: { saslPassword: ref("new") } }));
    assert.deepEqual(idx.pipelines("a", "old"), []);
    assert.deepEqual(idx.pipelines("a", "new"), ["a/one"]);
    idx.delete("a/one");
    assert.deepEqual(idx.pipelines("a", "new"), []);
  });
});
