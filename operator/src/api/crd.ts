// The ArchivePipeline CRD, generated: its OpenAPI schema is the spec and status zod schemas turned into a
// structural schema, with zod's metadata that is not OpenAPI folded into the descriptions. scripts/generate.ts
// writes it to crds/, and a test fails when the checked-in copy is stale.
import { z } from "zod";
import { stringify } from "yaml";
import { API_VERSION, CRD_NAME, GROUP, KIND, LIST_KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION } from "./group.ts";
import { camelText } from "./keys.ts";
import { specSchema, statusSchema } from "./spec.ts";

/** Where the CRD is checked in, relative to the repository root. */
export const CRD_FILE = `crds/${CRD_NAME}.yaml`;
/** Byte-identical copies, for packagers that read no file outside their own root (Helm's crds/, kustomize). */
export const CRD_COPIES = [`charts/dfe-archiver-operator/crds/${CRD_NAME}.yaml`, `config/crd/bases/${CRD_NAME}.yaml`];

export type JsonSchema = { [key: string]: unknown };

// Defaults the apiserver stores are frozen into every object; only transport keeps one, so its printer column reads
// it. The runtime and the operator apply the rest, and the descriptions name them.
const STORED_DEFAULTS = new Set(["spec.transport"]);
const KEY_ORDER = ["description", "type", "format", "enum", "default"];

function shownDefault(value: unknown): string | undefined {
  if (typeof value === "object" && value !== null && !Array.isArray(value)) return undefined;
  return typeof value === "string" ? value : JSON.stringify(value);
}

function sentence(text: string): string {
  const t = text.trim();
  return t === "" || /[.!?]$/.test(t) ? t : `${t}.`;
}

/** One zod JSON Schema node as a structural OpenAPI v3 node, recursively; `path` names it for STORED_DEFAULTS. */
export function toStructural(node: JsonSchema, path: string): JsonSchema {
  const out: JsonSchema = {};
  let description = typeof node["description"] === "string" ? camelText(node["description"]) : "";
  const notes: string[] = [];
  for (const [key, value] of Object.entries(node)) {
    // env, cli and secret are zod metadata the runtime reads, with no OpenAPI word: env and flags do not set CR
    // fields, and a secret is already a Secret reference here.
    switch (key) {
      case "$schema":
      case "description":
      case "propertyNames":
      case "env":
      case "cli":
      case "secret":
        break;
      case "derivedDefault":
        notes.push(`Default: ${camelText(String(value))}.`);
        break;
      case "default":
        if (STORED_DEFAULTS.has(path)) out[key] = value;
        else {
          const shown = shownDefault(value);
          if (shown !== undefined) notes.push(`Default: ${shown}.`);
        }
        break;
      case "additionalProperties":
        // Structural schemas prune unknown fields instead; a map keeps its value schema.
        if (typeof value === "object" && value !== null) out[key] = toStructural(value as JsonSchema, `${path}.*`);
        break;
      case "properties":
        out[key] = Object.fromEntries(
          Object.entries(value as Record<string, JsonSchema>).map(([k, v]) => [k, toStructural(v, `${path}.${k}`)]),
        );
        break;
      case "items":
        out[key] = toStructural(value as JsonSchema, `${path}[]`);
        break;
      case "minimum":
        if ((value as number) > Number.MIN_SAFE_INTEGER) out[key] = value;
        break;
      case "maximum":
        if ((value as number) < Number.MAX_SAFE_INTEGER) out[key] = value;
        break;
      case "pattern":
        // A date-time's format says it; zod's long pattern for it only adds noise.
        if (node["format"] !== "date-time") out[key] = value;
        break;
      case "anyOf":
        if (node["x-kubernetes-int-or-string"] === true) {
          // The one union a structural schema allows: bare types, the string's pattern lifted to the node.
          out[key] = [{ type: "integer" }, { type: "string" }];
          const str = (value as JsonSchema[]).find((b) => b["type"] === "string");
          if (str?.["pattern"] !== undefined) out["pattern"] = str["pattern"];
        } else throw new Error(`${path}: a union other than int-or-string has no structural form`);
        break;
      default:
        out[key] = value;
    }
  }
  description = [sentence(description), ...notes].filter((t) => t !== "").join(" ");
  if (description !== "") out["description"] = description;
  const ordered: JsonSchema = {};
  for (const key of KEY_ORDER) if (key in out) ordered[key] = out[key];
  for (const [key, value] of Object.entries(out)) if (!(key in ordered)) ordered[key] = value;
  return ordered;
}

function openApi(schema: z.ZodType, path: string): JsonSchema {
  return toStructural(
    z.toJSONSchema(schema, { io: "input", target: "openapi-3.0", reused: "inline" }) as JsonSchema,
    path,
  );
}

const condition = (type: string) => `.status.conditions[?(@.type=="${type}")].status`;

// The runtime's Service is <name>-archiver, a DNS label of at most 63 characters.
const NAME_RULE = {
  rule: "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 54",
  message: "metadata.name must be a DNS label of at most 54 characters: the runtime's Service is named <name>-archiver",
};

/** The CustomResourceDefinition, as an object ready to apply. */
export function crdObject(): JsonSchema {
  return {
    apiVersion: "apiextensions.k8s.io/v1",
    kind: "CustomResourceDefinition",
    metadata: { name: CRD_NAME, labels: { "app.kubernetes.io/name": "dfe-archiver-operator" } },
    spec: {
      group: GROUP,
      names: {
        kind: KIND,
        listKind: LIST_KIND,
        plural: PLURAL,
        singular: SINGULAR,
        shortNames: [...SHORT_NAMES],
        categories: ["dfe"],
      },
      scope: "Namespaced",
      versions: [
        {
          name: VERSION,
          served: true,
          storage: true,
          subresources: { status: {} },
          additionalPrinterColumns: [
            { name: "Transport", type: "string", jsonPath: ".spec.transport" },
            { name: "Destination", type: "string", jsonPath: ".spec.archive.destination" },
            { name: "Ready", type: "string", jsonPath: condition("Ready") },
            { name: "Idle", type: "string", jsonPath: condition("Idle") },
            { name: "Degraded", type: "string", jsonPath: condition("Degraded") },
            { name: "Age", type: "date", jsonPath: ".metadata.creationTimestamp" },
          ],
          schema: {
            openAPIV3Schema: {
              description: `${KIND} runs the dfe-archiver runtime for one pipeline: records from Kafka (or a gRPC Push listener) archived to a file or object-store destination, autoscaled with KEDA. ${API_VERSION}.`,
              type: "object",
              required: ["spec"],
              properties: {
                apiVersion: {
                  description: "APIVersion defines the versioned schema of this representation of an object.",
                  type: "string",
                },
                kind: {
                  description: "Kind is a string value representing the REST resource this object represents.",
                  type: "string",
                },
                metadata: { type: "object" },
                spec: openApi(specSchema, "spec"),
                status: openApi(statusSchema, "status"),
              },
              "x-kubernetes-validations": [NAME_RULE],
            },
          },
        },
      ],
    },
  };
}

/** The CRD file's text: a header naming its source, then the YAML. Deterministic. */
export function crdYaml(): string {
  return `# Generated by scripts/generate.ts from runtime/src/config/schema.ts and operator/src/api/; do not edit.\n${stringify(crdObject(), { lineWidth: 0 })}`;
}
