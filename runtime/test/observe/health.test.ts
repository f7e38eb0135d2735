import assert from "node:assert/strict";
import { test } from "node:test";
import { Health } from "../../src/observe/health.ts";

test("not ready until the first start has run, nor while a component has failed", () => {
  const h = new Health();
  assert.equal(h.snapshot().ready, true);
  h.setStarting(true);
  h.set("transport", "degraded", "starting");
  assert.equal(h.snapshot().ready, false, "a listener not yet bound must not draw traffic");
  h.setStarting(false);
  h.set("transport", "ok");
  assert.equal(h.snapshot().ready, true);
  h.set("sink", "degraded", "local write failing");
  assert.equal(h.snapshot().ready, true, "degraded still serves");
  h.set("transport", "failed", "cannot start");
  assert.equal(h.snapshot().ready, false);
});
