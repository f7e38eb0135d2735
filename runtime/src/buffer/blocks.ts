// The hot buffers' memory: blocks of 512 bytes to 4 MiB, powers of two, carved from 4 MiB slabs of shared memory by a
// buddy allocator, and given back to it when their flush has landed. A block of its own from the allocator each time a
// buffer grew (ten thousand buffers, each growing and flushing again and again) left glibc's heap fragmented: at a 512
// MiB limit RSS stayed at 438 MB with every buffer flushed, and the memory latch never resumed. Slabs are shared
// memory, so a lane reads a flushed block where it lies: a flush hands its block over instead of copying it.
// What the pool knows of a block lies in a byte per 512 bytes of its slab, found from the block itself (its memory,
// offset and length), and free blocks wait in a queue per size: a WeakMap from each block to where it lay, and a Set of
// free addresses per size, put tens of thousands of entries in tables V8 rebuilt as they churned, and a WeakMap's
// entries are ephemerons, which every full collection marks over again.
// A few small blocks still in use pin a slab whole: the 100,000-destination row's pool held 160-180 MiB of slabs with
// 5-7 MiB in use, once its hot buffers had shrunk. The sparsest slabs are then retired (retireSparse): nothing more is
// carved from them, their owners move what they keep (HotBufferPool.compact), and each goes once its last block does.
import { collectSoon } from "../regulate/sampler.ts";

const MIN_SHIFT = 9;
const SLAB_SHIFT = 22;
export const MIN_BLOCK = 1 << MIN_SHIFT;
export const SLAB_BYTES = 1 << SLAB_SHIFT;
const CLASSES = SLAB_SHIFT - MIN_SHIFT + 1;

/**
 * Free memory kept in slabs not retiring, as room for the next growth; past it the sparsest slabs retire, those at
 * most half in use. Retiring only slabs at most an eighth in use, the 100,000-destination row's pool held 160 MiB of
 * slabs while what it had in use fell from 100 to 30 MiB, as flushes landed.
 */
const ROOM_BYTES = 8 * SLAB_BYTES;
const RETIRE_USED_BYTES = SLAB_BYTES / 2;
/** Slabs let go before a full collection is asked for: shared memory counts towards none (see lanes.ts). */
const COLLECT_AFTER_BYTES = 8 * SLAB_BYTES;

/** A slab, with what starts at each 512 bytes of it: +shift a block in use, -shift a free one, 0 neither. */
interface Slab {
  readonly memory: SharedArrayBuffer;
  readonly starts: Int8Array;
  /** Bytes of its blocks in use. */
  used: number;
  /** Being emptied (see retireSparse): none of its memory is carved again, and it goes with its last block. */
  retiring: boolean;
  /** Views of the whole slab (see views), made at the first asked for. */
  views: WordViews | undefined;
}

/** A block's memory read as 64-bit floats and 32-bit words: views of all the memory it lies in, from its start. */
export interface WordViews {
  readonly f64: Float64Array;
  readonly u32: Uint32Array;
}

export class BlockPool {
  readonly #slabs: (Slab | undefined)[] = [];
  readonly #slabOf = new Map<SharedArrayBuffer, number>();
  /**
   * Free addresses (slab x SLAB_BYTES + offset) by size class (shift - MIN_SHIFT), queued as blocks come free from
   * #head on, the longest free taken first: taken newest first, the 10,000-destination row peaked at 553-565 MiB RSS,
   * oldest first at 534.
   * An entry whose block has been taken or merged since stays until reached or compacted: each is checked against its
   * slab.
   */
  readonly #free: number[][] = Array.from({ length: CLASSES }, () => []);
  readonly #head = new Int32Array(CLASSES);
  /** Free blocks by size class, exactly. */
  readonly #freeCount = new Int32Array(CLASSES);
  /** Slabs kept whole and free, for the next growth; past it a freed slab goes. */
  readonly #keepSlabs: number;
  #inUse = 0;
  #retiring = 0;
  /** Bytes of slabs let go since a full collection was last asked for. */
  #letGo = 0;

  constructor(opts: { keepSlabs?: number } = {}) {
    this.#keepSlabs = opts.keepSlabs ?? 4;
  }

  /** Bytes in blocks handed out and not yet given back. */
  get inUse(): number {
    return this.#inUse;
  }

  /** Bytes of slabs held, in use or free. */
  get held(): number {
    return this.#slabOf.size * SLAB_BYTES;
  }

