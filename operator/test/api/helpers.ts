// Shared by the operator's tests: a runtime config spelled as a spec (independently of the code under test), a
// pipeline object around a spec, and a walk over a generated OpenAPI schema.
import type { ArchivePipeline, ArchivePipelineSpec } from "../../src/api/spec.ts";

/** Every object key of a runtime config turned camelCase, by a rule written here rather than imported. */
export function camelize(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(camelize);
  if (typeof value !== "object" || value === null) return value;
  return Object.fromEntries(
    Object.entries(value).map(([k, v]) => [
      k
        .split("_")
        .map((p, i) => (i === 0 ? p : p.charAt(0).toUpperCase() + p.slice(1)))
        .join(""),
      camelize(v),
    ]),
  );
}

export const UID = "6f1c2a4e-2b1d-4c5e-9f00-0123456789ab";

export function pipeline(spec: ArchivePipelineSpec, name = "events", namespace = "dfe"): ArchivePipeline {
  return {
    apiVersion: "archiver.dfe.io/v1alpha1",
    kind: "ArchivePipeline",
    metadata: { name, namespace, uid: UID, generation: 1 },
    spec,
  };
}

export type Node = { [key: string]: unknown };

/** Every node of an OpenAPI schema, depth first, with its path (spec.archive.s3, spec.kafka.brokers[]). */
export function* schemaNodes(node: Node, path: string): Generator<[string, Node]> {
  yield [path, node];
  const props = node["properties"] as Record<string, Node> | undefined;
  for (const [k, v] of Object.entries(props ?? {})) yield* schemaNodes(v, `${path}.${k}`);
  if (node["items"] !== undefined) yield* schemaNodes(node["items"] as Node, `${path}[]`);
  const extra = node["additionalProperties"];
  if (typeof extra === "object" && extra !== null) yield* schemaNodes(extra as Node, `${path}.*`);
}

/** The node at a dotted path of properties under `root`, or undefined. */
export function nodeAt(root: Node, path: string): Node | undefined {
  let node: Node | undefined = root;
  for (const seg of path.split(".").filter((s) => s !== ""))
    node = (node?.["properties"] as Record<string, Node> | undefined)?.[seg];
  return node;
}
