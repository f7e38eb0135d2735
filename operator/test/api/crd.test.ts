import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, it } from "node:test";
import { dumpYaml, loadYaml, type V1CustomResourceDefinition } from "@kubernetes/client-node";
import { parse } from "yaml";
import { CONFIG_LEAVES } from "../../../runtime/src/config/schema.ts";
import { CRD_FILE, crdObject, crdYaml } from "../../src/api/crd.ts";
import { CRD_NAME, GROUP, KIND, PLURAL, VERSION } from "../../src/api/group.ts";
import { RUNTIME_KEY_NAMES, camelKey } from "../../src/api/keys.ts";
import { OPERATOR_OWNED_KEYS, SECRET_KEYS } from "../../src/api/spec.ts";
import { nodeAt, schemaNodes, type Node } from "./helpers.ts";

const SNAKE_NAMES = [...RUNTIME_KEY_NAMES].filter((n) => n.includes("_"));
const ROOT = resolve(import.meta.dirname, "../../..");
const FIX = "run `node_modules/.bin/node scripts/generate.ts`";

type Version = {
  name: string;
  schema: { openAPIV3Schema: Node };
  subresources: Record<string, unknown>;
  additionalPrinterColumns: { name: string; type: string; jsonPath: string }[];
};
const crd = crdObject() as {
  metadata: { name: string };
  spec: { group: string; scope: string; names: Record<string, unknown>; versions: Version[] };
};
const version = crd.spec.versions[0]!;
const root = version.schema.openAPIV3Schema;
const spec = nodeAt(root, "spec")!;
const status = nodeAt(root, "status")!;

describe("the CRD file", () => {
  it("is current", () => {
    const path = join(ROOT, CRD_FILE);
    assert.ok(existsSync(path), `${CRD_FILE} is missing: ${FIX}`);
    assert.equal(readFileSync(path, "utf8"), crdYaml(), `${CRD_FILE} is stale: ${FIX}`);
  });

  it("is generated deterministically", () => {
    assert.equal(crdYaml(), crdYaml());
    assert.deepEqual(parse(crdYaml()), crdObject());
  });

  it("survives the Kubernetes client's typed model unchanged", () => {
    // A field the model drops is one the apiserver would never see from a typed client.
    const typed = loadYaml<V1CustomResourceDefinition>(crdYaml());
    assert.deepEqual(parse(dumpYaml(typed)), crdObject());
  });
});

