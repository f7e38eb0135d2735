// The one mechanical rule between the CR and the runtime: CRD fields are camelCase (Kubernetes API conventions),
// runtime config keys are snake_case (the seed's names). The CRD generator and the renderer both use it, so a spec
// key and the config key it becomes can never be spelled two ways.
import { configShape, objectOf } from "../../../runtime/src/config/schema.ts";
import type { z } from "zod";

/** group_id -> groupId, self_regulation -> selfRegulation, s3 -> s3. */
export function snakeToCamel(key: string): string {
  return key.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase());
}

/** groupId -> group_id; the inverse of snakeToCamel for every runtime key (a test holds it to that). */
export function camelToSnake(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}

/** A dotted runtime key (kafka.topic_include[2]) as its spec path (kafka.topicInclude[2]). */
export function camelKey(dotted: string): string {
  return dotted.replace(/[a-z][a-z0-9_]*/g, snakeToCamel);
}

function keyNames(shape: Record<string, z.ZodType>, out: Set<string>): Set<string> {
  for (const [name, field] of Object.entries(shape)) {
    out.add(name);
    const obj = objectOf(field);
    if (obj) keyNames(obj.shape as Record<string, z.ZodType>, out);
  }
  return out;
}

/** Every key name of the runtime schema, at any depth. */
export const RUNTIME_KEY_NAMES: ReadonlySet<string> = keyNames(configShape, new Set());

// A dotted run of lower-case words, not inside another word, path or URL: a candidate key reference.
const KEY_REFERENCE = /(?<![\w./:-])[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*/g;

/**
 * Prose from the runtime schema with its key references in spec spelling ("re-read every topic_refresh_secs" ->
 * "topicRefreshSecs"), so `kubectl explain` names the fields a user can write. Only a run whose every segment is a
 * runtime key changes; record fields such as _org_id and metric names such as scaling_pressure stay as they are.
 */
export function camelText(text: string): string {
  return text.replace(KEY_REFERENCE, (ref) =>
    ref.split(".").every((s) => RUNTIME_KEY_NAMES.has(s)) ? ref.split(".").map(snakeToCamel).join(".") : ref,
  );
}
