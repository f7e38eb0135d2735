// The process's health, by component: what /readyz, /health and the pod's report to its ArchivePipeline read.
// Each owner sets its own component; readers take a snapshot or subscribe to changes.

export type ComponentState = "ok" | "degraded" | "failed";

export const COMPONENTS = ["work_config", "transport", "sink"] as const;
export type ComponentName = (typeof COMPONENTS)[number];

export interface HealthComponent {
  state: ComponentState;
  reason?: string | undefined;
}

export interface HealthSnapshot {
  /** The worst component state. */
  status: ComponentState;
  /** Readiness fails only on a failed component: an idle or degraded pod still serves health and metrics. */
  ready: boolean;
  /** True while no destination is configured and no pipeline runs. */
  idle: boolean;
  /** True while the last config change was refused and the running (or idle) config kept. */
  configRefused: boolean;
  components: Record<ComponentName, HealthComponent>;
}

const RANK: Record<ComponentState, number> = { ok: 0, degraded: 1, failed: 2 };

export class Health {
  #components: Record<ComponentName, HealthComponent> = {
    work_config: { state: "ok" },
    transport: { state: "ok" },
    sink: { state: "ok" },
  };
  #idle = false;
  #configRefused = false;
  /** Until the first start has run: a listener or consumer not yet up must not draw traffic. */
  #starting = false;
  #listeners = new Set<(s: HealthSnapshot) => void>();

  set(name: ComponentName, state: ComponentState, reason?: string): void {
    const prev = this.#components[name];
    if (prev.state === state && prev.reason === reason) return;
    this.#components = { ...this.#components, [name]: reason === undefined ? { state } : { state, reason } };
    this.#emit();
  }

  setIdle(idle: boolean): void {
    if (this.#idle === idle) return;
    this.#idle = idle;
    this.#emit();
  }

  setStarting(starting: boolean): void {
    if (this.#starting === starting) return;
    this.#starting = starting;
    this.#emit();
  }

  setConfigRefused(refused: boolean): void {
    if (this.#configRefused === refused) return;
    this.#configRefused = refused;
    this.#emit();
  }

  snapshot(): HealthSnapshot {
    const comps = this.#components;
    let status: ComponentState = "ok";
    for (const name of COMPONENTS) if (RANK[comps[name].state] > RANK[status]) status = comps[name].state;
    return {
      status,
      ready: status !== "failed" && !this.#starting,
      idle: this.#idle,
      configRefused: this.#configRefused,
      components: comps,
    };
  }

  /** Calls `listener` after every change; returns the unsubscribe. */
  onChange(listener: (s: HealthSnapshot) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  #emit(): void {
    const s = this.snapshot();
    for (const l of this.#listeners) l(s);
  }
}
