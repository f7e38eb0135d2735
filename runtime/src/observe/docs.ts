// The metrics table of docs/metrics.md, generated from the registry createMetrics builds, so a metric added, renamed
// or relabelled there cannot be missed in the docs: scripts/generate.ts writes it, and a test fails when it is stale.
import type { MetricObject } from "prom-client";
import type { GeneratedBlock } from "../config/docs.ts";
import { createMetrics } from "./metrics.ts";

// prom-client's metric objects carry these at runtime; its type declarations do not name them.
type Described = MetricObject & { labelNames?: readonly string[]; upperBounds?: readonly number[] };

const cell = (text: string) => text.replace(/\|/g, "\\|");
const code = (text: string) => `\`${text}\``;

function row(metric: Described): string {
  const type = String(metric.type);
  const cells = [
    code(metric.name),
    metric.upperBounds ? `${type} (buckets ${metric.upperBounds.join(", ")})` : type,
    metric.labelNames?.length ? metric.labelNames.map(code).join(", ") : "-",
    metric.help,
  ];
  return `| ${cells.map(cell).join(" | ")} |`;
}

/**
 * Every metric the runtime registers, as a Markdown table: name (bare, as with no metrics.namespace), type, labels,
 * help. Built from a registry of its own, without prom-client's default process metrics: nothing is collected.
 */
export function renderMetricsTable(): string {
  const metrics = createMetrics({ defaultMetrics: false }).registry.getMetricsAsArray() as Described[];
  return ["| Metric | Type | Labels | Help |", "| --- | --- | --- | --- |", ...metrics.map(row)].join("\n");
}

export const METRICS_TABLE: GeneratedBlock = {
  name: "metrics table",
  start: "<!-- metrics-table:start -->",
  end: "<!-- metrics-table:end -->",
  render: renderMetricsTable,
};