  /** A block of at least `bytes` (the power of two at or above it, at least MIN_BLOCK). */
  alloc(bytes: number): Buffer {
    if (bytes > SLAB_BYTES) return Buffer.from(new SharedArrayBuffer(bytes));
    const shift = Math.max(MIN_SHIFT, 32 - Math.clz32(bytes - 1));
    let from = shift;
    while (from <= SLAB_SHIFT && this.#freeCount[from - MIN_SHIFT] === 0) from++;
    const address = from > SLAB_SHIFT ? this.#newSlab() * SLAB_BYTES : this.#take(from);
    if (from > SLAB_SHIFT) from = SLAB_SHIFT;
    const slab = this.#slabs[Math.floor(address / SLAB_BYTES)] as Slab;
    const offset = address % SLAB_BYTES;
    // Split down to the size asked for, each upper half free.
    while (from > shift) {
      from--;
      this.#push(slab, address + (1 << from), from);
    }
    slab.starts[offset >> MIN_SHIFT] = shift;
    slab.used += 1 << shift;
    this.#inUse += 1 << shift;
    return Buffer.from(slab.memory, offset, 1 << shift);
  }

  /**
   * Gives a block back; a buffer alloc did not return is ignored, and so is one given back already, until its memory
   * is carved again.
   */
  free(block: Uint8Array): void {
    const index = this.#slabIndex(block);
    if (index === undefined) return;
    const slab = this.#slabs[index] as Slab;
    let offset = block.byteOffset;
    let shift = 31 - Math.clz32(block.length);
    if (block.length !== 1 << shift || slab.starts[offset >> MIN_SHIFT] !== shift) return;
    slab.starts[offset >> MIN_SHIFT] = 0;
    slab.used -= 1 << shift;
    this.#inUse -= 1 << shift;
    if (slab.retiring) {
      if (slab.used === 0) this.#drop(index);
      return;
    }
    // Merged with its buddy while the buddy is free too.
    while (shift < SLAB_SHIFT) {
      const buddy = offset ^ (1 << shift);
      if (slab.starts[buddy >> MIN_SHIFT] !== -shift) break;
      slab.starts[buddy >> MIN_SHIFT] = 0;
      this.#freeCount[shift - MIN_SHIFT] = (this.#freeCount[shift - MIN_SHIFT] ?? 0) - 1;
      offset = Math.min(offset, buddy);
      shift++;
    }
    if (shift === SLAB_SHIFT && (this.#freeCount[CLASSES - 1] ?? 0) >= this.#keepSlabs) {
      this.#drop(index);
      return;
    }
    this.#push(slab, index * SLAB_BYTES + offset, shift);
  }

  /**
   * Retires the sparsest slabs while more than ROOM_BYTES is free in the others: a retiring slab's free blocks leave
   * the free lists (their queued entries go stale, as a taken block's do). True while any slab is retiring: its
   * owners should move their blocks (see retiring).
   */
  retireSparse(): boolean {
    let free = 0;
    const sparse: Slab[] = [];
    for (const slab of this.#slabs) {
      if (slab === undefined || slab.retiring) continue;
      free += SLAB_BYTES - slab.used;
      if (slab.used > 0 && slab.used <= RETIRE_USED_BYTES) sparse.push(slab);
    }
    sparse.sort((a, b) => a.used - b.used);
    for (const slab of sparse) {
      free -= SLAB_BYTES - slab.used;
      if (free <= ROOM_BYTES) break;
      this.#retire(slab);
    }
    return this.#retiring > 0;
  }

  #retire(slab: Slab): void {
    slab.retiring = true;
    this.#retiring++;
    for (let at = 0; at < slab.starts.length; at++) {
      const mark = slab.starts[at] ?? 0;
      if (mark >= 0) continue;
      slab.starts[at] = 0;
      this.#freeCount[-mark - MIN_SHIFT] = (this.#freeCount[-mark - MIN_SHIFT] ?? 0) - 1;
    }
  }

  /**
   * Views of the memory `block` lies in, to read it as numbers at its byteOffset: a slab's are made once and shared
   * by all its blocks. Three typed arrays made for each hot buffer's index every time it grew were 67 MB of the 445 MB
   * the 10,000-destination row promoted.
   */
  views(block: Buffer): WordViews {
    const index = this.#slabIndex(block);
    const slab = index === undefined ? undefined : this.#slabs[index];
    if (slab === undefined) {
      const memory = block.buffer;
      return {
        f64: new Float64Array(memory, 0, memory.byteLength >> 3),
        u32: new Uint32Array(memory, 0, memory.byteLength >> 2),
      };
    }
    return (slab.views ??= { f64: new Float64Array(slab.memory), u32: new Uint32Array(slab.memory) });
  }

  /** Whether `block` lies in a retiring slab: its owner should copy it into a new one and give it back. */
  retiring(block: Uint8Array): boolean {
    const index = this.#slabIndex(block);
    return index !== undefined && (this.#slabs[index]?.retiring ?? false);
  }

  /** Where the slab `block` lies in is kept, if it is one of this pool's. */
  #slabIndex(block: Uint8Array): number | undefined {
    return block.buffer instanceof SharedArrayBuffer ? this.#slabOf.get(block.buffer) : undefined;
  }

  #drop(index: number): void {
    const slab = this.#slabs[index] as Slab;
    if (slab.retiring) this.#retiring--;
    this.#slabs[index] = undefined;
    this.#slabOf.delete(slab.memory);
    this.#letGo += SLAB_BYTES;
    if (this.#letGo >= COLLECT_AFTER_BYTES) {
      this.#letGo = 0;
      collectSoon();
    }
  }

