// A hold: the offsets of the records one flush (or one file) carries, kept by span rather than per record.
// Per partition slot it keeps only the lowest offset and the count, because the commit floor of a partition is the
// lowest offset any unreleased hold carries: every offset below it belongs to a hold already released.

/** Records of every open hold together, kept as they change: summing ten thousand holds at each latch reading cost
 * the event loop more than a second of a 10,000-destination run. */
export interface HeldTally {
  records: number;
}

export class Hold {
  /** The tally this hold counts in while it is open (see OffsetTracker.open); detached when it is released. */
  tally: HeldTally | undefined;
  /** Partition slots (see OffsetTracker.slot), with the lowest offset and the record count of each. */
  readonly slots: number[] = [];
  readonly mins: number[] = [];
  readonly counts: number[] = [];
  #last = -1;

  add(slot: number, offset: number): void {
    this.addRun(slot, offset, 1);
  }

  /** Adds `count` records of one slot whose lowest offset is `min`. */
  addRun(slot: number, min: number, count: number): void {
    // Records of one transport batch share a partition, so the last slot is almost always the one.
    let i = this.#last;
    if (i < 0 || this.slots[i] !== slot) {
      i = this.slots.indexOf(slot);
      if (i < 0) {
        i = this.slots.length;
        this.slots.push(slot);
        this.mins.push(min);
        this.counts.push(0);
      }
      this.#last = i;
    }
    this.counts[i] = (this.counts[i] ?? 0) + count;
    if (min < (this.mins[i] ?? min)) this.mins[i] = min;
    if (this.tally !== undefined) this.tally.records += count;
  }

  /** Takes over another hold's records (the same file holds both). */
  absorb(other: Hold): void {
    for (let i = 0; i < other.slots.length; i++) {
      const slot = other.slots[i] ?? 0;
      const min = other.mins[i] ?? 0;
      const count = other.counts[i] ?? 0;
      const j = this.slots.indexOf(slot);
      if (j < 0) {
        this.slots.push(slot);
        this.mins.push(min);
        this.counts.push(count);
      } else {
        this.counts[j] = (this.counts[j] ?? 0) + count;
        if (min < (this.mins[j] ?? min)) this.mins[j] = min;
      }
    }
  }

  get records(): number {
    let n = 0;
    for (const c of this.counts) n += c;
    return n;
  }

  get empty(): boolean {
    return this.slots.length === 0;
  }

  /** Removes a slot's records (a revoked partition); returns how many records it held. */
  dropSlot(slot: number): number {
    const i = this.slots.indexOf(slot);
    if (i < 0) return 0;
    const n = this.counts[i] ?? 0;
    this.slots.splice(i, 1);
    this.mins.splice(i, 1);
    this.counts.splice(i, 1);
    this.#last = -1;
    if (this.tally !== undefined) this.tally.records -= n;
    return n;
  }

  /** Approximate bytes this hold keeps alive (object header plus three small arrays). */
  get bytes(): number {
    return 96 + 24 * this.slots.length;
  }
}
