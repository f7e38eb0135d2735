// The operator's own metrics, on its registry: reconciles by outcome and duration, and the work queue's depth.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";

export class OperatorMetrics {
  readonly registry = new Registry();
  readonly reconcileTotal = new Counter({
    name: "reconcile_total",
    help: "Reconciles run, by result (success or error).",
    labelNames: ["result"] as const,
    registers: [this.registry],
  });
  readonly reconcileErrors = new Counter({
    name: "reconcile_errors_total",
    help: "Reconciles that failed and went back to the queue with backoff.",
    registers: [this.registry],
  });
  readonly reconcileDuration = new Histogram({
    name: "reconcile_duration_seconds",
    help: "Time one reconcile took.",
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers: [this.registry],
  });

  /** `depth` is read at each scrape. */
  constructor(depth: () => number) {
    new Gauge({
      name: "workqueue_depth",
      help: "Keys waiting in the work queue.",
      registers: [this.registry],
      collect() {
        this.set(depth());
      },
    });
    collectDefaultMetrics({ register: this.registry });
  }

  reconciled(ok: boolean, seconds: number): void {
    this.reconcileTotal.inc({ result: ok ? "success" : "error" });
    if (!ok) this.reconcileErrors.inc();
    this.reconcileDuration.observe(seconds);
  }
}
