// The drain's order and its upload grace (pipeline/drain.ts), over steps that record what ran when.
import assert from "node:assert/strict";
import { test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { drain, type DrainSteps, type DrainUploads } from "../../src/pipeline/drain.ts";

/**
 * Steps that log their names; each async one resolves after `ms[name]` (0 by default). With `graceMs`, a staged
 * destination's uploads of that grace.
 */
function steps(over: Partial<DrainSteps> = {}, ms: Record<string, number> = {}, graceMs?: number) {
  const ran: string[] = [];
  const step = (name: string) => async () => {
    ran.push(name);
    await sleep(ms[name] ?? 0);
    ran.push(`${name} done`);
  };
  const sync = (name: string) => () => void ran.push(name);
  const all: DrainSteps = {
    stopReceiving: step("stopReceiving"),
    uploads: graceMs === undefined ? undefined : uploads(ran, graceMs),
    releaseIntake: sync("releaseIntake"),
    batchesEnded: step("batchesEnded"),
    flushBuffers: step("flushBuffers"),
    flushesLanded: step("flushesLanded"),
    closeFiles: step("closeFiles"),
    stopTicking: sync("stopTicking"),
    lastCommit: step("lastCommit"),
    gauges: sync("gauges"),
    close: step("close"),
    exitReason: () => undefined,
    ...over,
  };
  return { all, ran };
}

function uploads(ran: string[], graceMs: number): DrainUploads {
  return {
    graceMs,
    hurry: () => void ran.push("hurry"),
    drain: async (grace) => void ran.push(`drainUploads ${grace}`),
  };
}

/** What follows the files' completion, staged or local. */
const AFTER_FILES = ["stopTicking", "lastCommit", "lastCommit done", "gauges", "close", "close done"];

test("a local destination's drain runs each step once, each after the one before has ended", async () => {
  const { all, ran } = steps();
  assert.deepEqual(await drain(all), { code: 0 });
  assert.deepEqual(ran, [
    "stopReceiving",
    "stopReceiving done",
    "releaseIntake",
    "batchesEnded",
    "batchesEnded done",
    "flushBuffers",
    "flushBuffers done",
    "flushesLanded",
    "flushesLanded done",
    "closeFiles",
    "closeFiles done",
    ...AFTER_FILES,
  ]);
});

test("uploads are hurried at once; files closed within the grace leave the pending uploads the whole grace", async () => {
  const { all, ran } = steps({}, { closeFiles: 10 }, 200);
  await drain(all);
  assert.deepEqual(ran.slice(0, 3), ["stopReceiving", "stopReceiving done", "hurry"]);
  assert.deepEqual(ran.slice(ran.indexOf("closeFiles")), [
    "closeFiles",
    "closeFiles done",
    "drainUploads 200",
    ...AFTER_FILES,
  ]);
});

test("files still closing when the grace ends: the uploads get no more, and the drain still waits for the files", async () => {
  const { all, ran } = steps({}, { closeFiles: 120 }, 30);
  await drain(all);
  assert.deepEqual(ran.slice(ran.indexOf("closeFiles"), ran.indexOf("stopTicking")), [
    "closeFiles",
    "drainUploads 0",
    "closeFiles done",
  ]);
});

test("the exit names the reason it is not clean", async () => {
  const { all } = steps({ exitReason: () => "offsets withheld" });
  assert.deepEqual(await drain(all), { code: 1, reason: "offsets withheld" });
});
