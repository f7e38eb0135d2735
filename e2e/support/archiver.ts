// Runs the real runtime (runtime/src/main.ts) as a child process on the project's Node 24, and reads back what it
// archived with the codecs' own CLIs, so end-to-end tests see exactly what a user would.
import { spawn, execFileSync, type ChildProcess } from "node:child_process";
import {
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  statSync,
  statfsSync,
  writeFileSync,
  writeSync,
  rmSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import type { TestContext } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { GetObjectCommand, ListObjectsV2Command, type S3Client } from "@aws-sdk/client-s3";
import { stringify } from "yaml";
import { freePort, kafka } from "./testbed.ts";

export { freePort } from "./testbed.ts";

const repo = resolve(import.meta.dirname, "../..");
export const nodeBin = join(repo, "node_modules/.bin/node");
export const mainTs = join(repo, "runtime/src/main.ts");

export function tempDir(t: TestContext, prefix = "dfe-archiver-"): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A child's combined output, its exit (code or signal), and a SIGKILL when the test ends with it still running. */
export function watchChild(
  t: TestContext,
  proc: ChildProcess,
): { output: () => string; exited: Promise<number | string>; done: () => boolean } {
  let out = "";
  proc.stdout?.on("data", (d: Buffer) => (out += d.toString()));
  proc.stderr?.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | string>((res) => proc.once("exit", (code, sig) => res(code ?? sig ?? -1)));
  let done = false;
  void exited.then(() => (done = true));
  t.after(async () => {
    if (!done) {
      proc.kill("SIGKILL");
      await exited;
    }
  });
  return { output: () => out, exited, done: () => done };
}

export interface RunningArchiver {
  readonly proc: ChildProcess;
  readonly metricsAddr: string;
  output(): string;
  metric(name: string, labels?: Record<string, string>): Promise<number>;
  /** Resolves with the exit code (or the signal's name). */
  readonly exited: Promise<number | string>;
  stop(signal?: NodeJS.Signals): Promise<number | string>;
}

/** Starts the runtime with `config` written as its config file, plus env; stops it when the test ends. */
export async function startArchiver(
  t: TestContext,
  config: Record<string, unknown>,
  opts: {
    env?: Record<string, string>;
    dir?: string;
    waitReady?: boolean;
    configPath?: string;
    /** The program to run: the sources' main.ts, else (the image's) a build's main.js. */
    main?: string;
  } = {},
): Promise<RunningArchiver> {
  const dir = opts.dir ?? tempDir(t);
  // With configPath the caller owns the file (a ConfigMap mount it updates); `config` is then not written.
  let file = opts.configPath;
  if (file === undefined) {
    file = join(dir, `config-${Date.now()}.yaml`);
    writeFileSync(file, stringify(config));
  }
  const port = await freePort();
  const metricsAddr = `127.0.0.1:${port}`;
  const proc = spawn(nodeBin, [opts.main ?? mainTs, "run", "--config", file, "--metrics-addr", metricsAddr], {
    cwd: dir,
    env: { PATH: process.env["PATH"] ?? "", HOME: process.env["HOME"] ?? "/root", ...opts.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const { output: out, exited, done } = watchChild(t, proc);
  const metric = async (name: string, labels: Record<string, string> = {}) => {
    const res = await fetch(`http://${metricsAddr}/metrics`);
    return sumMetric(await res.text(), name, labels);
  };
  const running: RunningArchiver = {
    proc,
    metricsAddr,
    output: out,
    metric,
    exited,
    stop: async (signal = "SIGTERM") => {
      proc.kill(signal);
      return exited;
    },
  };
  if (opts.waitReady ?? true) {
    await waitFor(
      async () => (await fetch(`http://${metricsAddr}/readyz`).catch(() => undefined))?.ok === true,
      30_000,
      () => `runtime not ready; output:\n${out()}`,
      done,
    );
  }
  return running;
}

/** Sums the samples of a metric whose labels include `labels`. */
export function sumMetric(text: string, name: string, labels: Record<string, string> = {}): number {
  let sum = 0;
  for (const line of text.split("\n")) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)$/.exec(line);
    if (!m || m[1] !== name) continue;
    const got = Object.fromEntries([...(m[3] ?? "").matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((x) => [x[1], x[2]]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) sum += Number(m[4]);
  }
  return sum;
}

export async function waitFor(
  cond: () => Promise<boolean> | boolean,
  timeoutMs: number,
  what: () => string,
  abort: () => boolean = () => false,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await cond()) return;
    if (abort() || Date.now() > deadline) throw new Error(what());
    await sleep(200);
  }
}

/**
 * A tmpfs of `size` (mount's syntax: "4m", with more options after a comma: "4m,nr_inodes=64") mounted on a
 * temporary directory, unmounted when the test ends (root).
 */
export function tmpfsDir(t: TestContext, size: string, prefix = "tmpfs-"): string {
  const mount = mkdtempSync(join(tmpdir(), prefix));
  execFileSync("mount", ["-t", "tmpfs", "-o", `size=${size}`, "tmpfs", mount]);
  t.after(() => {
    execFileSync("umount", ["-l", mount]);
    rmSync(mount, { recursive: true, force: true });
  });
  return mount;
}

/** Every file under `dir`, recursively, as absolute paths; none when `dir` does not exist. */
export function filesUnder(dir: string): string[] {
  try {
    return readdirSync(dir, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile())
      .map((e) => join(e.parentPath, e.name));
  } catch {
    return [];
  }
}

/** Every archive file under `root`, relative path and size; a file not yet complete (its hidden .partial name) is not. */
export function archiveFiles(root: string): { path: string; size: number }[] {
  const out: { path: string; size: number }[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.startsWith(".") && e.name.endsWith(".partial")) continue;
      else out.push({ path: relative(root, p), size: statSync(p).size });
    }
  };
  walk(root);
  return out.sort((a, b) => a.path.localeCompare(b.path));
}

