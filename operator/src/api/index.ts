// The ArchivePipeline API: names, zod schemas and types, the key mapping, and the generated CRD.
export * from "./group.ts";
export * from "./keys.ts";
export * from "./spec.ts";
export * from "./crd.ts";
export type { CelRule } from "./cel.ts";
