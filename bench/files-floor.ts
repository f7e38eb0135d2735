// The file system's floor under a row of the destinations bench: the same archive tree made again by a bare script,
// each file written with its size, synced, linked to its name and its hidden name removed, as the local store does,
// then every directory synced once. No records, codec, spill or journal: what the disk alone costs for those files.
// Usage (the destinations bench runs it): node bench/files-floor.ts <list> <root>
//   <list>: one file a line, "<size> <path relative to the archive root>".
// Run with UV_THREADPOOL_SIZE=16, the runtime's own pool size.
import { readFileSync } from "node:fs";
import { link, mkdir, open, unlink } from "node:fs/promises";
import { dirname, join } from "node:path";

const AT_ONCE = 64;
const [list, root] = process.argv.slice(2) as [string, string];
const files = readFileSync(list, "utf8")
  .split("\n")
  .filter((l) => l !== "")
  .map((l) => {
    const at = l.indexOf(" ");
    return { size: Number(l.slice(0, at)), rel: l.slice(at + 1) };
  });

/** Runs `work` on each item, AT_ONCE at a time. */
async function each<T>(items: readonly T[], work: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: AT_ONCE }, async () => {
      while (next < items.length) await work(items[next++] as T);
    }),
  );
}

const dirs = new Set<string>();
const started = performance.now();
await each(files, async ({ size, rel }) => {
  const path = join(root, rel);
  const dir = dirname(path);
  await mkdir(dir, { recursive: true });
  for (let d = dir; d.length >= root.length; d = dirname(d)) dirs.add(d);
  const hidden = join(dir, `.${rel.slice(rel.lastIndexOf("/") + 1)}.partial`);
  const h = await open(hidden, "ax");
  await h.write(Buffer.alloc(size, 120));
  await h.sync();
  await h.close();
  await link(hidden, path);
  await unlink(hidden);
});
await each([...dirs], async (d) => {
  const h = await open(d, "r");
  await h.sync();
  await h.close();
});
console.log(JSON.stringify({ files: files.length, dirs: dirs.size, seconds: (performance.now() - started) / 1000 }));
