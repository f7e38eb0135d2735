// Arrays kept per destination or per file, most of which only ever hold one entry (or one run of entries).

/**
 * `list` with `items` at its end: `list` itself, pushed onto, unless it is empty, when `items` are the list. Pushed
 * onto an empty array, V8 makes room for half as many again plus 16: one entry's array took 150 bytes or more, and
 * 100,000 destinations' holds and files held some 27 MiB of such room.
 */
export function appendTo<T>(list: T[], ...items: T[]): T[] {
  if (list.length === 0) return items;
  list.push(...items);
  return list;
}

/**
 * An empty list to start from, one for all: appendTo never adds to an empty list, and frozen, nothing else can. A
 * list of its own is 32 bytes even empty, and 100,000 destinations' buffers held two each.
 */
export const EMPTY: never[] = [];
Object.freeze(EMPTY);
