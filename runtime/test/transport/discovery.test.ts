// Discovery's selection: exclude, include, the landing-over-transformed rule, and the resolved config's defaults.
import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { parseConfigText } from "../../src/config/load.ts";
import { discoveryRules, selectTopics, topicChange, type DiscoveryRules } from "../../src/transport/discovery.ts";

const SUFFIXES = ["_transformed", ".transformed", "-transformed"];

function rules(over: Partial<{ include: string[]; exclude: string[]; suffixes: string[] }> = {}): DiscoveryRules {
  return discoveryRules({
    topic_include: over.include,
    topic_exclude: over.exclude ?? [],
    transformed_topic_suffixes: over.suffixes ?? SUFFIXES,
  });
}

/** The rules a config text resolves to, as the transport factory builds them. */
function rulesOf(yaml: string): DiscoveryRules {
  return discoveryRules(parseConfigText(yaml, { env: {}, sourceName: "test.yaml" }).config.kafka);
}

test("the default exclusions drop the DLQ topic and internal topics, and nothing else", () => {
  const broker = ["__consumer_offsets", "__transaction_state", "_schemas", "dfe-archiver-dlq", "events", "logs"];
  assert.deepEqual(selectTopics(broker, rulesOf("archive: { destination: file:///tmp/a }\n")), ["events", "logs"]);
});

test("the default excludes the DLQ topic dlq.topic names, matched whole and literally", () => {
  const r = rulesOf("archive: { destination: file:///tmp/a }\ndlq: { topic: dead.letters }\n");
  assert.deepEqual(selectTopics(["dead.letters", "deadXletters", "dead.letters.old", "dfe-archiver-dlq"], r), [
    "dead.letters.old",
    "deadXletters",
    "dfe-archiver-dlq",
  ]);
});

test("a set topic_exclude replaces the default", () => {
  const r = rulesOf('archive: { destination: file:///tmp/a }\nkafka: { topic_exclude: ["^test-"] }\n');
  assert.deepEqual(selectTopics(["test-a", "dfe-archiver-dlq", "events", "_schemas"], r), [
    "_schemas",
    "dfe-archiver-dlq",
    "events",
  ]);
});

test("topic_include narrows what topic_exclude keeps: any one pattern admits a topic", () => {
  const r = rules({ include: ["^acme\\.", "^globex$"], exclude: ["\\.tmp$"] });
  assert.deepEqual(selectTopics(["acme.events", "acme.scratch.tmp", "globex", "globex2", "initech.events"], r), [
    "acme.events",
    "globex",
  ]);
});

test("an include matching nothing selects nothing; an empty broker selects nothing", () => {
  assert.deepEqual(selectTopics(["a", "b"], rules({ include: ["^zzz"] })), []);
  assert.deepEqual(selectTopics([], rules()), []);
});

test("exclude wins over include", () => {
  assert.deepEqual(selectTopics(["acme.a", "acme.b"], rules({ include: ["^acme"], exclude: ["\\.b$"] })), ["acme.a"]);
});

test("of a landing topic and its transformed twin, only the landing one, for every suffix", () => {
  for (const s of SUFFIXES) {
    assert.deepEqual(selectTopics(["events", `events${s}`, "logs"], rules()), ["events", "logs"], s);
  }
});

test("a transformed topic whose landing topic does not exist is kept", () => {
  assert.deepEqual(selectTopics(["events_transformed", "logs", "logs-transformed"], rules()), [
    "events_transformed",
    "logs",
  ]);
});

test("a transformed topic whose landing topic the filters drop is kept: the twin rule looks at kept topics only", () => {
  assert.deepEqual(selectTopics(["events", "events_transformed"], rules({ exclude: ["^events$"] })), [
    "events_transformed",
  ]);
  assert.deepEqual(selectTopics(["events", "events_transformed"], rules({ include: ["_transformed$"] })), [
    "events_transformed",
  ]);
});

test("the suffix must end the name and follow a landing name exactly", () => {
  const broker = ["events", "events_transformed_v2", "events_transformedx", "events__transformed", "_transformed"];
  assert.deepEqual(selectTopics(broker, rules()), [...broker].sort());
  // events__transformed is the twin of events_ (which exists), not of events.
  assert.deepEqual(selectTopics(["events_", "events__transformed"], rules()), ["events_"]);
});

test("suffixes are configurable: none turns the rule off, a custom one is matched case-sensitively", () => {
  assert.deepEqual(selectTopics(["a", "a_transformed"], rules({ suffixes: [] })), ["a", "a_transformed"]);
  assert.deepEqual(selectTopics(["a", "a.enriched", "a.ENRICHED"], rules({ suffixes: [".enriched"] })), [
    "a",
    "a.ENRICHED",
  ]);
});

test("a chain of suffixes drops every derived topic", () => {
  assert.deepEqual(selectTopics(["a", "a_transformed", "a_transformed.transformed"], rules()), ["a"]);
});

test("the selection is sorted and free of duplicates whatever the broker's order", () => {
  assert.deepEqual(selectTopics(["c", "a", "b", "a"], rules()), ["a", "b", "c"]);
});

test("topicChange lists what is added and what is removed", () => {
  assert.deepEqual(topicChange(["a", "b"], ["b", "c"]), { added: ["c"], removed: ["a"] });
  assert.deepEqual(topicChange([], ["a"]), { added: ["a"], removed: [] });
  assert.deepEqual(topicChange(["a"], []), { added: [], removed: ["a"] });
  assert.deepEqual(topicChange(["a"], ["a"]), { added: [], removed: [] });
});

const topicName = fc.stringMatching(/^[a-c._-]{1,6}$/);

test("property: the selection is exactly the kept topics minus those whose landing twin is kept", () => {
  fc.assert(
    fc.property(
      fc.array(
        fc.oneof(
          topicName,
          topicName.map((t) => `${t}_transformed`),
        ),
        { maxLength: 30 },
      ),
      fc.option(fc.constantFrom("^a", "b", "c$"), { nil: undefined }),
      fc.constantFrom("^_", "\\.", "zz"),
      (broker, include, exclude) => {
        const r = rules({ include: include === undefined ? undefined : [include], exclude: [exclude] });
        const got = selectTopics(broker, r);
        const kept = new Set(
          broker.filter((t) => !new RegExp(exclude).test(t) && (include === undefined || new RegExp(include).test(t))),
        );
        assert.deepEqual(got, [...got].sort(), "sorted");
        assert.equal(new Set(got).size, got.length, "no duplicates");
        for (const t of got) assert.ok(kept.has(t), `${t} passes the filters`);
        for (const t of kept) {
          const twinOf = SUFFIXES.filter((s) => t.length > s.length && t.endsWith(s)).map((s) => t.slice(0, -s.length));
          const dropped = twinOf.some((l) => kept.has(l));
          assert.equal(got.includes(t), !dropped, `${t}: dropped exactly when its landing topic is kept`);
        }
      },
    ),
  );
});
