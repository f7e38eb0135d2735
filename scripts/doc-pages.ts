// Where each generated block of the documentation lives: one page under docs/ per block, so the README stays short
// and a reference stays whole. scripts/generate.ts writes them; e2e/support/docs.ts fails a test when one is stale.
import { CONFIG_TABLE, type GeneratedBlock } from "../runtime/src/config/docs.ts";
import { METRICS_TABLE } from "../runtime/src/observe/docs.ts";
import { CR_FIELDS } from "../operator/src/api/docs.ts";

/** A page holding one generated block between its markers, the rest of it written by hand. */
export interface GeneratedPage {
  /** Path from the repository's root. */
  readonly file: string;
  readonly block: GeneratedBlock;
}

export const CONFIG_PAGE: GeneratedPage = { file: "docs/configuration.md", block: CONFIG_TABLE };
export const FIELDS_PAGE: GeneratedPage = { file: "docs/archivepipeline.md", block: CR_FIELDS };
export const METRICS_PAGE: GeneratedPage = { file: "docs/metrics.md", block: METRICS_TABLE };

export const GENERATED_PAGES: readonly GeneratedPage[] = [CONFIG_PAGE, FIELDS_PAGE, METRICS_PAGE];
