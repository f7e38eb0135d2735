import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { BACKOFF_MAX_MS, WorkQueue, objectKey, splitKey } from "../../src/controller/queue.ts";

// get() if it resolves within a few event-loop turns, else "pending".
async function poll(q: WorkQueue): Promise<string | undefined | "pending"> {
  return Promise.race([q.get(), sleep(20).then(() => "pending" as const)]);
}

describe("WorkQueue", () => {
  it("hands a key out once however often it was added", async () => {
    const q = new WorkQueue();
    q.add("ns/a");
    q.add("ns/b");
    q.add("ns/a");
    assert.equal(q.length, 2);
    assert.equal(await q.get(), "ns/a");
    assert.equal(await q.get(), "ns/b");
    assert.equal(q.length, 0);
  });

  it("queues a key added while it is held again only after done()", async () => {
    const q = new WorkQueue();
    q.add("ns/a");
    const key = await q.get();
    assert.equal(key, "ns/a");
    q.add("ns/a");
    q.add("ns/a");
    // Not handed to a second worker while the first holds it.
    const second = q.get();
    assert.equal(await Promise.race([second, sleep(20).then(() => "pending")]), "pending");
    q.done("ns/a");
    assert.equal(await second, "ns/a");
    q.done("ns/a");
    assert.equal(await poll(q), "pending");
  });

  it("wakes a waiting worker on add", async () => {
    const q = new WorkQueue();
    const waiting = q.get();
    q.add("ns/x");
    assert.equal(await waiting, "ns/x");
  });

  it("backs off per key, doubling from 5 ms to the 1000 s cap, and forgets on success", () => {
    const q = new WorkQueue();
    const seen: number[] = [];
    for (let i = 0; i < 30; i++) {
      seen.push(q.backoff("ns/a"));
      q.addRateLimited("ns/a");
    }
    assert.deepEqual(seen.slice(0, 4), [5, 10, 20, 40]);
    assert.equal(seen.at(-1), BACKOFF_MAX_MS);
    assert.equal(Math.max(...seen), BACKOFF_MAX_MS);
    assert.equal(q.backoff("ns/b"), 5, "another key's backoff is its own");
    q.forget("ns/a");
    assert.equal(q.backoff("ns/a"), 5);
    assert.equal(q.failures("ns/a"), 0);
    return q.shutDown();
  });

  it("adds a rate-limited key after its backoff", async () => {
    const q = new WorkQueue();
    q.addRateLimited("ns/a");
    assert.equal(q.length, 0, "not queued at once");
    assert.equal(await q.get(), "ns/a");
  });

  it("keeps the earliest of two delayed adds", async () => {
    const q = new WorkQueue();
    q.addAfter("ns/a", 60_000);
    q.addAfter("ns/a", 5);
    assert.equal(await q.get(), "ns/a");
    q.done("ns/a");
    await q.shutDown();
  });

  it("drains on shutDown: queued keys are still handed out, new ones refused, then get() ends", async () => {
    const q = new WorkQueue();
    q.add("ns/a");
    q.add("ns/b");
    q.addAfter("ns/c", 60_000);
    const held = await q.get();
    let drained = false;
    const shut = q.shutDown().then(() => (drained = true));
    q.add("ns/d");
    assert.equal(await q.get(), "ns/b");
    q.done("ns/b");
    await sleep(5);
    assert.equal(drained, false, "drained while a key is still held");
    q.done(held!);
    await shut;
    assert.equal(await q.get(), undefined);
  });

  it("ends a waiting worker's get() on shutDown of an empty queue", async () => {
    const q = new WorkQueue();
    const waiting = q.get();
    await q.shutDown();
    assert.equal(await waiting, undefined);
  });

  it("splits the keys it makes", () => {
    assert.equal(objectKey("ns", "a"), "ns/a");
    assert.deepEqual(splitKey("ns/a"), { namespace: "ns", name: "a" });
    assert.throws(() => splitKey("a"));
  });
});
