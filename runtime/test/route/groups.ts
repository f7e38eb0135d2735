// A chunk's groups as objects, for tests to compare: the pipeline reads them one at a time (route/block.ts).
import type { BufferedRecords } from "../../src/buffer/hot.ts";
import { GroupReader, keyAt, nextGroup, type RoutedChunk } from "../../src/route/block.ts";
import type { TOO_DEEP } from "../../src/route/router.ts";

export interface RoutedGroup extends BufferedRecords {
  readonly key: string | typeof TOO_DEEP;
}

export function groupsOf(chunk: RoutedChunk): RoutedGroup[] {
  const out: RoutedGroup[] = [];
  for (let g = 0, at = chunk.at; g < chunk.groups; g++, at = nextGroup(chunk.reply, at)) {
    const r = new GroupReader();
    r.read(chunk.reply, at);
    out.push({
      key: keyAt(chunk.reply, at),
      count: r.count,
      data: r.data,
      dataAt: r.dataAt,
      ends: r.ends,
      endsAt: r.endsAt,
      offsets: r.offsets,
      offsetsAt: r.offsetsAt,
    });
  }
  return out;
}
