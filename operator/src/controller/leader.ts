// Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it: the holder renews every
// renew period, a candidate takes the Lease once its renewTime is a lease duration old, and every write carries the
// resourceVersion it read, so two candidates never both win. A leader that cannot renew within the lease duration
// stops leading before another may take over.
import { setTimeout as sleep } from "node:timers/promises";
import { ApiException, V1MicroTime, type CoordinationV1Api, type V1Lease } from "@kubernetes/client-node";
import type { Logger } from "pino";
import { isNotFound } from "./apply.ts";

export const LEASE_NAME = "dfe-archiver-operator";
export const LEASE_DURATION_SECONDS = 15;
export const RENEW_PERIOD_MS = 5_000;
/** How often a candidate tries for a Lease another holds. */
export const RETRY_PERIOD_MS = 2_000;

export interface ElectorOptions {
  coordination: CoordinationV1Api;
  namespace: string;
  identity: string;
  log: Logger;
  name?: string;
  leaseDurationSeconds?: number;
  renewPeriodMs?: number;
  retryPeriodMs?: number;
  onStartedLeading: () => void;
  /** The Lease was lost (not renewed in time) while running; not called by stop(). */
  onStoppedLeading: () => void;
}

export class LeaderElector {
  readonly #o: Required<ElectorOptions>;
  #leading = false;
  #lastRenew = 0;
  #stop = new AbortController();
  #running: Promise<void> | undefined;

  constructor(opts: ElectorOptions) {
    this.#o = {
      name: LEASE_NAME,
      leaseDurationSeconds: LEASE_DURATION_SECONDS,
      renewPeriodMs: RENEW_PERIOD_MS,
      retryPeriodMs: RETRY_PERIOD_MS,
      ...opts,
    };
  }

  get leading(): boolean {
    return this.#leading;
  }

  get identity(): string {
    return this.#o.identity;
  }

  /** Campaigns, then renews while leading, until stop(). */
  run(): Promise<void> {
    this.#running ??= this.#loop();
    return this.#running;
  }

  /** Stops campaigning; `release` hands the Lease back so a successor need not wait out its duration. */
  async stop(release: boolean): Promise<void> {
    this.#stop.abort();
    await this.#running?.catch(() => undefined);
    if (this.#leading && release) {
      await this.#tryAcquireOrRenew(true).catch((e: unknown) =>
        this.#o.log.warn({ err: e }, "could not release the leader lease"),
      );
    }
    // Stopped on purpose: no onStoppedLeading, which tells of a Lease lost while running.
    this.#leading = false;
  }

  async #loop(): Promise<void> {
    const signal = this.#stop.signal;
    const durationMs = this.#o.leaseDurationSeconds * 1000;
    while (!signal.aborted) {
      let ok = false;
      try {
        ok = await this.#tryAcquireOrRenew(false);
      } catch (e) {
        this.#o.log.warn({ err: e }, "leader lease read or write failed");
      }
      if (ok) {
        this.#lastRenew = Date.now();
        if (!this.#leading) {
          this.#leading = true;
          this.#o.log.info({ identity: this.#o.identity }, "became leader");
          this.#o.onStartedLeading();
        }
      } else if (this.#leading && Date.now() - this.#lastRenew >= durationMs - this.#o.renewPeriodMs) {
        // Not renewed in time: another candidate may take the Lease soon, so stop first.
        this.#lose();
      }
      const wait = this.#leading ? this.#o.renewPeriodMs : this.#o.retryPeriodMs;
      await sleep(wait, undefined, { signal }).catch(() => undefined);
    }
  }

  #lose(): void {
    if (!this.#leading) return;
    this.#leading = false;
    this.#o.log.warn({ identity: this.#o.identity }, "stopped leading");
    this.#o.onStoppedLeading();
  }

  /** One round: true when this candidate holds the Lease afterwards (for a release, when it gave it up). */
  async #tryAcquireOrRenew(release: boolean): Promise<boolean> {
    const { coordination, namespace, name, identity, leaseDurationSeconds } = this.#o;
    const now = new V1MicroTime();
    let lease: V1Lease;
    try {
      lease = await coordination.readNamespacedLease({ name, namespace });
    } catch (e) {
      if (!isNotFound(e) || release) throw e;
      const body: V1Lease = {
        metadata: { name, namespace },
        spec: { holderIdentity: identity, leaseDurationSeconds, acquireTime: now, renewTime: now, leaseTransitions: 0 },
      };
      return this.#write(() => coordination.createNamespacedLease({ namespace, body }));
    }
    const spec = lease.spec ?? {};
    const holder = spec.holderIdentity ?? "";
    const mine = holder === identity;
    if (release) {
      if (!mine) return true;
      lease.spec = { ...spec, holderIdentity: "", leaseDurationSeconds: 1, renewTime: now };
      return this.#write(() => coordination.replaceNamespacedLease({ name, namespace, body: lease }));
    }
    if (!mine && holder !== "") {
      const renewed = timeOf(spec.renewTime);
      const duration = (spec.leaseDurationSeconds ?? leaseDurationSeconds) * 1000;
      if (Date.now() < renewed + duration) return false;
    }
    lease.spec = {
      ...spec,
      holderIdentity: identity,
      leaseDurationSeconds,
      renewTime: now,
      ...(mine ? {} : { acquireTime: now, leaseTransitions: (spec.leaseTransitions ?? 0) + 1 }),
    };
    return this.#write(() => coordination.replaceNamespacedLease({ name, namespace, body: lease }));
  }

  // A conflict means another candidate wrote first: this round is lost, not failed.
  async #write(op: () => Promise<V1Lease>): Promise<boolean> {
    try {
      await op();
      return true;
    } catch (e) {
      if (e instanceof ApiException && e.code === 409) return false;
      throw e;
    }
  }
}

// The client types a MicroTime as a Date, but hands back the string the apiserver sent.
function timeOf(t: unknown): number {
  if (t instanceof Date) return t.getTime();
  return typeof t === "string" ? Date.parse(t) : 0;
}
