import { afterEach, beforeEach, mock, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import fs, { readlinkSync } from "node:fs";
import { mkdir, mkdtemp, open, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { ArchiverError } from "../../src/errors.ts";
import { createFileStore } from "../../src/store/file.ts";
import { fsError } from "../../src/store/fs.ts";
import type { FileMeta } from "../../src/store/types.ts";
import { tmpfsDir } from "../../../e2e/support/archiver.ts";
import { retrying } from "../store-staging/helpers.ts";

const META: FileMeta = { records: 1, codec: "zstd", openedAt: 0, closedAt: 0, blockLengths: [], blockRecords: [] };

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "dfe-file-store-"));
});
afterEach(async () => {
  mock.restoreAll();
  await rm(dir, { recursive: true, force: true });
});

interface HandleProto {
  sync(this: { fd: number }): Promise<void>;
  write(this: unknown, b: Buffer, off: number, len: number): Promise<{ bytesWritten: number }>;
}

/** The FileHandle prototype, whose methods every handle shares: a test observes or fails them there. */
async function handleProto(): Promise<HandleProto> {
  const h = await open(join(dir, ".probe"), "w");
  await h.close();
  return Object.getPrototypeOf(h) as HandleProto;
}

/**
 * Records the path of every fsync, in order (Linux: a descriptor's path is /proc/self/fd/<fd>): a file's through its
 * FileHandle, a directory's on a bare descriptor.
 */
async function spySyncs(): Promise<string[]> {
  const proto = await handleProto();
  const synced: string[] = [];
  const original = proto.sync;
  mock.method(proto, "sync", function (this: { fd: number }) {
    synced.push(readlinkSync(`/proc/self/fd/${this.fd}`));
    return original.call(this);
  });
  const fsync = fs.fsync;
  mock.method(fs, "fsync", (fd: number, callback: (err: NodeJS.ErrnoException | null) => void) => {
    synced.push(readlinkSync(`/proc/self/fd/${fd}`));
    fsync(fd, callback);
  });
  return synced;
}

const permanent = (code: string) => (err: unknown) =>
  err instanceof ArchiverError && err.code === code && err.kind === "permanent";

test("a path that is absolute or has an empty, . or .. segment is refused for good", async () => {
  const store = createFileStore(dir);
  for (const bad of ["../x", "a/../b", "..", "/etc/passwd", "a/./b", ".", "a//b", "a/", "", "a/b\0c"]) {
    await assert.rejects(store.open(bad), permanent("invalid_path"), bad);
  }
  assert.deepEqual(await readdir(dir), [], "a refused path created something");
});

test("the root is a file:// URL or an absolute path", () => {
  assert.equal(createFileStore(pathToFileURL(dir).href).kind, "file");
  assert.equal(createFileStore(dir).kind, "file");
  for (const bad of ["var/data", "file://host/var/data", "./data"]) {
    assert.throws(() => createFileStore(bad), permanent("invalid_path"), bad);
  }
});

test("appended frames are on disk exactly, and size counts them", async () => {
  const store = createFileStore(pathToFileURL(join(dir, "root")).href);
  const f = await store.open("events/acme/login/2026/12/02/13-000001-k3x9a2_1.jsonl.zst");
  assert.equal(f.relPath, "events/acme/login/2026/12/02/13-000001-k3x9a2_1.jsonl.zst");
  const frames = [Buffer.from("first frame\n"), Buffer.alloc(70_000, 7), Buffer.from("last")];
  for (const fr of frames) await f.append(fr);
  assert.equal(f.size, 70_016);
  await f.complete({ ...META, blockLengths: frames.map((fr) => fr.length) });
  const onDisk = await readFile(join(dir, "root", f.relPath));
  assert.deepEqual(onDisk, Buffer.concat(frames));
  await assert.rejects(f.append(Buffer.from("x")), permanent("file_closed"));
});

test("complete syncs the file, then each directory up to the root, then the parents of a root it created", async () => {
  const root = join(dir, "a", "b", "root"); // dir exists; a, a/b and the root do not
  const store = createFileStore(root);
  const synced = await spySyncs();
  const f = await store.open("events/acme/x.jsonl");
  await f.append(Buffer.from("data"));
  assert.deepEqual(synced, [], "nothing syncs before complete");
  await f.complete(META);
  assert.deepEqual(synced, [
    join(root, "events/acme/x.jsonl"),
    join(root, "events/acme"),
    join(root, "events"),
    root,
    join(dir, "a", "b"),
    join(dir, "a"),
    dir,
  ]);

  // The root's entry is synced once: a later file syncs only its own path up to the root.
  synced.length = 0;
  const g = await store.open("logs/y.jsonl");
  await g.append(Buffer.from("more"));
  await g.complete(META);
  assert.deepEqual(synced, [join(root, "logs/y.jsonl"), join(root, "logs"), root]);
  assert.equal((await stat(join(root, "logs/y.jsonl"))).size, 4);
});

