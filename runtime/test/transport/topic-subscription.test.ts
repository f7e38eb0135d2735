// The refresher both Kafka clients share, driven by a scripted client: when it applies a selection, what a failed list
// or apply leaves, the once-only wait log, refreshSoon and stop. (The clients themselves: subscription.test.ts.)
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { Writable } from "node:stream";
import { setTimeout as sleep } from "node:timers/promises";
import { pino } from "pino";
import { createMetrics } from "../../src/observe/metrics.ts";
import { discoveryRules, type TopicChange } from "../../src/transport/discovery.ts";
import { TopicSubscription, type TopicSource } from "../../src/transport/subscription.ts";
import { waitFor } from "../../../e2e/support/archiver.ts";

const rules = discoveryRules({ topic_exclude: ["^_"], transformed_topic_suffixes: ["_transformed"] });

interface Scripted {
  readonly sub: TopicSubscription;
  /** What the broker lists; an Error makes list() fail. */
  broker: string[] | Error;
  /** Makes the next apply() fail, after running this. */
  failNextApply: (() => void) | undefined;
  readonly applied: { topics: readonly string[]; change: TopicChange }[];
  lists: number;
  gauge(): Promise<number>;
  logged(msg: string): number;
}

function scripted(t: TestContext, topics: TopicSource, applyMs = 0): Scripted {
  const lines: { msg: string }[] = [];
  const out = new Writable({
    write(chunk: Buffer, _enc, cb) {
      for (const l of chunk.toString().split("\n")) if (l !== "") lines.push(JSON.parse(l) as { msg: string });
      cb();
    },
  });
  const metrics = createMetrics({ defaultMetrics: false });
  const s: Scripted = {
    broker: [],
    failNextApply: undefined,
    applied: [],
    lists: 0,
    gauge: async () => (await metrics.topicsSubscribed.get()).values[0]?.value ?? -1,
    logged: (msg) => lines.filter((l) => l.msg === msg).length,
    sub: new TopicSubscription(
      { topics, log: pino({ level: "info" }, out), topicsSubscribed: metrics.topicsSubscribed },
      {
        list: async () => {
          s.lists++;
          if (s.broker instanceof Error) throw s.broker;
          return [...s.broker];
        },
        apply: async (topics, change) => {
          if (applyMs > 0) await sleep(applyMs);
          const fail = s.failNextApply;
          if (fail !== undefined) {
            s.failNextApply = undefined;
            fail();
            throw new Error("apply refused");
          }
          s.applied.push({ topics, change });
        },
      },
    ),
  };
  t.after(() => s.sub.stop());
  return s;
}

const discover = (refreshMs: number): TopicSource => ({ rules, refreshMs });
const until = (what: string, cond: () => boolean) => waitFor(cond, 10_000, () => `timed out waiting for ${what}`);

test("a fixed list is applied once and never listed", async (t) => {
  const s = scripted(t, ["b", "a"]);
  await s.sub.start();
  await sleep(100);
  assert.deepEqual(s.applied, [{ topics: ["b", "a"], change: { added: ["b", "a"], removed: [] } }]);
  assert.equal(s.lists, 0);
  assert.equal(s.sub.discovering, false);
  assert.equal(await s.gauge(), 2);
  s.sub.refreshSoon();
  await sleep(1200);
  assert.equal(s.lists, 0, "refreshSoon lists nothing for a fixed list");
});

test("discovery applies the first selection at start, then each change, and an unchanged selection never", async (t) => {
  const s = scripted(t, discover(30));
  s.broker = ["__consumer_offsets", "a", "a_transformed"];
  await s.sub.start();
  assert.deepEqual(s.applied, [{ topics: ["a"], change: { added: ["a"], removed: [] } }]);
  await until("a few refreshes", () => s.lists >= 4);
  assert.equal(s.applied.length, 1, "an unchanged selection is applied again");

  s.broker = ["a", "b"];
  await until("the change", () => s.applied.length === 2);
  assert.deepEqual(s.applied[1], { topics: ["a", "b"], change: { added: ["b"], removed: [] } });
  s.broker = ["b"];
  await until("the removal", () => s.applied.length === 3);
  assert.deepEqual(s.applied[2], { topics: ["b"], change: { added: [], removed: ["a"] } });
  assert.deepEqual(s.sub.topics, ["b"]);
  assert.equal(await s.gauge(), 1);
  assert.equal(s.logged("subscribed"), 1);
  assert.equal(s.logged("subscription changed"), 2);
});

test("a failed apply is retried, even once the selection is back to what was applied before", async (t) => {
  const s = scripted(t, discover(30));
  s.broker = ["a"];
  await s.sub.start();
  // The apply of ["a", "b"] fails and the broker is back to ["a"] by the next refresh: the client's subscription is
  // unknown after the failure, so ["a"] is applied again although it was the last selection applied.
  s.failNextApply = () => (s.broker = ["a"]);
  s.broker = ["a", "b"];
  await until("the selection applied again", () => s.applied.length === 2);
  assert.deepEqual(s.applied[1]?.topics, ["a"]);
  assert.deepEqual(s.sub.topics, ["a"]);
  assert.equal(s.logged("topic discovery failed; trying again"), 1);
});

test("a failed list changes nothing and is tried again", async (t) => {
  const s = scripted(t, discover(30));
  s.broker = ["a"];
  await s.sub.start();
  s.broker = new Error("broker away");
  await until("failed lists", () => s.logged("topic discovery failed; trying again") >= 2);
  assert.deepEqual(s.sub.topics, ["a"]);
  assert.equal(s.applied.length, 1);
  s.broker = ["a", "c"];
  await until("the change once the broker answers", () => s.applied.length === 2);
});

test("a start whose list fails fails, and nothing is applied", async (t) => {
  const s = scripted(t, discover(30));
  s.broker = new Error("broker away");
  await assert.rejects(s.sub.start(), /broker away/);
  assert.equal(s.applied.length, 0);
});

test("nothing to consume is applied and logged once, however many refreshes find nothing", async (t) => {
  const s = scripted(t, discover(30));
  s.broker = ["_schemas"];
  await s.sub.start();
  await until("a few refreshes", () => s.lists >= 5);
  assert.deepEqual(s.applied, [{ topics: [], change: { added: [], removed: [] } }]);
  assert.equal(s.logged("no topic to consume: waiting for discovery to find one"), 1);
  assert.equal(await s.gauge(), 0);
  s.broker = ["x"];
  await until("the topic that appears", () => s.applied.length === 2);
  s.broker = [];
  await until("the last topic gone", () => s.applied.length === 3);
  assert.equal(s.logged("no topic to consume: waiting for discovery to find one"), 2, "once more after it emptied");
});

test("refreshSoon lists again well before the interval", async (t) => {
  const s = scripted(t, discover(60_000));
  s.broker = ["a"];
  await s.sub.start();
  s.broker = ["a", "b"];
  s.sub.refreshSoon();
  await until("the early refresh", () => s.applied.length === 2);
});

test("stop waits for an apply in progress, and nothing is applied after it", async (t) => {
  const s = scripted(t, discover(30), 300);
  s.broker = ["a"];
  await s.sub.start();
  s.broker = ["a", "b"];
  await until("a refresh under way", () => s.lists >= 2);
  await s.sub.stop();
  const applied = s.applied.length;
  assert.equal(applied, 2, "the apply in progress finished before stop resolved");
  s.broker = ["c"];
  await sleep(300);
  assert.equal(s.applied.length, applied);
});
