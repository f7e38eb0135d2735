import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { assertPageCurrent } from "../../../e2e/support/docs.ts";
import { METRICS_PAGE } from "../../../scripts/doc-pages.ts";
import { renderMetricsTable } from "../../src/observe/docs.ts";
import { createMetrics } from "../../src/observe/metrics.ts";

// The seed's Metrics section, by name and labels: the contract the table, and the registry behind it, must hold.
const SEED: Record<string, string[]> = {
  messages_received_total: [],
  messages_archived_total: [],
  messages_written_total: [],
  messages_dropped_total: ["reason"],
  messages_dlq_total: [],
  bytes_written_total: [],
  bytes_compressed_total: [],
  files_created_total: [],
  files_closed_total: [],
  archive_roll_total: ["trigger"],
  writer_evictions_total: [],
  hot_buffer_evictions_total: [],
  flush_operations_total: [],
  archive_errors_total: [],
  kafka_commit_errors_total: [],
  routing_errors_total: [],
  routing_fallback_total: ["field"],
  staged_files_recovered_total: [],
  staged_files_quarantined_total: ["reason"],
  staged_files_removed_total: ["reason"],
  buffer_bytes: [],
  buffer_records: [],
  kafka_lag: [],
  pipeline_delivery_guarantee: ["guarantee", "reason"],
  hot_buffers_active: [],
  hot_buffers_bytes: [],
  uploads_pending: [],
  staged_bytes: [],
  batch_size_bytes: [],
  flush_duration_seconds: [],
  scaling_pressure: [],
  pipeline_idle: [],
};

function rows(): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const line of renderMetricsTable().split("\n").slice(2)) {
    const cells = line
      .split(/(?<!\\)\|/)
      .slice(1, -1)
      .map((c) => c.trim());
    out.set(/^`([^`]+)`$/.exec(cells[0] ?? "")?.[1] ?? line, cells);
  }
  return out;
}

describe("docs/metrics.md metrics table", () => {
  it("matches the registry", () => {
    assertPageCurrent(METRICS_PAGE);
  });

  it("has one row per registered metric, bare-named, with type, labels and help", () => {
    const registered = createMetrics({ defaultMetrics: false }).registry.getMetricsAsArray();
    const table = rows();
    assert.equal(table.size, registered.length);
    for (const m of registered) {
      const cells = table.get(m.name);
      assert.ok(cells, m.name);
      assert.equal(cells.length, 4, m.name);
      assert.ok(cells[1]?.startsWith(String(m.type)), `${m.name}: ${cells[1]}`);
      assert.equal(cells[3], m.help);
    }
    assert.match(table.get("flush_duration_seconds")?.[1] ?? "", /^histogram \(buckets 0\.001, .*, 5\)$/);
    assert.equal(table.get("messages_received_total")?.[2], "-");
  });

  it("lists every metric the seed names, with the seed's labels", () => {
    const table = rows();
    for (const [name, labels] of Object.entries(SEED)) {
      const cells = table.get(name);
      assert.ok(cells, `${name} is in the seed but not in the registry`);
      assert.equal(cells[2], labels.length ? labels.map((l) => `\`${l}\``).join(", ") : "-", name);
    }
  });

  it("bare names are what metrics.namespace prefixes, default metrics included", () => {
    const bare = new Set(rows().keys());
    const prefixed = createMetrics({ namespace: "dfe" }).registry.getMetricsAsArray();
    assert.ok(prefixed.length > bare.size, "the default process metrics are registered");
    for (const m of prefixed) assert.ok(m.name.startsWith("dfe_"), m.name);
    for (const name of bare)
      assert.ok(
        prefixed.some((m) => m.name === `dfe_${name}`),
        name,
      );
  });
});
