// KedaWatch's caching, background rechecks and change callback, over a scripted discovery answer (the real
// discovery read is exercised against the apiserver, with and without the CRD, in keda-absent.test.ts).
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import pino from "pino";
import { KedaWatch } from "../../src/controller/keda.ts";

const log = pino({ level: "silent" });

/** Answers discovery from `answers` in turn (an Error rejects), repeating the last; counts the reads. */
function discovery(answers: (boolean | Error)[]) {
  const d = {
    reads: 0,
    read: () => {
      d.reads++;
      const a = answers.length > 1 ? answers.shift()! : answers[0]!;
      return a instanceof Error ? Promise.reject(a) : Promise.resolve(a);
    },
  };
  return d;
}

describe("KedaWatch", () => {
  it("answers from its last read until it is recheckMs old, one read for concurrent callers", async () => {
    const d = discovery([false, true]);
    const w = new KedaWatch(d.read, { log, recheckMs: 1000 });
    assert.deepEqual(await Promise.all([w.installed(), w.installed()]), [false, false]);
    assert.equal(d.reads, 1);
    assert.equal(await w.installed(), false);
    assert.equal(d.reads, 1);
    await sleep(1100);
    assert.equal(await w.installed(), true);
    assert.equal(d.reads, 2);
  });

  it("fails the first read, and stands on the last answer when a later one fails", async () => {
    const w = new KedaWatch(discovery([new Error("no route")]).read, { log, recheckMs: 10 });
    await assert.rejects(w.installed(), /no route/);
    const d = discovery([true, new Error("timeout")]);
    const v = new KedaWatch(d.read, { log, recheckMs: 10 });
    assert.equal(await v.installed(), true);
    await sleep(20);
    assert.equal(await v.installed(), true);
    assert.equal(d.reads, 2);
  });

  it("rechecks in the background and calls back on each flip, not on the first answer or a repeat", async () => {
    const d = discovery([false, false, true, true, false]);
    const w = new KedaWatch(d.read, { log, recheckMs: 20 });
    const flips: boolean[] = [];
    w.start((installed) => flips.push(installed));
    for (let i = 0; i < 200 && d.reads < 6; i++) await sleep(10);
    w.stop();
    assert.deepEqual(flips, [true, false]);
    const reads = d.reads;
    await sleep(60);
    assert.equal(d.reads, reads, "no read after stop()");
  });
});