test("files completing together sync each directory once, the ones above a root it created too", async () => {
  const root = join(dir, "a", "b", "root");
  const store = createFileStore(root);
  const synced = await spySyncs();
  const files = await Promise.all(Array.from({ length: 20 }, (_, i) => store.open(`events/acme/f${i}.jsonl`)));
  for (const f of files) await f.append(Buffer.from("x"));
  await Promise.all(files.map((f) => f.complete(META)));
  const counts = new Map<string, number>();
  for (const path of synced) counts.set(path, (counts.get(path) ?? 0) + 1);
  const dirs = [join(root, "events/acme"), join(root, "events"), root, join(dir, "a", "b"), join(dir, "a"), dir];
  for (const d of dirs) assert.equal(counts.get(d), 1, `${d} synced ${counts.get(d) ?? 0} times`);
  assert.equal(synced.length, files.length + dirs.length, synced.join("\n"));
});

test("a root that was already there syncs nothing above it", async () => {
  const root = join(dir, "root");
  await mkdir(root);
  const store = createFileStore(root);
  const synced = await spySyncs();
  const f = await store.open("x.jsonl");
  await f.append(Buffer.from("1"));
  await f.complete(META);
  assert.deepEqual(synced, [join(root, "x.jsonl"), root]);
});

test("a frame the disk cannot hold fails by its errno, counts what reached the file, and is cut back", async (t) => {
  // A real full disk: a small tmpfs of the test's own (CI runs as root), filled to within a few kilobytes. The
  // frame's first write is short (what space is left), the next fails with ENOSPC.
  const mount = await mkdtemp(join(tmpdir(), "file-store-full-"));
  execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mount]);
  t.after(async () => {
    execFileSync("umount", ["-l", mount]);
    await rm(mount, { recursive: true, force: true });
  });
  const store = createFileStore(mount);
  const f = await store.open("d/x.jsonl");
  await f.append(Buffer.from("whole;"));
  const filler = join(mount, "filler");
  await writeFile(filler, Buffer.alloc(1024 * 1024 - 16 * 1024)).catch(() => undefined);
  const err = await f.append(Buffer.alloc(256 * 1024, 0x61)).catch((e: unknown) => e);
  assert.ok(err instanceof ArchiverError, `expected an ArchiverError, got ${String(err)}`);
  assert.equal(err.code, "ENOSPC");
  assert.equal(err.kind, "retryable");
  assert.ok(f.size > 6, `size counts what reached the file: ${f.size}`);
  assert.equal((await stat(join(mount, "d/x.jsonl"))).size, f.size);
  await f.truncate(6);
  assert.equal(f.size, 6);
  await rm(filler);
  await f.append(Buffer.from("next;"));
  await f.complete(META);
  assert.equal(await readFile(join(mount, "d/x.jsonl"), "utf8"), "whole;next;");
});

test("a failed fsync is reported by its errno, never retried, and the handle is released", async () => {
  const store = createFileStore(dir);
  const f = await store.open("d/x.jsonl");
  await f.append(Buffer.from("x"));
  const proto = await handleProto();
  const sync = mock.method(proto, "sync", () => Promise.reject(Object.assign(new Error("i/o error"), { code: "EIO" })));
  // A later fsync may report clean pages the failed one dropped: the retry never sees the sync.
  const failed: unknown[] = [];
  await assert.rejects(
    f.complete(META, retrying(3, failed)),
    (e: unknown) => e instanceof ArchiverError && e.code === "EIO" && e.retryable,
  );
  assert.equal(sync.mock.callCount(), 1);
  assert.deepEqual(failed, []);
  mock.restoreAll();
  await assert.rejects(f.append(Buffer.from("y")), permanent("file_closed"));
  await f.abandon();
  await assert.rejects(stat(join(dir, "d/x.jsonl")), { code: "ENOENT" });
});

