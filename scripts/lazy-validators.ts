// The Kafka client (@platformatic/kafka) compiles about 40 JSON schemas of its options with ajv as its modules load,
// 0.16 s of the runtime's start, of which the runtime calls a handful (never its producer's, few of its admin's).
// The build (scripts/build.ts) makes the client's ajv compile each schema on first use instead, and unoptimized: what
// a validator accepts and the errors it reports stay the same, only when and how the schema is compiled change.

/** An ajv validator, as the client calls it: the verdict, then `errors` read for the message. */
export interface Validator {
  (data: unknown): boolean;
  errors?: unknown;
}

/** What of an ajv instance this touches. */
export interface SchemaCompiler {
  compile(schema: unknown, meta?: boolean): Validator;
  readonly opts: { readonly code: { optimize: number }; validateSchema: boolean | "log" };
}

/**
 * From now on, `ajv.compile` returns a validator that compiles its schema the first time it is called, and compiles
 * it without ajv's optimizing pass over the generated code: that pass only folds and drops code (constant conditions,
 * unused names), so a validator accepts and reports the same, and it took a third of each compile (the client's base
 * and consumer schemas: 80 ms compiled with it, 52 without) for validators the client calls on its options, never
 * per record. Nor is a schema checked against JSON Schema's meta-schema before it compiles: the schemas are the
 * client's own constants, and the check compiled the meta-schema first, about 40 ms of the consumer's construction
 * at the runtime's start.
 */
export function compileOnFirstUse(ajv: SchemaCompiler): void {
  ajv.opts.code.optimize = 0;
  ajv.opts.validateSchema = false;
  const compile = ajv.compile.bind(ajv);
  ajv.compile = (schema, meta) => {
    let compiled: Validator | undefined;
    const validate: Validator = (data) => {
      compiled ??= compile(schema, meta);
      const valid = compiled(data);
      validate.errors = compiled.errors;
      return valid;
    };
    validate.errors = null;
    return validate;
  };
}
