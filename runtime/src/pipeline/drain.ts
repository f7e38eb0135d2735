// The drain on shutdown, in its order: stop receiving, let the batches in hand end, flush every buffer, land every
// flush, complete every file (uploads within their grace), commit, close. Each step is the pipeline's (see
// pipeline.ts); the order and the upload grace are decided here alone.
import { setTimeout as sleep } from "node:timers/promises";

export type PipelineExit = { code: 0 } | { code: 1; reason: string };

export interface DrainSteps {
  /** The transport stops handing batches (a push listener hands over what it queued). */
  stopReceiving(): Promise<void>;
  /** A staged destination's uploads, which the drain waits for; undefined for a local destination. */
  readonly uploads: DrainUploads | undefined;
  /** Intake waiting for room goes on: a replayable source's batches are refused from now, a push source's written. */
  releaseIntake(): void;
  /** Resolves once no batch is being routed or buffered. */
  batchesEnded(): Promise<void>;
  /** Flushes every buffer, as room in flight allows: resolves once none is left. */
  flushBuffers(): Promise<void>;
  /** Resolves once every flush, dead-letter write and read-back has ended. */
  flushesLanded(): Promise<void>;
  /** Completes every open file: resolves once each is complete or given up. */
  closeFiles(): Promise<void>;
  /** Stops the housekeeping timer. */
  stopTicking(): void;
  /** The last commit, covering whatever a spaced one waits to commit. */
  lastCommit(): Promise<void>;
  /** The gauges read once more, as drained. */
  gauges(): void;
  /** Closes the transport and the DLQ. */
  close(): Promise<void>;
  /** Why the exit is not clean (a withheld write, offsets withheld), or undefined. */
  exitReason(): string | undefined;
}

export interface DrainUploads {
  /** How long the files may take to close; closed in time, the uploads still pending get as long again. */
  readonly graceMs: number;
  /** Uploads backing off try again at once: the drain's grace is all the time they have left. */
  hurry(): void;
  /** Waits up to `graceMs` for pending uploads; a file still uploading then keeps its staged copy and offsets. */
  drain(graceMs: number): Promise<void>;
}

export async function drain(steps: DrainSteps): Promise<PipelineExit> {
  await steps.stopReceiving();
  const uploads = steps.uploads;
  uploads?.hurry();
  steps.releaseIntake();
  await steps.batchesEnded();
  await steps.flushBuffers();
  await steps.flushesLanded();
  const closing = steps.closeFiles();
  if (uploads !== undefined) {
    const grace = new AbortController();
    const closed = await Promise.race([
      closing.then(() => true),
      sleep(uploads.graceMs, false, { signal: grace.signal }).catch(() => false),
    ]);
    grace.abort();
    await uploads.drain(closed ? uploads.graceMs : 0);
  }
  await closing;
  steps.stopTicking();
  await steps.lastCommit();
  steps.gauges();
  await steps.close();
  const reason = steps.exitReason();
  return reason ? { code: 1, reason } : { code: 0 };
}
