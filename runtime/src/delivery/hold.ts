// A hold: the offsets of the records one flush (or one file) carries, kept by span rather than per record.
// Per partition slot it keeps only the lowest offset and the count, because the commit floor of a partition is the
// lowest offset any unreleased hold carries: every offset below it belongs to a hold already released.
import { appendTriple } from "../lists.ts";

/**
 * What the open holds share with their tracker: their records and bytes together, kept as they change (summing ten
 * thousand holds at each latch reading cost the event loop more than a second of a 10,000-destination run).
 */
export interface HeldTally {
  records: number;
  bytes: number;
}

/** What a hold costs beside its parts, and each part (see Hold.bytes). */
export const HOLD_BYTES = 64;
const PART_BYTES = 24;

export class Hold {
  /** The tally this hold counts in while it is open (see OffsetTracker.open); detached when it is released. */
  tally: HeldTally | undefined;
  /**
   * Per partition slot (see OffsetTracker.slot), three numbers: the slot, its lowest offset and its record count. One
   * array, not three: 100,000 destinations' holds held 45 MB of array storage as three.
   */
  parts: number[] = [];
  #last = -1;

  add(slot: number, offset: number): void {
    this.addRun(slot, offset, 1);
  }

  /** Where `slot` lies in parts, or -1. */
  #find(slot: number): number {
    const p = this.parts;
    for (let i = 0; i < p.length; i += 3) if (p[i] === slot) return i;
    return -1;
  }

  /** Adds `count` records of one slot whose lowest offset is `min`. */
  addRun(slot: number, min: number, count: number): void {
    // Records of one transport batch share a partition, so the last slot is almost always the one.
    let i = this.#last;
    if (i < 0 || this.parts[i] !== slot) {
      i = this.#find(slot);
      if (i < 0) {
        i = this.parts.length;
        this.#push(slot, min, 0);
      }
      this.#last = i;
    }
    const p = this.parts;
    p[i + 2] = (p[i + 2] ?? 0) + count;
    if (min < (p[i + 1] ?? min)) p[i + 1] = min;
    if (this.tally !== undefined) this.tally.records += count;
  }

  #push(slot: number, min: number, count: number): void {
    this.parts = appendTriple(this.parts, slot, min, count);
    if (this.tally !== undefined) this.tally.bytes += PART_BYTES;
  }

  /** Takes over another hold's records (the same file holds both). */
  absorb(other: Hold): void {
    const o = other.parts;
    for (let i = 0; i < o.length; i += 3) {
      const slot = o[i] ?? 0;
      const min = o[i + 1] ?? 0;
      const count = o[i + 2] ?? 0;
      const j = this.#find(slot);
      if (j < 0) this.#push(slot, min, count);
      else {
        this.parts[j + 2] = (this.parts[j + 2] ?? 0) + count;
        if (min < (this.parts[j + 1] ?? min)) this.parts[j + 1] = min;
      }
    }
  }

  /** Whether it holds a record of one of these slots. */
  holdsAny(slots: ReadonlySet<number>): boolean {
    for (let i = 0; i < this.parts.length; i += 3) if (slots.has(this.parts[i] ?? -1)) return true;
    return false;
  }

  get records(): number {
    let n = 0;
    for (let i = 2; i < this.parts.length; i += 3) n += this.parts[i] ?? 0;
    return n;
  }

  get empty(): boolean {
    return this.parts.length === 0;
  }

  /** Removes a slot's records (a revoked partition); returns how many records it held. */
  dropSlot(slot: number): number {
    const i = this.#find(slot);
    if (i < 0) return 0;
    const n = this.parts[i + 2] ?? 0;
    this.parts.splice(i, 3);
    this.#last = -1;
    if (this.tally !== undefined) {
      this.tally.records -= n;
      this.tally.bytes -= PART_BYTES;
    }
    return n;
  }

  /** Approximate bytes this hold keeps alive (object header plus its array). */
  get bytes(): number {
    return HOLD_BYTES + PART_BYTES * (this.parts.length / 3);
  }
}
