// Server-side apply of the rendered objects, as the operator's field manager, forcing the fields it owns. A write is
// skipped when the live object carries the hash of exactly this desired object: level-based reconciles then leave
// every resourceVersion alone, and Argo CD or a watcher sees no churn.
import { createHash } from "node:crypto";
import { ApiException, PatchStrategy, type KubernetesObject, type KubernetesObjectApi } from "@kubernetes/client-node";
import { FIELD_MANAGER, GROUP } from "../api/group.ts";
import type { KubeObject } from "../render/index.ts";

/** Annotation on every applied object: a hash of the desired object it was last applied from. */
export const APPLIED_HASH_ANNOTATION = `${GROUP}/applied-hash`;

function canonical(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(canonical);
  if (typeof value !== "object" || value === null) return value;
  return Object.fromEntries(
    Object.keys(value)
      .sort()
      .map((k) => [k, canonical((value as Record<string, unknown>)[k])]),
  );
}

/** A hash of a desired object, independent of its keys' order. */
export function appliedHash(obj: KubeObject): string {
  return createHash("sha256")
    .update(JSON.stringify(canonical(obj)))
    .digest("hex")
    .slice(0, 32);
}

export function isNotFound(err: unknown): boolean {
  return err instanceof ApiException && err.code === 404;
}

export interface Applied {
  object: KubernetesObject;
  /** False when the live object already held this desired object and nothing was sent. */
  written: boolean;
}

export class Applier {
  readonly #objects: KubernetesObjectApi;

  constructor(objects: KubernetesObjectApi) {
    this.#objects = objects;
  }

  async apply(desired: KubeObject): Promise<Applied> {
    const hash = appliedHash(desired);
    const { apiVersion, kind } = desired;
    const { name, namespace } = desired.metadata;
    const live = await this.#objects.read({ apiVersion, kind, metadata: { name, namespace } }).catch((e: unknown) => {
      if (isNotFound(e)) return undefined;
      throw e;
    });
    if (live?.metadata?.annotations?.[APPLIED_HASH_ANNOTATION] === hash) return { object: live, written: false };
    const body: KubeObject = {
      ...desired,
      metadata: {
        ...desired.metadata,
        annotations: { ...desired.metadata.annotations, [APPLIED_HASH_ANNOTATION]: hash },
      },
    };
    const object = await this.#objects.patch(
      body as KubernetesObject,
      undefined,
      undefined,
      FIELD_MANAGER,
      true,
      PatchStrategy.ServerSideApply,
    );
    return { object, written: true };
  }

  /** Applies in order (the renderer's order: RBAC and config before the workload that uses them). */
  async applyAll(desired: readonly KubeObject[]): Promise<Applied[]> {
    const out: Applied[] = [];
    for (const obj of desired) out.push(await this.apply(obj));
    return out;
  }
}
