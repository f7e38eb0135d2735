// The Kafka client (@platformatic/kafka) compiles about 40 JSON schemas of its options with ajv as its modules load,
// 0.16 s of the runtime's start, of which the runtime calls a handful (never its producer's, few of its admin's).
// The build (scripts/build.ts) makes the client's ajv compile each schema on first use instead: what a validator
// accepts and the errors it reports stay the same, only when the schema is compiled moves.

/** An ajv validator, as the client calls it: the verdict, then `errors` read for the message. */
export interface Validator {
  (data: unknown): boolean;
  errors?: unknown;
}

/** What of an ajv instance this touches. */
export interface SchemaCompiler {
  compile(schema: unknown, meta?: boolean): Validator;
}

/** From now on, `ajv.compile` returns a validator that compiles its schema the first time it is called. */
export function compileOnFirstUse(ajv: SchemaCompiler): void {
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
