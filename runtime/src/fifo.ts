// A first-in first-out queue read from a head index. Array.prototype.shift cannot trim an array that lives in V8's
// large-object space (past some 16,000 entries) in place, so it copied such a queue whole at every call: 32,000 spill
// reads waiting at 100,000 destinations took 0.7 s of the event loop. The array is cut back once half of it is read.

const COMPACT_PAST = 1024;

export class Fifo<T> {
  #items: (T | undefined)[] = [];
  #head = 0;
  #taken = 0;

  /** Items queued and not yet taken. */
  get length(): number {
    return this.#items.length - this.#head;
  }

  /** Items taken so far: those in the queue now have all been taken once this reaches its value now plus length. */
  get taken(): number {
    return this.#taken;
  }

  push(item: T): void {
    this.#items.push(item);
  }

  /** The next item, left in the queue. */
  peek(): T | undefined {
    return this.#items[this.#head];
  }

  /** Takes the next item out. */
  shift(): T | undefined {
    if (this.#head === this.#items.length) return undefined;
    const item = this.#items[this.#head];
    this.#items[this.#head++] = undefined;
    this.#taken++;
    if (this.#head === this.#items.length) {
      this.#items.length = 0;
      this.#head = 0;
    } else if (this.#head > COMPACT_PAST && this.#head * 2 > this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return item;
  }
}
