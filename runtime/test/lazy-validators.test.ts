import assert from "node:assert/strict";
import { test } from "node:test";
import { ajv, baseOptionsSchema, consumerOptionsSchema } from "@platformatic/kafka";
import { compileOnFirstUse, type SchemaCompiler, type Validator } from "../../scripts/lazy-validators.ts";

// The Kafka client's own ajv instance and schemas (its keywords included), eager beside compiled on first use.
test("a client validator compiled on first use accepts, refuses and reports as one compiled at load", () => {
  let compiles = 0;
  const lazy: SchemaCompiler = {
    compile: (schema, meta) => {
      compiles++;
      return ajv.compile(schema as object, meta) as Validator;
    },
  };
  compileOnFirstUse(lazy);
  const cases: [object, unknown[]][] = [
    [consumerOptionsSchema, [{ groupId: "g" }, { groupId: "" }, { groupId: 7, maxWaitTime: "x" }, { groupId: "g" }]],
    [
      baseOptionsSchema,
      [
        { clientId: "c", bootstrapBrokers: [] },
        { clientId: "c", bootstrapBrokers: ["a:1"] },
      ],
    ],
  ];
  for (const [schema, inputs] of cases) {
    const eager = ajv.compile(schema);
    const before = compiles;
    const validate = lazy.compile(schema);
    assert.equal(compiles, before, "compiled before its first use");
    assert.equal(validate.errors, null);
    for (const input of inputs) {
      assert.equal(validate(input), eager(input), JSON.stringify(input));
      assert.deepEqual(validate.errors, eager.errors, JSON.stringify(input));
    }
    assert.equal(compiles, before + 1, "compiled once, however often called");
  }
  // The cases hold both verdicts, so a validator answering one way throughout fails above.
  const both = ajv.compile(consumerOptionsSchema);
  assert.deepEqual(new Set(cases[0]![1].map((i) => both(i))), new Set([true, false]));
});