  #push(slab: Slab, address: number, shift: number): void {
    slab.starts[(address % SLAB_BYTES) >> MIN_SHIFT] = -shift;
    const c = shift - MIN_SHIFT;
    const queue = this.#free[c] as number[];
    queue.push(address);
    this.#freeCount[c] = (this.#freeCount[c] ?? 0) + 1;
    const entries = queue.length - (this.#head[c] ?? 0);
    if (entries > 64 && entries > 4 * (this.#freeCount[c] ?? 0)) this.#compact(shift);
  }

  /** A free block of this size, taken out of the free ones (there is one: #freeCount says so), the longest free. */
  #take(shift: number): number {
    const c = shift - MIN_SHIFT;
    const queue = this.#free[c] as number[];
    let head = this.#head[c] ?? 0;
    for (;;) {
      const address = queue[head++] as number;
      const slab = this.#slabs[Math.floor(address / SLAB_BYTES)];
      const at = (address % SLAB_BYTES) >> MIN_SHIFT;
      if (slab === undefined || slab.starts[at] !== -shift) continue;
      slab.starts[at] = 0;
      this.#freeCount[c] = (this.#freeCount[c] ?? 0) - 1;
      this.#head[c] = head;
      if (head > 1024 && head * 2 > queue.length) this.#compact(shift);
      return address;
    }
  }

  /** Drops a size's stale entries, and the second of any address pushed twice while free. */
  #compact(shift: number): void {
    const c = shift - MIN_SHIFT;
    const kept: number[] = [];
    const queue = this.#free[c] as number[];
    for (let i = this.#head[c] ?? 0; i < queue.length; i++) {
      const address = queue[i] as number;
      const slab = this.#slabs[Math.floor(address / SLAB_BYTES)];
      const at = (address % SLAB_BYTES) >> MIN_SHIFT;
      if (slab === undefined || slab.starts[at] !== -shift) continue;
      slab.starts[at] = 0; // marked as kept; set back below
      kept.push(address);
    }
    for (const address of kept) {
      (this.#slabs[Math.floor(address / SLAB_BYTES)] as Slab).starts[(address % SLAB_BYTES) >> MIN_SHIFT] = -shift;
    }
    this.#free[c] = kept;
    this.#head[c] = 0;
  }

  #newSlab(): number {
    const slab: Slab = {
      memory: new SharedArrayBuffer(SLAB_BYTES),
      starts: new Int8Array(SLAB_BYTES >> MIN_SHIFT),
      used: 0,
      retiring: false,
      views: undefined,
    };
    let index = this.#slabs.indexOf(undefined);
    if (index < 0) index = this.#slabs.push(slab) - 1;
    else this.#slabs[index] = slab;
    this.#slabOf.set(slab.memory, index);
    return index;
  }
}

/**
 * The process's pool: the hot buffers' blocks and the spill's chunks (spill.ts), so the memory a spill lets go is the
 * memory the chunk holding it takes. A flush gives its block back wherever it lands.
 */
export const blocks = new BlockPool();
