// The ArchivePipeline API's names: one place, so the CRD, the renderer's owner references and RBAC, and the
// controller's watches cannot disagree.
export const GROUP = "archiver.dfe.io";
export const VERSION = "v1alpha1";
export const API_VERSION = `${GROUP}/${VERSION}`;
export const KIND = "ArchivePipeline";
export const LIST_KIND = "ArchivePipelineList";
export const PLURAL = "archivepipelines";
export const SINGULAR = "archivepipeline";
export const SHORT_NAMES = ["ap"] as const;
export const CRD_NAME = `${PLURAL}.${GROUP}`;
/** The field manager of every write the operator makes (server-side apply). */
export const FIELD_MANAGER = "dfe-archiver-operator";
