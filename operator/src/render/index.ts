// The resource model: every object one ArchivePipeline needs, rendered from its spec in one pure place. The
// reconciler only applies what this returns and watches it.
import { ConfigFaultsError } from "../../../runtime/src/config/validate.ts";
import { validateSpec, type ArchivePipeline, type ResolvedSpec } from "../api/spec.ts";
import { renderConfigMap } from "./config.ts";
import { renderScaledObject } from "./keda.ts";
import type { KubeObject } from "./meta.ts";
import { renderDeployment, renderRole, renderRoleBinding, renderService, renderServiceAccount } from "./workload.ts";

export { specToRuntimeConfig, renderConfigMap, CONFIG_PATH } from "./config.ts";
export { renderScaledObject, type ScaledObject, type ScaledObjectTrigger } from "./keda.ts";
export { objectNames, labels, selectorLabels, ownerReference, type KubeObject, type OwnedMeta } from "./meta.ts";
export {
  renderDeployment,
  renderRole,
  renderRoleBinding,
  renderService,
  renderServiceAccount,
  secretHash,
  METRICS_PORT,
  SECRET_HASH_ANNOTATION,
} from "./workload.ts";

export interface RenderOptions {
  /** The runtime image, unless the spec names one. */
  image: string;
  /** Whether KEDA's ScaledObject CRD is served; without it the Deployment runs spec.replicas pods. */
  kedaInstalled: boolean;
  /** A hash of each referenced Secret's data, by Secret name. */
  secretHashes: Readonly<Record<string, string>>;
}

/** The spec with its defaults, or a ConfigFaultsError listing every fault (spec paths) for a Degraded condition. */
export function resolveSpec(cr: ArchivePipeline): ResolvedSpec {
  const v = validateSpec(cr.spec);
  if ("faults" in v) throw new ConfigFaultsError(v.faults);
  return v.spec;
}

/** Every desired object of a pipeline, in apply order; throws a ConfigFaultsError for a spec the runtime would refuse. */
export function renderAll(cr: ArchivePipeline, opts: RenderOptions): KubeObject[] {
  const spec = resolveSpec(cr);
  const kedaManaged = opts.kedaInstalled && spec.keda.enabled;
  return [
    renderServiceAccount(cr, spec),
    renderRole(cr),
    renderRoleBinding(cr),
    renderConfigMap(cr),
    renderService(cr, spec),
    renderDeployment(cr, spec, { image: opts.image, kedaManaged, secretHashes: opts.secretHashes }),
    ...(kedaManaged ? [renderScaledObject(cr, spec)] : []),
  ];
}
