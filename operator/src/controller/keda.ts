// Whether KEDA is installed, from API discovery: is keda.sh/v1alpha1 scaledobjects served? Discovery is open to every
// authenticated client, so the operator needs no access to CRDs. Without KEDA a pipeline runs spec.replicas pods and
// says so on ScalingReady; the check is repeated in the background, and a change (KEDA installed or removed) is
// handed to a callback so every pipeline is reconciled again and picks the ScaledObject up or drops back to replicas.
import { CustomObjectsApi, type KubeConfig } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { isNotFound } from "./apply.ts";

export const SCALED_OBJECT_API = { group: "keda.sh", version: "v1alpha1", resource: "scaledobjects" } as const;
/** How often discovery is asked again. */
export const KEDA_RECHECK_MS = 30_000;

export interface KedaCheck {
  installed(): Promise<boolean>;
}

/** One discovery read: true when the apiserver serves KEDA's ScaledObject. */
export function scaledObjectServed(kc: KubeConfig): () => Promise<boolean> {
  const custom = kc.makeApiClient(CustomObjectsApi);
  const { group, version, resource } = SCALED_OBJECT_API;
  return async () => {
    try {
      const list = await custom.getAPIResources({ group, version });
      return list.resources.some((r) => r.name === resource);
    } catch (e) {
      // 404: the group/version is not served, which is what KEDA's absence looks like.
      if (isNotFound(e)) return false;
      throw e;
    }
  };
}

export interface KedaWatchOptions {
  log: Logger;
  recheckMs?: number;
}

/**
 * KEDA's presence, as last discovered. installed() answers from the last read while it is younger than recheckMs and
 * reads again otherwise (and stands on the last answer should that read fail); start() keeps reading every recheckMs and calls onChange when the answer flips.
 */
export class KedaWatch implements KedaCheck {
  readonly #discover: () => Promise<boolean>;
  readonly #log: Logger;
  readonly #recheckMs: number;
  #known: { at: number; installed: boolean } | undefined;
  #reading: Promise<boolean> | undefined;
  #timer: NodeJS.Timeout | undefined;
  #onChange: ((installed: boolean) => void) | undefined;

  constructor(discover: () => Promise<boolean>, opts: KedaWatchOptions) {
    this.#discover = discover;
    this.#log = opts.log;
    this.#recheckMs = opts.recheckMs ?? KEDA_RECHECK_MS;
  }

  async installed(): Promise<boolean> {
    const known = this.#known;
    if (known !== undefined && Date.now() - known.at < this.#recheckMs) return known.installed;
    // A failed read stands on the last answer when there is one; the very first must succeed.
    return this.#read().catch((err: unknown) => {
      if (known === undefined) throw err;
      this.#log.warn({ err }, "KEDA discovery failed; keeping the last answer");
      return known.installed;
    });
  }

  /** Reads discovery every recheckMs; `onChange` is told each flip after the first read. */
  start(onChange: (installed: boolean) => void): void {
    this.#onChange = onChange;
    const tick = () => {
      this.#read().catch((err: unknown) => this.#log.warn({ err }, "KEDA discovery failed; keeping the last answer"));
      this.#timer = setTimeout(tick, this.#recheckMs);
      this.#timer.unref();
    };
    tick();
  }

  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#onChange = undefined;
  }

  // Concurrent callers share one read.
  #read(): Promise<boolean> {
    this.#reading ??= this.#discover()
      .then((installed) => {
        const before = this.#known?.installed;
        this.#known = { at: Date.now(), installed };
        if (before !== undefined && before !== installed) {
          this.#log.info({ installed }, installed ? "KEDA installed" : "KEDA removed");
          this.#onChange?.(installed);
        }
        return installed;
      })
      .finally(() => (this.#reading = undefined));
    return this.#reading;
  }
}
