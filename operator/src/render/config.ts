// The runtime's config file, from the spec's runtime part by the mechanical key mapping. It holds only what the spec
// sets, so the runtime applies its own defaults, and never a secret: those reach the pods as Secret references.
import type { V1ConfigMap } from "@kubernetes/client-node";
import { stringify } from "yaml";
import { configShape } from "../../../runtime/src/config/schema.ts";
import type { z } from "zod";
import { toRuntimeKeys, type ArchivePipeline, type ArchivePipelineSpec } from "../api/spec.ts";
import { objectNames, ownedMeta, type KubeObject } from "./meta.ts";

export const CONFIG_DIR = "/etc/dfe-archiver";
export const CONFIG_FILE = "config.yaml";
export const CONFIG_PATH = `${CONFIG_DIR}/${CONFIG_FILE}`;

/** The runtime config (snake_case keys) a spec describes, without its secrets or the keys the operator sets. */
export function specToRuntimeConfig(spec: ArchivePipelineSpec): Record<string, unknown> {
  return toRuntimeKeys(spec as Record<string, unknown>, configShape as Record<string, z.ZodType>, [], "drop");
}

export function renderConfigMap(cr: ArchivePipeline): V1ConfigMap & KubeObject {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: ownedMeta(cr, objectNames(cr.metadata.name).config),
    data: { [CONFIG_FILE]: stringify(specToRuntimeConfig(cr.spec), { lineWidth: 0 }) },
  };
}
