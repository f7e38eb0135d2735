// Offsets held until the file holding their records is durable, then released. Each partition commits only below
// the lowest offset an unreleased hold carries. An Errored hold is never released: nothing reads its records again
// short of a restart, so the pipeline drains and exits non-zero (withheld) and the restart reads from the floor.
import { Hold, HOLD_BYTES, type HeldTally } from "./hold.ts";

export type ReleaseOutcome = "done" | "rejected" | "dropped" | "errored";

export interface PartitionRef {
  readonly topic: string;
  readonly partition: number;
}

export interface CommitOffset extends PartitionRef {
  /** The next offset to read, as Kafka commits it. */
  readonly offset: string;
}

interface PartitionState extends PartitionRef {
  assigned: boolean;
  /** Counts assignments and revocations: work begun under an earlier one is discarded. */
  epoch: number;
  /** One past the highest offset received since the last assignment; -1 before any. */
  next: number;
  committed: number;
}

export interface TrackerOptions {
  /** false when the source cannot confirm (kafka with acknowledgements off): commit at receipt, holds only count. */
  holdsCommit: boolean;
}

export class OffsetTracker {
  readonly #parts: PartitionState[] = [];
  readonly #index = new Map<string, number>();
  readonly #open = new Set<Hold>();
  readonly #errored = new Set<Hold>();
  readonly #held: HeldTally = { records: 0, bytes: 0 };
  readonly #holdsCommit: boolean;

  constructor(opts: TrackerOptions) {
    this.#holdsCommit = opts.holdsCommit;
  }

  /** A small integer naming a partition, stable for the tracker's life; holds and buffers carry it per record. */
  slot(topic: string, partition: number): number {
    const key = `${topic}\u0000${partition}`;
    let s = this.#index.get(key);
    if (s === undefined) {
      s = this.#parts.length;
      this.#parts.push({ topic, partition, assigned: true, epoch: 0, next: -1, committed: -1 });
      this.#index.set(key, s);
    }
    return s;
  }

  /** Changes whenever the slot's partition is assigned or revoked. */
  assignment(slot: number): number {
    return this.#part(slot).epoch;
  }

  ref(slot: number): PartitionRef {
    const p = this.#part(slot);
    return { topic: p.topic, partition: p.partition };
  }

  /** A new hold, counted against the commit floor until it is released. */
  open(): Hold {
    const h = new Hold();
    h.tally = this.#held;
    this.#held.bytes += HOLD_BYTES;
    this.#open.add(h);
    return h;
  }

  /** Folds `from` into `into` (both open, carried by the same file); false when either is not open. */
  merge(into: Hold, from: Hold): boolean {
    if (!this.#open.has(into) || !this.#open.delete(from)) return false;
    // `from`'s records stay in the tally, carried by `into` now (absorb counts no record again, only its new parts).
    from.tally = undefined;
    this.#held.bytes -= from.bytes;
    into.absorb(from);
    return true;
  }

  /** Records up to `lastOffset` of the slot have been received (routed into holds, or let go). */
  received(slot: number, lastOffset: number): void {
    const p = this.#part(slot);
    if (lastOffset + 1 > p.next) p.next = lastOffset + 1;
  }

  /** Releases a hold. Errored keeps its offsets unreleased for good; returns the records that hold carried. */
  release(hold: Hold, outcome: ReleaseOutcome): number {
    if (!this.#open.delete(hold)) return 0;
    hold.tally = undefined;
    this.#held.records -= hold.records;
    this.#held.bytes -= hold.bytes;
    if (outcome === "errored") this.#errored.add(hold);
    return hold.records;
  }

  /** True once any hold was released Errored: the process must drain and exit so the restart reads again. */
  get withheld(): boolean {
    return this.#errored.size > 0;
  }

  assigned(refs: readonly PartitionRef[]): void {
    for (const r of refs) {
      const p = this.#part(this.slot(r.topic, r.partition));
      p.assigned = true;
      p.epoch++;
      // The broker hands the partition back from its committed offset; what we read before may be read again.
      p.next = -1;
    }
  }

  /** Marks partitions revoked; returns their slots so buffered records of them can be discarded. */
  revoked(refs: readonly PartitionRef[]): number[] {
    const slots: number[] = [];
    for (const r of refs) {
      const s = this.#index.get(`${r.topic}\u0000${r.partition}`);
      if (s === undefined) continue;
      const p = this.#part(s);
      p.assigned = false;
      p.epoch++;
      p.next = -1;
      p.committed = -1;
      slots.push(s);
    }
    return slots;
  }

  /** The floor of every assigned partition that moved past its last commit. */
  commitable(): CommitOffset[] {
    const floors = this.#floors();
    const out: CommitOffset[] = [];
    for (let s = 0; s < this.#parts.length; s++) {
      const p = this.#part(s);
      const f = floors[s] ?? -1;
      if (p.assigned && f > p.committed && f >= 0)
        out.push({ topic: p.topic, partition: p.partition, offset: String(f) });
    }
    return out;
  }

  /**
   * True once every record of these slots received since their assignment is released and committed: their next
   * owner reads none of it again.
   */
  handedOver(slots: ReadonlySet<number>): boolean {
    const floors = this.#floors();
    for (const s of slots) {
      const p = this.#part(s);
      if (p.next >= 0 && (floors[s] !== p.next || p.committed !== p.next)) return false;
    }
    return true;
  }

  /** Per slot, the lowest offset an unreleased hold carries, else the next offset to receive. */
  #floors(): number[] {
    const floors = this.#parts.map((p) => p.next);
    if (this.#holdsCommit) {
      for (const set of [this.#open, this.#errored]) {
        for (const h of set) {
          const p = h.parts;
          for (let i = 0; i < p.length; i += 3) {
            const s = p[i] ?? 0;
            const m = p[i + 1] ?? 0;
            if ((p[i + 2] ?? 0) > 0 && m < (floors[s] ?? 0)) floors[s] = m;
          }
        }
      }
    }
    return floors;
  }

  /** Records the broker confirmed a commit of. */
  committed(offsets: readonly CommitOffset[]): void {
    for (const o of offsets) {
      const s = this.#index.get(`${o.topic}\u0000${o.partition}`);
      if (s === undefined) continue;
      const p = this.#part(s);
      const n = Number(o.offset);
      if (n > p.committed) p.committed = n;
    }
  }

  /** Records held by unreleased holds. */
  heldRecords(): number {
    return this.#held.records;
  }

  /** Approximate bytes the held offsets cost (the seed's design spends about 32 a record). */
  heldBytes(): number {
    return this.#held.bytes;
  }

  #part(slot: number): PartitionState {
    const p = this.#parts[slot];
    if (p === undefined) throw new RangeError(`unknown partition slot ${slot}`);
    return p;
  }
}