test("a directory's failed fsync fails the complete by its errno, closes its descriptor, and the retry syncs it", async () => {
  const store = createFileStore(dir);
  const f = await store.open("d/x.jsonl");
  await f.append(Buffer.from("x"));
  const closed: number[] = [];
  const close = fs.close;
  mock.method(fs, "close", (fd: number, callback: (err: NodeJS.ErrnoException | null) => void) => {
    closed.push(fd);
    close(fd, callback);
  });
  let failedFd = -1;
  mock.method(fs, "fsync", (fd: number, callback: (err: NodeJS.ErrnoException | null) => void) => {
    failedFd = fd;
    callback(Object.assign(new Error("i/o error"), { code: "EIO" }));
  });
  await assert.rejects(f.complete(META), (e: unknown) => e instanceof ArchiverError && e.code === "EIO" && e.retryable);
  assert.ok(closed.includes(failedFd), "the directory's descriptor was left open");
  mock.restoreAll();
  // Still dirty: the next complete through it syncs it.
  const synced = await spySyncs();
  const g = await store.open("d/y.jsonl");
  await g.append(Buffer.from("y"));
  await g.complete(META);
  assert.ok(synced.includes(join(dir, "d")), `the directory was not synced again: ${JSON.stringify(synced)}`);
});

test("open never replaces a file, and a file where a directory should be is refused for good", async () => {
  const store = createFileStore(dir);
  const f = await store.open("d/x.jsonl");
  await assert.rejects(store.open("d/x.jsonl"), (e: unknown) => e instanceof ArchiverError && e.code === "EEXIST");
  await f.abandon();
  await writeFile(join(dir, "plain"), "not a directory");
  await assert.rejects(store.open("plain/x.jsonl"), permanent("ENOTDIR"));
  await assert.rejects(store.open("plain/sub/x.jsonl"), permanent("ENOTDIR"));
  await assert.rejects(createFileStore(join(dir, "plain")).open("x.jsonl"), permanent("ENOTDIR"));
});

test("errno codes decide retryable or permanent, and the code is kept", () => {
  const retryable = ["ENOSPC", "EIO", "EAGAIN", "EMFILE", "ENFILE", "EDQUOT", "EBUSY"];
  const permanentCodes = ["EACCES", "EPERM", "EROFS", "ENAMETOOLONG", "EISDIR", "ENOTDIR", "EINVAL"];
  for (const [codes, kind] of [
    [retryable, "retryable"],
    [permanentCodes, "permanent"],
  ] as const) {
    for (const code of codes) {
      const cause = Object.assign(new Error(`${code} happened`), { code });
      const err = fsError(cause, "append", "/x");
      assert.equal(err.code, code);
      assert.equal(err.kind, kind, code);
      assert.equal(err.cause, cause);
    }
  }
  // A code the table does not know is retried: retrying costs lag, dropping costs records.
  assert.equal(fsError(Object.assign(new Error("?"), { code: "ESTALE" }), "open", "/x").kind, "retryable");
  assert.equal(fsError(Object.assign(new Error("?"), { code: "constructor" }), "open", "/x").kind, "retryable");
  assert.deepEqual(
    [fsError(new Error("no code"), "open", "/x").code, fsError("odd", "open", "/x").kind],
    ["fs_error", "retryable"],
  );
  const already = new ArchiverError("invalid_path", "x", "permanent");
  assert.equal(fsError(already, "open", "/x"), already);
});

test("a publishing store keeps a file under a hidden name until it completes", async (t) => {
  const root = await mkdtemp(join(tmpdir(), "publish-"));
  t.after(() => rm(root, { recursive: true, force: true }));
  const store = createFileStore(`file://${root}`, { publish: true });
  const f = await store.open("a/b/file.jsonl.zst");
  await f.append(Buffer.from("frame"));
  assert.deepEqual(await readdir(join(root, "a/b")), [".file.jsonl.zst.partial"]);
  await f.complete({ records: 1, codec: "zstd", openedAt: 0, closedAt: 1, blockLengths: [5], blockRecords: [1] });
  assert.deepEqual(await readdir(join(root, "a/b")), ["file.jsonl.zst"]);
  assert.equal(await readFile(join(root, "a/b/file.jsonl.zst"), "utf8"), "frame");
  const g = await store.open("a/b/other.jsonl.zst");
  await g.append(Buffer.from("x"));
  await g.abandon();
  assert.deepEqual(await readdir(join(root, "a/b")), ["file.jsonl.zst"]);
});

