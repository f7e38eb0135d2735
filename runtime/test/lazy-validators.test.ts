import assert from "node:assert/strict";
import { test } from "node:test";
import { ajv, baseOptionsSchema, consumerOptionsSchema } from "@platformatic/kafka";
import { compileOnFirstUse, type SchemaCompiler, type Validator } from "../../scripts/lazy-validators.ts";

// The Kafka client's own ajv instance and schemas (its keywords included): compiled at load as the client does,
// beside compiled on first use without ajv's optimizing pass, as the build makes it.
test("a client validator compiled on first use, unoptimized, accepts, refuses and reports as one compiled at load", () => {
  const cases: [object, unknown[]][] = [
    [
      consumerOptionsSchema,
      [{ groupId: "g" }, { groupId: "" }, { groupId: 7, maxWaitTime: "x" }, { groupId: "g", sessionTimeout: -1 }],
    ],
    [
      baseOptionsSchema,
      [
        { clientId: "c", bootstrapBrokers: [] },
        { clientId: "c", bootstrapBrokers: ["a:1"] },
        { clientId: "c", bootstrapBrokers: ["a:1"], timeout: "soon", retries: -2 },
      ],
    ],
  ];
  const eager = cases.map(([schema]) => ajv.compile(schema));
  let compiles = 0;
  const lazy: SchemaCompiler = {
    opts: ajv.opts,
    compile: (schema, meta) => {
      compiles++;
      // A copy: ajv keeps what it compiled by the schema object, and would hand back the validator compiled above.
      return ajv.compile(structuredClone(schema) as object, meta) as Validator;
    },
  };
  compileOnFirstUse(lazy);
  assert.equal(ajv.opts.code.optimize, 0);
  assert.equal(ajv.opts.validateSchema, false);
  cases.forEach(([schema, inputs], i) => {
    const before = compiles;
    const validate = lazy.compile(schema);
    assert.equal(compiles, before, "compiled before its first use");
    assert.equal(validate.errors, null);
    for (const input of inputs) {
      assert.equal(validate(input), eager[i]!(input), JSON.stringify(input));
      assert.deepEqual(validate.errors, eager[i]!.errors, JSON.stringify(input));
    }
    assert.equal(compiles, before + 1, "compiled once, however often called");
  });
  // The cases hold both verdicts, so a validator answering one way throughout fails above.
  for (const [i, [, inputs]] of cases.entries()) {
    assert.deepEqual(new Set(inputs.map((input) => eager[i]!(input))), new Set([true, false]));
  }
});
