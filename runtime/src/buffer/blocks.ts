// The hot buffers' memory: blocks of 512 bytes to 4 MiB, powers of two, carved from 4 MiB slabs of shared memory by a
// buddy allocator, and given back to it when their flush has landed. A block of its own from the allocator each time a
// buffer grew (ten thousand buffers, each growing and flushing again and again) left glibc's heap fragmented: at a 512
// MiB limit RSS stayed at 438 MB with every buffer flushed, and the memory latch never resumed. Slabs are shared
// memory, so a lane reads a flushed block where it lies: a flush hands its block over instead of copying it.

const MIN_SHIFT = 9;
const SLAB_SHIFT = 22;
export const MIN_BLOCK = 1 << MIN_SHIFT;
export const SLAB_BYTES = 1 << SLAB_SHIFT;

/** Where a pooled block lies: its slab and offset as one address, and its size class. */
interface Carved {
  readonly address: number;
  readonly shift: number;
}

export class BlockPool {
  readonly #slabs: (SharedArrayBuffer | undefined)[] = [];
  /** Free addresses by size class (shift - MIN_SHIFT). */
  readonly #free: Set<number>[] = Array.from({ length: SLAB_SHIFT - MIN_SHIFT + 1 }, () => new Set<number>());
  readonly #carved = new WeakMap<Uint8Array, Carved>();
  /** Slabs kept whole and free, for the next growth; past it a freed slab goes. */
  readonly #keepSlabs: number;
  #inUse = 0;

  constructor(opts: { keepSlabs?: number } = {}) {
    this.#keepSlabs = opts.keepSlabs ?? 4;
  }

  /** Bytes in blocks handed out and not yet given back. */
  get inUse(): number {
    return this.#inUse;
  }

  /** Bytes of slabs held, in use or free. */
  get held(): number {
    return this.#slabs.filter((s) => s !== undefined).length * SLAB_BYTES;
  }

  /** A block of at least `bytes` (the power of two at or above it, at least MIN_BLOCK). */
  alloc(bytes: number): Buffer {
    if (bytes > SLAB_BYTES) return Buffer.from(new SharedArrayBuffer(bytes));
    const shift = Math.max(MIN_SHIFT, Math.ceil(Math.log2(bytes)));
    let from = shift;
    while (from <= SLAB_SHIFT && this.#free[from - MIN_SHIFT]?.size === 0) from++;
    let address: number;
    if (from > SLAB_SHIFT) {
      address = this.#newSlab() * SLAB_BYTES;
      from = SLAB_SHIFT;
    } else {
      const free = this.#free[from - MIN_SHIFT] as Set<number>;
      address = free.values().next().value as number;
      free.delete(address);
    }
    // Split down to the size asked for, each upper half free.
    while (from > shift) {
      from--;
      this.#free[from - MIN_SHIFT]?.add(address + (1 << from));
    }
    const slab = this.#slabs[Math.floor(address / SLAB_BYTES)] as SharedArrayBuffer;
    const block = Buffer.from(slab, address % SLAB_BYTES, 1 << shift);
    this.#carved.set(block, { address, shift });
    this.#inUse += 1 << shift;
    return block;
  }

  /** Gives a block back; a buffer alloc did not return, or one given back already, is ignored. */
  free(block: Uint8Array): void {
    const carved = this.#carved.get(block);
    if (carved === undefined) return;
    this.#carved.delete(block);
    this.#inUse -= 1 << carved.shift;
    let { address, shift } = carved;
    // Merged with its buddy while the buddy is free too.
    while (shift < SLAB_SHIFT) {
      // Within its slab: an address past 2^31 (512 slabs) would not survive a bitwise operator whole.
      const offset = address % SLAB_BYTES;
      const buddy = address - offset + (offset ^ (1 << shift));
      const free = this.#free[shift - MIN_SHIFT] as Set<number>;
      if (!free.delete(buddy)) break;
      address = Math.min(address, buddy);
      shift++;
    }
    const whole = this.#free[SLAB_SHIFT - MIN_SHIFT] as Set<number>;
    if (shift === SLAB_SHIFT && whole.size >= this.#keepSlabs) {
      this.#slabs[address / SLAB_BYTES] = undefined;
      return;
    }
    this.#free[shift - MIN_SHIFT]?.add(address);
  }

  #newSlab(): number {
    const slab = new SharedArrayBuffer(SLAB_BYTES);
    const empty = this.#slabs.indexOf(undefined);
    if (empty >= 0) {
      this.#slabs[empty] = slab;
      return empty;
    }
    return this.#slabs.push(slab) - 1;
  }
}
