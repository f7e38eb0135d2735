// Arrays kept per destination or per file, most of which only ever hold one entry (or one run of entries).

/**
 * `list` with `item` at its end: `list` itself, pushed onto, unless it is empty, when a new array of exactly the item
 * is the list. Pushed onto an empty array, V8 makes room for half as many again plus 16: one entry's array took 150
 * bytes or more, and 100,000 destinations' holds and files held some 27 MiB of such room.
 */
export function appendTo<T>(list: T[], item: T): T[] {
  if (list.length === 0) return [item];
  list.push(item);
  return list;
}

/**
 * appendTo for a triple (partition runs, holds' parts). Not a rest parameter: a new run comes about once a record at
 * 10,000 destinations, and a rest parameter is an array allocated at every call.
 */
export function appendTriple(list: number[], a: number, b: number, c: number): number[] {
  if (list.length === 0) return [a, b, c];
  list.push(a, b, c);
  return list;
}

/**
 * An empty list to start from, one for all: appendTo never adds to an empty list, and frozen, nothing else can. A
 * list of its own is 32 bytes even empty, and 100,000 destinations' buffers held two each.
 */
export const EMPTY: never[] = [];
Object.freeze(EMPTY);
