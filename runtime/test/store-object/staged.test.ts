import { test } from "node:test";
import assert from "node:assert/strict";
import { chmod, truncate } from "node:fs/promises";
import { setTimeout as sleep } from "node:timers/promises";
import { ArchiverError } from "../../src/errors.ts";
import { PARTS_IN_FLIGHT, StagedFile, type Part } from "../../src/store/object/staged.ts";
import { STAGED_UNREADABLE } from "../../src/store/object/types.ts";
import { staged } from "./helpers.ts";

const PART = 64 * 1024;

async function rejection(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  assert.fail("expected a rejection");
}

test("sendParts: every part once, in file order, never more than PARTS_IN_FLIGHT at once or buffers than that", async (t) => {
  const { path, data } = await staged(t, 13 * PART + 999);
  const file = await StagedFile.open(path, data.length);
  t.after(() => file.close());
  const got: Buffer[] = [];
  const buffers = new Set<ArrayBufferLike>();
  let now = 0;
  let max = 0;
  await file.sendParts({ partSize: PART, emptyPart: false, signal: undefined }, async (part: Part) => {
    max = Math.max(max, ++now);
    buffers.add(part.data.buffer);
    // The first parts hold on until the pump has filled every slot, so a pump that allowed more would show it.
    while (part.number <= PARTS_IN_FLIGHT && max < PARTS_IN_FLIGHT) await sleep(1);
    // Uneven delays, so later parts finish before earlier ones.
    await sleep((part.number * 7) % 5);
    got[part.number - 1] = Buffer.from(part.data);
    now--;
  });
  assert.equal(got.length, 14);
  assert.ok(Buffer.concat(got).equals(data));
  assert.equal(max, PARTS_IN_FLIGHT);
  assert.ok(buffers.size <= PARTS_IN_FLIGHT, `${buffers.size} part buffers`);
});

test("sendParts: an empty file is one empty part, or none", async (t) => {
  const { path } = await staged(t, 0);
  const file = await StagedFile.open(path, 0);
  t.after(() => file.close());
  const sizes: number[] = [];
  const record = async (p: Part) => void sizes.push(p.data.length);
  await file.sendParts({ partSize: PART, emptyPart: true, signal: undefined }, record);
  assert.deepEqual(sizes, [0]);
  await file.sendParts({ partSize: PART, emptyPart: false, signal: undefined }, record);
  assert.deepEqual(sizes, [0]);
});

test("sendParts: a failed part aborts the others, reads no further, and is thrown once they have settled", async (t) => {
  const { path, data } = await staged(t, 20 * PART);
  const file = await StagedFile.open(path, data.length);
  t.after(() => file.close());
  const boom = new Error("part 2 refused");
  const started: number[] = [];
  let settled = 0;
  const err = await rejection(
    file.sendParts({ partSize: PART, emptyPart: false, signal: undefined }, async (part, signal) => {
      started.push(part.number);
      try {
        if (part.number === 2) {
          await sleep(5);
          throw boom;
        }
        await new Promise<void>((_, reject) => signal.addEventListener("abort", () => reject(new Error("aborted"))));
      } finally {
        settled++;
      }
    }),
  );
  assert.equal(err, boom);
  assert.deepEqual(started, [1, 2, 3, 4]);
  assert.equal(settled, 4, "every part in flight settled before the failure was thrown");
});

test("sendParts: the caller's abort reaches the parts in flight", async (t) => {
  const { path, data } = await staged(t, 8 * PART);
  const file = await StagedFile.open(path, data.length);
  t.after(() => file.close());
  const ac = new AbortController();
  let sent = 0;
  const err = await rejection(
    file.sendParts({ partSize: PART, emptyPart: false, signal: ac.signal }, async (_part, signal) => {
      if (++sent === 2) ac.abort(new Error("shutdown"));
      signal.throwIfAborted();
      await sleep(1);
    }),
  );
  assert.equal(sent, 2, "no part starts after the abort");
  assert.match(String(err), /shutdown/);
});

test("whole: the staged size in one buffer, never the bytes the file has grown by", async (t) => {
  const { path, data } = await staged(t, PART + 7);
  const file = await StagedFile.open(path, PART);
  t.after(() => file.close());
  assert.ok((await file.whole()).equals(data.subarray(0, PART)));
  const { path: empty } = await staged(t, 0);
  const none = await StagedFile.open(empty, 0);
  t.after(() => none.close());
  assert.equal((await none.whole()).length, 0);
});

test("StagedFile: missing, unreadable by permission or shorter than staged is STAGED_UNREADABLE", async (t) => {
  const { path, data } = await staged(t, 3 * PART);
  const unreadable = async (p: Promise<unknown>) => {
    const err = await rejection(p);
    assert.ok(err instanceof ArchiverError);
    assert.equal(err.code, STAGED_UNREADABLE);
    assert.equal(err.kind, "permanent");
    return err;
  };
  await unreadable(StagedFile.open(path + ".gone", 1));
  await unreadable(StagedFile.open(path, data.length + 1));
  // Shrinks after it was opened: the part past the end is short.
  const file = await StagedFile.open(path, data.length);
  t.after(() => file.close());
  await truncate(path, PART + 10);
  await unreadable(file.sendParts({ partSize: PART, emptyPart: false, signal: undefined }, async () => {}));
  const chunks = async () => {
    for await (const _ of file.chunks(PART));
  };
  await unreadable(chunks());
  await unreadable(file.whole());
  if (process.getuid?.() !== 0) {
    // root reads whatever the mode says, so the permission case only holds for other users.
    await chmod(path, 0o000);
    const err = await unreadable(StagedFile.open(path, 1));
    assert.equal((err.cause as { code?: string }).code, "EACCES");
  }
});