const CLI: Record<string, string[]> = {
  ".zst": ["zstd", "-dc"],
  ".lz4": ["lz4", "-dc"],
  ".gz": ["gzip", "-dc"],
};

/** Decompresses an archive file with the codec's own tool, not the project's code (snappy's reader: codec tests). */
export function decompressWithCli(file: string): Buffer {
  const suffix = Object.keys(CLI).find((s) => file.endsWith(s));
  const cmd = suffix ? CLI[suffix] : undefined;
  if (!cmd || cmd[0] === undefined) throw new Error(`no CLI known for ${file}`);
  return execFileSync(cmd[0], [...cmd.slice(1), file], { maxBuffer: 1 << 30 });
}

/**
 * The archived lines of every file under root, grouped by the file's destination directory. zstd files are read by
 * one zstd process per thousand files (--output-dir-mirror), not one each: ten thousand destinations' files took a
 * minute of process starts.
 */
export function readArchive(root: string): { files: { path: string; lines: string[] }[]; lines: string[] } {
  const all = archiveFiles(root).map((f) => f.path);
  const zst = all.filter((p) => p.endsWith(".zst"));
  const out = mkdtempSync(join(tmpdir(), "dfe-read-archive-"));
  try {
    for (let i = 0; i < zst.length; i += 1000) {
      execFileSync("zstd", ["-d", "-q", "-f", "--output-dir-mirror", out, "--", ...zst.slice(i, i + 1000)], {
        cwd: root,
      });
    }
    const files = all.map((path) => ({
      path,
      lines: linesOf(
        path.endsWith(".zst") ? readFileSync(join(out, path.slice(0, -4))) : decompressWithCli(join(root, path)),
      ),
    }));
    return { files, lines: files.flatMap((f) => f.lines) };
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

/** Produces `count` records made by `make(i)` in batches, acks=all. */
export async function produce(
  topic: string,
  count: number,
  make: (i: number) => { value: string | Buffer; partition?: number; key?: string },
  batch = 5000,
): Promise<void> {
  const producer = kafka("dfe-archiver-test-producer").producer({ allowAutoTopicCreation: false });
  await producer.connect();
  try {
    for (let start = 0; start < count; start += batch) {
      const messages = [];
      for (let i = start; i < Math.min(count, start + batch); i++) messages.push(make(i));
      await producer.send({ topic, acks: -1, messages });
    }
  } finally {
    await producer.disconnect();
  }
}

/** Committed offsets of a group against the topic's end offsets. */
export async function groupOffsets(
  groupId: string,
  topic: string,
): Promise<{ committed: Record<number, number>; end: Record<number, number> }> {
  const admin = kafka().admin();
  await admin.connect();
  try {
    const [c] = await admin.fetchOffsets({ groupId, topics: [topic] });
    const ends = await admin.fetchTopicOffsets(topic);
    return {
      committed: Object.fromEntries((c?.partitions ?? []).map((p) => [p.partition, Number(p.offset)])),
      end: Object.fromEntries(ends.map((p) => [p.partition, Number(p.high)])),
    };
  } finally {
    await admin.disconnect();
  }
}

/** Waits until the group's committed offsets reach the topic's end offsets on every partition. */
export async function waitCommittedToEnd(
  groupId: string,
  topic: string,
  timeoutMs: number,
  what: () => string,
): Promise<void> {
  await waitFor(
    async () => {
      const { committed, end } = await groupOffsets(groupId, topic);
      return Object.entries(end).every(([p, e]) => committed[Number(p)] === e);
    },
    timeoutMs,
    what,
  );
}

/** Every record on `topic` from the beginning, once at least `count` have arrived (fails after `timeoutMs`). */
export async function readTopic(topic: string, count: number, timeoutMs = 30_000): Promise<Buffer[]> {
  return (await readTopicRecords(topic, count, timeoutMs)).map((r) => r.value);
}

/** readTopic with where each record sits: its partition and offset. */
export async function readTopicRecords(
  topic: string,
  count: number,
  timeoutMs = 30_000,
): Promise<{ partition: number; offset: number; value: Buffer }[]> {
  const consumer = kafka().consumer({ groupId: `read-${topic}-${Date.now()}`, maxBytes: 64 << 20 });
  await consumer.connect();
  const records: { partition: number; offset: number; value: Buffer }[] = [];
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${records.length} of ${count} records on ${topic}`)), timeoutMs);
      const check = () => {
        if (records.length < count) return;
        clearTimeout(timer);
        resolve();
      };
      check();
      consumer
        .run({
          eachMessage: async ({ partition, message }) => {
            records.push({ partition, offset: Number(message.offset), value: message.value ?? Buffer.alloc(0) });
            check();
          },
        })
        .catch(reject);
    });
  } finally {
    await consumer.disconnect();
  }
  return records;
}

/** A DLQ entry as the archiver writes it, its payload decoded. */
export interface DlqEntry {
  payload: Buffer;
  reason: string;
  destination: string;
  topic?: string;
  partition?: number;
  offset?: string;
  records?: number;
  block?: boolean;
}

export async function readDlq(topic: string, count: number, timeoutMs = 30_000): Promise<DlqEntry[]> {
  return (await readTopic(topic, count, timeoutMs)).map((v) => {
    const e = JSON.parse(v.toString()) as Omit<DlqEntry, "payload"> & { payload: string };
    return { ...e, payload: Buffer.from(e.payload, "base64") };
  });
}

/** An object of a bucket: its key, its metadata and its content decompressed with the codec's own CLI. */
export interface ArchivedObject {
  key: string;
  metadata: Record<string, string>;
  content: Buffer;
}

/**
 * Every object under the bucket, in key order, read whole (a few at once) and decompressed with the codec's CLI
 * (`dir` holds the copies).
 */
export async function readBucket(s3: S3Client, bucket: string, dir: string): Promise<ArchivedObject[]> {
  const keys: string[] = [];
  let token: string | undefined;
  do {
    const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket, ContinuationToken: token }));
    for (const o of page.Contents ?? []) keys.push(o.Key ?? "");
    token = page.NextContinuationToken;
  } while (token !== undefined);
  const out: ArchivedObject[] = new Array<ArchivedObject>(keys.length);
  let next = 0;
  const worker = async () => {
    for (let i = next++; i < keys.length; i = next++) {
      const Key = keys[i] ?? "";
      const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key }));
      const file = join(dir, `object-${i}${Key.slice(Key.lastIndexOf("."))}`);
      writeFileSync(file, Buffer.from((await got.Body?.transformToByteArray()) ?? []));
      out[i] = { key: Key, metadata: got.Metadata ?? {}, content: decompressWithCli(file) };
      rmSync(file);
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  return out;
}

/** Copies every object of the bucket to `dir`, under its key, sixteen at a time; returns the keys. */
export async function downloadBucket(s3: S3Client, bucket: string, dir: string): Promise<string[]> {
  const keys: string[] = [];
  let token: string | undefined;
  do {
    const page = await s3.send(new ListObjectsV2Command({ Bucket: bucket, ContinuationToken: token }));
    for (const o of page.Contents ?? []) if (o.Key !== undefined) keys.push(o.Key);
    token = page.NextContinuationToken;
  } while (token !== undefined);
  let next = 0;
  const worker = async (): Promise<void> => {
    for (let i = next++; i < keys.length; i = next++) {
      const Key = keys[i] as string;
      const got = await s3.send(new GetObjectCommand({ Bucket: bucket, Key }));
      const file = join(dir, Key);
      mkdirSync(dirname(file), { recursive: true });
      writeFileSync(file, Buffer.from((await got.Body?.transformToByteArray()) ?? []));
    }
  };
  await Promise.all(Array.from({ length: 16 }, worker));
  return keys;
}

/** The lines of a decompressed archive file (each record followed by a newline). */
export function linesOf(content: Buffer): string[] {
  const text = content.toString("utf8");
  return text === "" ? [] : text.slice(0, text.endsWith("\n") ? -1 : undefined).split("\n");
}

/**
 * Appends zeros to `file` until `fs` has at most `leave` bytes free; a write the archiver's own writes beat to the last
 * bytes (ENOSPC) ends it as full.
 */
export function fillUntil(file: string, fs: string, leave: number): void {
  const chunk = Buffer.alloc(64 << 10);
  const fd = openSync(file, "w");
  try {
    for (;;) {
      const { bavail, bsize } = statfsSync(fs);
      const room = bavail * bsize - leave;
      if (room <= 0) return;
      writeSync(fd, chunk, 0, Math.min(chunk.length, room));
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOSPC") throw err;
  } finally {
    closeSync(fd);
  }
}