test("a link the full disk refuses is retried from the link: the data synced once, the file whole under its name", async (t) => {
  // tmpfs counts a hard link as an inode: with none left, the link to the archive name fails ENOSPC.
  const mount = tmpfsDir(t, "1m,nr_inodes=16", "file-store-inodes-");
  const store = createFileStore(mount, { publish: true });
  const f = await store.open("a/file.jsonl");
  await f.append(Buffer.from("frame"));
  const fillers = join(mount, "fillers");
  await mkdir(fillers);
  for (let i = 0; ; i++) {
    const err = await writeFile(join(fillers, String(i)), "").catch((e: unknown) => e);
    if (err === undefined) continue;
    assert.equal((err as NodeJS.ErrnoException).code, "ENOSPC");
    break;
  }
  const synced = await spySyncs();
  const failed: unknown[] = [];
  await f.complete(
    META,
    retrying(2, failed, () => rm(fillers, { recursive: true })),
  );
  assert.equal(failed.length, 1);
  assert.ok(failed[0] instanceof ArchiverError && failed[0].code === "ENOSPC" && failed[0].retryable);
  assert.equal(synced.filter((p) => p.startsWith(join(mount, "a/.file.jsonl"))).length, 1, JSON.stringify(synced));
  assert.deepEqual(await readdir(join(mount, "a")), ["file.jsonl"]);
  assert.equal(await readFile(join(mount, "a/file.jsonl"), "utf8"), "frame");
});

test("a file already under the archive name fails the complete for good and is never replaced", async (t) => {
  const root = await mkdtemp(join(tmpdir(), "publish-"));
  t.after(() => rm(root, { recursive: true, force: true }));
  const store = createFileStore(root, { publish: true });
  const f = await store.open("a/file.jsonl");
  await f.append(Buffer.from("frame"));
  await writeFile(join(root, "a/file.jsonl"), "someone else's");
  const failed: unknown[] = [];
  await assert.rejects(f.complete(META, retrying(3, failed)), permanent("EEXIST"));
  assert.equal(failed.length, 1, "not retried");
  assert.equal(await readFile(join(root, "a/file.jsonl"), "utf8"), "someone else's");
});

test("a parked file holds no descriptor, takes its next frames by its path, and completes whole", async (t) => {
  const root = await mkdtemp(join(tmpdir(), "park-"));
  t.after(() => rm(root, { recursive: true, force: true }));
  const store = createFileStore(`file://${root}`, { publish: true });
  const f = await store.open("a/file.jsonl.zst");
  const partial = join(root, "a/.file.jsonl.zst.partial");
  const descriptors = async () =>
    (await readdir("/proc/self/fd")).filter((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`) === partial;
      } catch {
        return false;
      }
    }).length;
  await f.append(Buffer.from("one."));
  assert.equal(await descriptors(), 1);
  await f.park();
  await f.park(); // parking a parked file does nothing
  assert.equal(await descriptors(), 0);
  await f.append(Buffer.from("two.")); // by its path, on a lane: no descriptor kept
  assert.equal(await descriptors(), 0);
  assert.equal(f.size, 8);
  await f.truncate(6); // opens it again to cut it back
  assert.equal(await descriptors(), 1);
  await f.park();
  await f.complete({ ...META, blockLengths: [4, 2] });
  assert.equal(await descriptors(), 0);
  assert.equal(await readFile(join(root, "a/file.jsonl.zst"), "utf8"), "one.tw");
  await assert.rejects(f.append(Buffer.from("x")), permanent("file_closed"));
});

test("a parked file removed behind the archiver's back fails for good by ENOENT, never starting over empty", async (t) => {
  const root = await mkdtemp(join(tmpdir(), "park-"));
  t.after(() => rm(root, { recursive: true, force: true }));
  const store = createFileStore(`file://${root}`, { publish: true });
  const f = await store.open("a/file.jsonl.zst");
  await f.append(Buffer.from("one."));
  await f.park();
  await rm(join(root, "a/.file.jsonl.zst.partial"));
  await assert.rejects(
    f.append(Buffer.from("two.")),
    (err: unknown) => err instanceof ArchiverError && err.code === "ENOENT" && !err.retryable,
  );
  await assert.rejects(f.complete(META), (err: unknown) => err instanceof ArchiverError && err.code === "ENOENT");
  assert.deepEqual(await readdir(join(root, "a")), []);
});