describe("the CRD", () => {
  it("names the API", () => {
    assert.equal(crd.metadata.name, CRD_NAME);
    assert.equal(crd.metadata.name, "archivepipelines.archiver.dfe.io");
    assert.equal(crd.spec.group, GROUP);
    assert.equal(crd.spec.scope, "Namespaced");
    assert.deepEqual(crd.spec.names["shortNames"], ["ap"]);
    assert.equal(crd.spec.names["kind"], KIND);
    assert.equal(crd.spec.names["plural"], PLURAL);
    assert.equal(version.name, VERSION);
    assert.deepEqual(version.subresources, { status: {} });
  });

  it("prints transport, destination, the three conditions and age", () => {
    assert.deepEqual(
      version.additionalPrinterColumns.map((c) => [c.name, c.jsonPath]),
      [
        ["Transport", ".spec.transport"],
        ["Destination", ".spec.archive.destination"],
        ["Ready", '.status.conditions[?(@.type=="Ready")].status'],
        ["Idle", '.status.conditions[?(@.type=="Idle")].status'],
        ["Degraded", '.status.conditions[?(@.type=="Degraded")].status'],
        ["Age", ".metadata.creationTimestamp"],
      ],
    );
  });

  it("describes every field, for kubectl explain", () => {
    for (const part of [spec, status])
      for (const [path, node] of schemaNodes(part, "")) {
        if (path.endsWith("[]") || path.endsWith(".*")) continue;
        assert.ok(
          typeof node["description"] === "string" && node["description"].length > 10,
          `${path} has no description`,
        );
      }
  });

  it("is a structural schema with no zod-only metadata", () => {
    for (const [path, node] of schemaNodes(root, "")) {
      for (const key of ["env", "cli", "secret", "derivedDefault", "$schema", "propertyNames"])
        assert.ok(!(key in node), `${path} carries ${key}`);
      if (node["anyOf"] !== undefined) assert.equal(node["x-kubernetes-int-or-string"], true, `${path} has anyOf`);
      else assert.ok(typeof node["type"] === "string", `${path} has no type`);
      if ("additionalProperties" in node) assert.ok(!("properties" in node), `${path} has both`);
      if ("default" in node) assert.equal(path, ".spec.transport", `${path} has a stored default`);
      if (node["type"] === "integer") {
        for (const bound of ["minimum", "maximum"] as const)
          if (typeof node[bound] === "number") assert.ok(Math.abs(node[bound] as number) < Number.MAX_SAFE_INTEGER);
      }
    }
  });

  it("holds every runtime key at its camelCase path, states its default, and spells references camelCase", () => {
    for (const leaf of CONFIG_LEAVES) {
      const node = nodeAt(spec, camelKey(leaf.key));
      if ((OPERATOR_OWNED_KEYS as readonly string[]).includes(leaf.key)) {
        assert.equal(node, undefined, leaf.key);
        continue;
      }
      assert.ok(node, `spec.${camelKey(leaf.key)} is missing`);
      for (const name of SNAKE_NAMES)
        assert.doesNotMatch(String(node["description"]), new RegExp(`(?<![\\w.])${name}\\b`), `${leaf.key}: ${name}`);
    }
    assert.match(String(nodeAt(spec, "archive.multipartChunkSize")?.["description"]), /Default: 8388608\./);
    assert.match(String(nodeAt(spec, "archive.rollIntervalSecs")?.["description"]), /Default: 300 while offsets/);
  });

  it("takes every secret as a Secret reference, never as a value", () => {
    for (const key of SECRET_KEYS) {
      const node = nodeAt(spec, camelKey(key));
      assert.equal(node?.["type"], "object", key);
      assert.deepEqual(node?.["required"], ["secretKeyRef"], key);
      const ref = nodeAt(node!, "secretKeyRef")!;
      assert.deepEqual(ref["required"], ["name", "key"], key);
      assert.deepEqual(Object.keys(ref["properties"] as object), ["name", "key"], key);
    }
  });

  it("keys conditions by type and pod reports by name, with no phase", () => {
    const conditions = nodeAt(status, "conditions")!;
    assert.equal(conditions["x-kubernetes-list-type"], "map");
    assert.deepEqual(conditions["x-kubernetes-list-map-keys"], ["type"]);
    assert.deepEqual((conditions["items"] as Node)["required"], [
      "type",
      "status",
      "lastTransitionTime",
      "reason",
      "message",
    ]);
    const pods = nodeAt(status, "pods")!;
    assert.deepEqual(pods["x-kubernetes-list-map-keys"], ["name"]);
    assert.ok(((pods["items"] as Node)["required"] as string[]).includes("name"));
    assert.deepEqual(nodeAt(pods["items"] as Node, "state")?.["enum"], ["Running", "Idle", "Degraded"]);
    assert.deepEqual(Object.keys(status["properties"] as object).sort(), [
      "conditions",
      "observedGeneration",
      "pods",
      "readyReplicas",
    ]);
  });

  it("points every CEL rule's fieldPath at a field it declares", () => {
    let rules = 0;
    for (const [path, node] of schemaNodes(root, "")) {
      for (const r of (node["x-kubernetes-validations"] as { rule: string; fieldPath?: string }[] | undefined) ?? []) {
        rules++;
        if (r.fieldPath !== undefined) assert.ok(nodeAt(node, r.fieldPath.slice(1)), `${path}: ${r.fieldPath}`);
      }
    }
    assert.ok(rules >= 15, `only ${rules} rules`);
    const destination = nodeAt(spec, "archive.destination")!;
    assert.ok((destination["x-kubernetes-validations"] as unknown[]).length >= 3);
    assert.equal(nodeAt(spec, "archive.multipartChunkSize")?.["minimum"], 5 * 1024 * 1024);
  });
});
