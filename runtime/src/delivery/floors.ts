// The commit floor of each partition slot without visiting every hold: per slot, a min-heap of the lowest offsets
// held holds carry. Visiting every open hold at each commit took an eighth of the event loop with 100,000
// destinations buffered (the skewed bench: 23 s of 185). An entry is pushed whenever a hold's lowest offset of a slot
// is set or lowered, and one gone stale (its hold released, its slot dropped, its offset lowered since) is skipped
// when it reaches the top; stale entries are cleared out whenever they outnumber live ones.
import type { Hold } from "./hold.ts";

interface Heap {
  mins: number[];
  holds: Hold[];
}

export class Floors {
  readonly #heaps: Heap[] = [];
  #entries = 0;
  /** Entries past which the next note counts the live ones, and rebuilds the heaps if most are stale. */
  #checkAt = 4096;
  /** Whether a hold still counts against the floor (open, or errored for good). */
  readonly #held: (h: Hold) => boolean;
  /** Every hold that counts against the floor, for a rebuild. */
  readonly #all: () => Iterable<Hold>;

  constructor(held: (h: Hold) => boolean, all: () => Iterable<Hold>) {
    this.#held = held;
    this.#all = all;
  }

  /** `hold`'s lowest offset of `slot` is now `min`. */
  note(hold: Hold, slot: number, min: number): void {
    let heap = this.#heaps[slot];
    if (heap === undefined) {
      for (let s = this.#heaps.length; s <= slot; s++) this.#heaps.push({ mins: [], holds: [] });
      heap = this.#heaps[slot] as Heap;
    }
    push(heap, min, hold);
    if (++this.#entries > this.#checkAt) this.#compact();
  }

  /** The lowest offset any held hold carries of `slot`, or undefined when none does. */
  lowest(slot: number): number | undefined {
    const heap = this.#heaps[slot];
    if (heap === undefined) return undefined;
    while (heap.mins.length > 0) {
      const min = heap.mins[0] as number;
      const hold = heap.holds[0] as Hold;
      if (this.#held(hold) && hold.lowest(slot) === min) return min;
      pop(heap);
      this.#entries--;
    }
    return undefined;
  }

  /** Rebuilds the heaps from the holds that count when stale entries are most of them. */
  #compact(): void {
    let live = 0;
    for (const h of this.#all()) live += h.parts.length / 3;
    if (this.#entries > 2 * live) {
      for (const heap of this.#heaps) {
        heap.mins = [];
        heap.holds = [];
      }
      this.#entries = 0;
      for (const h of this.#all()) {
        const p = h.parts;
        for (let i = 0; i < p.length; i += 3) {
          if ((p[i + 2] ?? 0) === 0) continue;
          push(this.#heaps[p[i] ?? 0] as Heap, p[i + 1] ?? 0, h);
          this.#entries++;
        }
      }
    }
    this.#checkAt = Math.max(4096, 2 * this.#entries);
  }
}

function push(heap: Heap, min: number, hold: Hold): void {
  const { mins, holds } = heap;
  let i = mins.length;
  mins.push(min);
  holds.push(hold);
  while (i > 0) {
    const up = (i - 1) >> 1;
    if ((mins[up] as number) <= min) break;
    mins[i] = mins[up] as number;
    holds[i] = holds[up] as Hold;
    i = up;
  }
  mins[i] = min;
  holds[i] = hold;
}

function pop(heap: Heap): void {
  const { mins, holds } = heap;
  const lastMin = mins.pop() as number;
  const lastHold = holds.pop() as Hold;
  const n = mins.length;
  if (n === 0) return;
  let i = 0;
  for (;;) {
    const l = 2 * i + 1;
    if (l >= n) break;
    const r = l + 1;
    const c = r < n && (mins[r] as number) < (mins[l] as number) ? r : l;
    if ((mins[c] as number) >= lastMin) break;
    mins[i] = mins[c] as number;
    holds[i] = holds[c] as Hold;
    i = c;
  }
  mins[i] = lastMin;
  holds[i] = lastHold;
}
