// What every rendered object shares: its name, its labels, and an owner reference to its pipeline, so deleting the
// pipeline removes them and the controller's watches map them back to it.
import type { V1ObjectMeta, V1OwnerReference } from "@kubernetes/client-node";
import { API_VERSION, FIELD_MANAGER, GROUP, KIND } from "../api/group.ts";
import type { ArchivePipeline } from "../api/spec.ts";

export const APP_NAME = "dfe-archiver";
export const PIPELINE_LABEL = `${GROUP}/pipeline`;

/** Metadata of an object the renderer produces: always named, namespaced, labelled and owned. */
export type OwnedMeta = V1ObjectMeta & {
  name: string;
  namespace: string;
  labels: Record<string, string>;
  ownerReferences: V1OwnerReference[];
};

/** A desired object, ready for server-side apply. */
export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: OwnedMeta;
  [field: string]: unknown;
}

/** Names of the objects one pipeline owns. */
export function objectNames(pipeline: string): { workload: string; config: string } {
  return { workload: `${pipeline}-archiver`, config: `${pipeline}-archiver-config` };
}

/** The labels the Deployment selects its pods by; never changed after creation, since a selector is immutable. */
export function selectorLabels(pipeline: string): Record<string, string> {
  return { "app.kubernetes.io/name": APP_NAME, "app.kubernetes.io/instance": pipeline };
}

export function labels(pipeline: string): Record<string, string> {
  return {
    ...selectorLabels(pipeline),
    "app.kubernetes.io/managed-by": FIELD_MANAGER,
    [PIPELINE_LABEL]: pipeline,
  };
}

export function ownerReference(cr: ArchivePipeline): V1OwnerReference {
  return {
    apiVersion: API_VERSION,
    kind: KIND,
    name: cr.metadata.name,
    uid: cr.metadata.uid,
    controller: true,
    blockOwnerDeletion: true,
  };
}

export function ownedMeta(cr: ArchivePipeline, name: string, annotations?: Record<string, string>): OwnedMeta {
  return {
    name,
    namespace: cr.metadata.namespace,
    labels: labels(cr.metadata.name),
    ...(annotations && Object.keys(annotations).length > 0 ? { annotations } : {}),
    ownerReferences: [ownerReference(cr)],
  };
}
