// The pipeline's commits alone (pipeline/commits.ts), against a transport that records when each commit starts.
import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { pino } from "pino";
import type { CommitOffset } from "../../src/delivery/tracker.ts";
import { createMetrics } from "../../src/observe/metrics.ts";
import { Commits, COMMIT_SPACING_MS } from "../../src/pipeline/commits.ts";

/** A tracker whose floor moves at each `move`, a transport that takes `commitMs` and fails while `failing`. */
function harness(commitMs = 0, floorsMs = 0) {
  let floor = 0;
  let committed = 0;
  const starts: number[] = [];
  const ends: number[] = [];
  const sent: string[] = [];
  const state = { failing: false };
  const metrics = createMetrics({ defaultMetrics: false });
  const offsets = (): CommitOffset[] => [{ topic: "t", partition: 0, offset: String(floor) }];
  const commits = new Commits({
    tracker: {
      commitable: () => {
        // Reading the floors visits every open hold: as long as the caller says.
        for (const until = performance.now() + floorsMs; performance.now() < until;);
        return floor > committed ? offsets() : [];
      },
      committed: (o) => (committed = Number(o[0]?.offset)),
    },
    transport: {
      commit: async (o) => {
        starts.push(performance.now());
        sent.push(o[0]?.offset ?? "");
        await sleep(commitMs);
        ends.push(performance.now());
        if (state.failing) throw new Error("broker away");
      },
    },
    metrics,
    log: pino({ level: "silent" }),
  });
  const errors = async () => (await metrics.kafkaCommitErrors.get()).values[0]?.value ?? 0;
  return { commits, starts, ends, sent, state, errors, move: () => floor++, committed: () => committed };
}

test("a burst of releases commits at once, then once more a spacing later for all the rest", async () => {
  const h = harness();
  h.move();
  h.commits.schedule();
  for (let i = 0; i < 50; i++) {
    h.move();
    h.commits.schedule();
  }
  await sleep(COMMIT_SPACING_MS * 3);
  assert.deepEqual(h.sent, ["1", "51"]);
  // Spaced from where each attempt began, a little before the transport sees it (the first call also compiles).
  const gap = (h.starts[1] ?? 0) - (h.starts[0] ?? 0);
  assert.ok(gap >= COMMIT_SPACING_MS - 5, `the second commit started ${gap} ms after the first`);
  assert.equal(h.committed(), 51);
});

test("commits are spaced by 20 times what reading the floors took, when that is longer", async () => {
  const h = harness(0, 15);
  h.move();
  h.commits.schedule();
  h.move();
  h.commits.schedule();
  await sleep(COMMIT_SPACING_MS * 2);
  assert.deepEqual(h.sent, ["1"], "not yet: 15 ms of floors spaces the next commit 300 ms");
  await sleep(COMMIT_SPACING_MS * 2);
  assert.deepEqual(h.sent, ["1", "2"]);
  const gap = (h.starts[1] ?? 0) - (h.starts[0] ?? 0);
  assert.ok(gap >= 20 * 15 - 5, `the second commit started ${gap} ms after the first`);
});

test("releases while a commit runs are committed once after it, never alongside it", async () => {
  const h = harness(COMMIT_SPACING_MS * 2);
  h.move();
  h.commits.schedule();
  await sleep(10);
  h.move();
  h.commits.schedule();
  h.move();
  h.commits.schedule();
  await sleep(COMMIT_SPACING_MS * 5);
  assert.deepEqual(h.sent, ["1", "3"]);
  // Against the first's end as recorded, not its duration: a timer may fire a little before performance.now() says
  // its delay has passed (libuv reads its clock once a loop turn), which failed a check of the gap 1 run in 3.
  assert.ok((h.starts[1] ?? 0) >= (h.ends[0] ?? Infinity), "the second began before the first ended");
});

test("nothing moved, nothing is sent; a failed commit is counted and what it held is sent again", async () => {
  const h = harness();
  h.commits.schedule();
  await sleep(COMMIT_SPACING_MS * 2);
  assert.deepEqual(h.sent, []);
  h.state.failing = true;
  h.move();
  h.commits.schedule();
  await sleep(COMMIT_SPACING_MS * 2);
  assert.equal(await h.errors(), 1);
  assert.equal(h.committed(), 0, "a refused commit marked its offsets committed");
  h.state.failing = false;
  h.commits.schedule();
  await sleep(COMMIT_SPACING_MS * 2);
  assert.deepEqual(h.sent, ["1", "1"]);
  assert.equal(h.committed(), 1);
});

test("the drain's last commit waits for the one running and takes the place of a spaced one", async () => {
  const h = harness(5);
  h.move();
  h.commits.schedule();
  h.move();
  h.commits.schedule();
  const t0 = performance.now();
  await h.commits.last();
  // Sooner than the spaced commit would have started, and covering it: nothing is left to send after.
  assert.ok(performance.now() - t0 < COMMIT_SPACING_MS, `last() took ${performance.now() - t0} ms`);
  assert.deepEqual(h.sent, ["1", "2"]);
  // The transport closes after the last commit: the spaced one it replaced must not run after it.
  h.move();
  await sleep(COMMIT_SPACING_MS * 2);
  assert.deepEqual(h.sent, ["1", "2"], "a spaced commit still ran after the last one");
});
