// The sink circuit: open while every write the sink was asked for fails (a store outage, a failing archive volume),
// closed by the next one that lands. An open circuit zeroes the scaling_pressure composite, because more pods would
// only fail the same way: the sink, not this pod, is the bottleneck. As in the loader's sink-down gate, a cycle in
// which every attempt failed opens it and the first success closes it; a cycle with no attempt changes nothing, so
// an upload waiting out its backoff keeps the circuit as the last attempt left it.

/** Monotonic counts of the sink's attempts since start: uploads the store confirmed or failed, local writes. */
export interface SinkOutcomes {
  readonly succeeded: number;
  readonly failed: number;
}

export interface SinkCircuitOptions {
  /** Called on each change, after the state changed. */
  onChange: (open: boolean) => void;
  /** sink_circuit_open: 1 while open. */
  gauge?: { set(value: number): void };
}

export interface SinkCircuit {
  /** Ends a cycle (a tick): reads the attempts since the last one, opens or closes, and returns whether it is open. */
  cycle(outcomes: SinkOutcomes): boolean;
  readonly open: boolean;
}

export function createSinkCircuit(opts: SinkCircuitOptions): SinkCircuit {
  let open = false;
  let last: SinkOutcomes = { succeeded: 0, failed: 0 };
  opts.gauge?.set(0);
  const set = (next: boolean) => {
    if (next === open) return;
    open = next;
    opts.gauge?.set(open ? 1 : 0);
    opts.onChange(open);
  };
  return {
    get open() {
      return open;
    },
    cycle(o) {
      const succeeded = o.succeeded - last.succeeded;
      const failed = o.failed - last.failed;
      last = { succeeded: o.succeeded, failed: o.failed };
      // A success closes it even when the same cycle also saw failures: the sink can take writes.
      if (succeeded > 0) set(false);
      else if (failed > 0) set(true);
      return open;
    },
  };
}

/** Counts the sink's attempts where they are made, for `SinkCircuit.cycle`. */
export class SinkTally implements SinkOutcomes {
  succeeded = 0;
  failed = 0;

  ok(): void {
    this.succeeded++;
  }

  fail(): void {
    this.failed++;
  }
}
