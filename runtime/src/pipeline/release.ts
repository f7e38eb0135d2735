// Release: every held record's outcome. A complete file releases its records Done; a batch the codec or the store
// refuses for good, or a record nested too deep, is dead-lettered (Rejected once the DLQ confirms) or dropped and
// counted; what could not be written is Errored, withheld for the restart to read again where the source can replay
// it, else dropped and counted as unreplayable. Each release asks for a commit.
import type { Logger } from "pino";
import type { CompletedFile } from "../archive/writers.ts";
import { viewsOf, wholeBatch, type BufferedRecords, type FlushBatch } from "../buffer/hot.ts";
import type { Spill } from "../buffer/spill.ts";
import { readBlocks } from "../codec/blocks.ts";
import type { Codec } from "../codec/index.ts";
import type { Hold } from "../delivery/hold.ts";
import type { OffsetTracker } from "../delivery/tracker.ts";
import type { DeadLetter, KafkaDlq } from "../dlq/kafka.ts";
import { ArchiverError, isRetryable } from "../errors.ts";
import type { Metrics } from "../observe/metrics.ts";
import type { InboundBatch } from "../records.ts";
import type { StagedManifest } from "../store/manifest.ts";
import type { StagingStore } from "../store/staging.ts";

export interface ReleaseDeps {
  /** Offsets are held until their records are durable (kafka with acknowledgements): an Errored hold withholds. */
  readonly offsetsHeld: boolean;
  /** The destination a record without a topic dead-letters under. */
  readonly defaultSegment: string;
  readonly tracker: OffsetTracker;
  /** Undefined with the DLQ off: what it would take is dropped and counted. */
  readonly dlq: Pick<KafkaDlq, "fits" | "ceiling" | "send"> | undefined;
  readonly staging: StagingStore | undefined;
  /** The hot buffers' spill: a refused batch's spilled records are read back from it. */
  readonly spill: Spill | undefined;
  readonly codec: Codec;
  readonly metrics: Metrics;
  readonly log: Logger;
  scheduleCommit(): void;
  /** Keeps the drain waiting for `work` (a dead-letter write, a read-back). */
  track(work: Promise<void>): void;
  /** Stops the pipeline with `reason`, so the restart reads again what was withheld. */
  withhold(reason: string): void;
}

export class Release {
  readonly #d: ReleaseDeps;

  constructor(deps: ReleaseDeps) {
    this.#d = deps;
  }

  /** Records nested past 64 levels are never parsed: dead-lettered as they arrived, or dropped and counted. */
  tooDeep(batch: InboundBatch, slot: number, g: BufferedRecords): void {
    const { dlq, metrics, log, tracker } = this.#d;
    const reason = "payload nesting exceeds the maximum parse depth of 64";
    const destination = batch.topic ?? this.#d.defaultSegment;
    if (dlq === undefined) {
      metrics.messagesDropped.inc({ reason: "too_deep" }, g.count);
      log.warn({ topic: batch.topic, partition: batch.partition, records: g.count }, `${reason}: dropped`);
      return;
    }
    const hold = tracker.open();
    const letters: DeadLetter[] = [];
    let start = 0;
    const { data, ends, offsets } = viewsOf(g);
    for (let i = 0; i < g.count; i++) {
      const offset = offsets[i] ?? 0;
      const end = ends[i] ?? start;
      hold.add(slot, offset);
      letters.push({
        // A copy: the reply's memory goes back to the lanes while the DLQ still holds its letters.
        payload: Buffer.from(data.subarray(start, end - 1)),
        reason,
        destination,
        topic: batch.topic,
        partition: batch.partition,
        offset: String(offset),
      });
      start = end;
    }
    this.#deadLetter(hold, letters);
  }

  /**
   * Sends what fits to the DLQ and releases the hold Rejected once the DLQ confirms; an entry no backend can hold
   * is dropped and counted; a failed DLQ write is Errored, so the restart reads the records again.
   */
  #deadLetter(hold: Hold, letters: readonly DeadLetter[]): void {
    const { dlq, metrics, log, tracker } = this.#d;
    if (dlq === undefined) throw new Error("dead letter without a DLQ");
    const fit = letters.filter((l) => dlq.fits(l.payload.length));
    const tooLarge = letters.length - fit.length;
    if (tooLarge > 0) {
      metrics.messagesDropped.inc({ reason: "dlq_too_large" }, tooLarge);
      log.error({ records: tooLarge, ceiling: dlq.ceiling }, "dead letters larger than any DLQ backend holds: dropped");
    }
    if (fit.length === 0) {
      tracker.release(hold, "dropped");
      this.#d.scheduleCommit();
      return;
    }
    const sent = dlq.send(fit).then(
      () => {
        tracker.release(hold, "rejected");
        metrics.messagesDlq.inc(fit.length);
        this.#d.scheduleCommit();
      },
      (err: unknown) => this.#errored([hold], "DLQ write failed", { err, entries: fit.length }),
    );
    this.#d.track(sent);
  }

  /** The codec or the store refused the batch for good: dead-lettered, or released Dropped and counted. */
  refused(b: FlushBatch, err: unknown): void {
    const { dlq, metrics, log, tracker } = this.#d;
    if (dlq === undefined) {
      tracker.release(b.hold, "dropped");
      metrics.messagesDropped.inc({ reason: "refused" }, b.records);
      log.error({ err, destination: b.destination, records: b.records }, "batch refused for good: records dropped");
      this.#d.scheduleCommit();
      return;
    }
    log.warn({ err, destination: b.destination, records: b.records }, "batch refused for good: dead-lettering");
    const reason = err instanceof Error ? err.message : String(err);
    const letters: DeadLetter[] = [];
    const { data, ends, offsets, runs } = wholeBatch(b, this.#d.spill);
    let i = 0;
    let start = 0;
    for (let r = 0; r < runs.length; r += 3) {
      const ref = tracker.ref(runs[r] ?? 0);
      for (let k = 0; k < (runs[r + 1] ?? 0); k++, i++) {
        const end = ends[i] ?? start;
        letters.push({
          payload: data.subarray(start, end - 1),
          reason,
          destination: b.destination,
          topic: ref.topic,
          partition: ref.partition,
          offset: String(offsets[i]),
        });
        start = end;
      }
    }
    this.#deadLetter(b.hold, letters);
  }

  /** A write that failed: its batch is Errored. */
  writeFailed(b: FlushBatch, err: unknown): void {
    this.#d.metrics.archiveErrors.inc();
    this.#errored([b.hold], "archive write failed", { err, destination: b.destination, records: b.records });
  }

  completed(f: CompletedFile<Hold>): void {
    const { metrics, log, tracker } = this.#d;
    if (f.outcome === "done") {
      for (const h of f.tickets) tracker.release(h, "done");
      metrics.messagesArchived.inc(f.records);
      log.debug({ path: f.relPath, records: f.records, bytes: f.bytes }, "archive file complete");
      this.#d.scheduleCommit();
      return;
    }
    const code = f.error instanceof ArchiverError ? f.error.code : undefined;
    if (code === "upload_pending_at_shutdown") {
      // Its staged copy stays on disk and its offsets stay unreleased: the restart reads the records again.
      log.warn({ path: f.relPath, records: f.records }, "still uploading at shutdown: offsets left uncommitted");
      return;
    }
    // Only a file the store refused for good is read back to the DLQ: staging keeps its copy for that. One that could
    // not complete (its sync, its name, its manifest failed) or cannot be read back is Errored and read again.
    const kept = this.#d.staging?.readBack(f.relPath);
    if (f.error !== undefined && !isRetryable(f.error) && kept !== undefined) {
      this.#d.track(this.#readBackRefused(f, f.error, kept));
      return;
    }
    this.#errored(f.tickets, "archive file could not complete", { err: f.error, path: f.relPath, records: f.records });
  }

  /**
   * The store refused a whole file for good. Its staged copy is read back a block at a time (each block one flush)
   * and its records dead-lettered one entry per line, or, when the file holds more lines than records (a payload
   * with a newline of its own), each block whole as one entry, so no record is split across entries.
   */
  async #readBackRefused(f: CompletedFile<Hold>, err: unknown, staged: StagedManifest): Promise<void> {
    const { dlq, staging, codec, metrics, log, tracker } = this.#d;
    const [hold, ...rest] = f.tickets;
    if (hold === undefined) return;
    for (const h of rest) tracker.merge(hold, h);
    if (dlq === undefined) {
      tracker.release(hold, "dropped");
      metrics.messagesDropped.inc({ reason: "refused" }, f.records);
      log.error({ err, path: f.relPath, records: f.records }, "store refused the file for good: records dropped");
    } else {
      const reason = err instanceof Error ? err.message : String(err);
      const destination = f.destination;
      const letters: DeadLetter[] = [];
      try {
        let lines = 0;
        for await (const block of readBlocks(codec, staged.stagedPath, staged.blockLengths)) {
          for (let at = block.indexOf(0x0a); at >= 0; at = block.indexOf(0x0a, at + 1)) lines++;
        }
        const whole = lines > f.records;
        let index = 0;
        for await (const block of readBlocks(codec, staged.stagedPath, staged.blockLengths)) {
          const base = { reason, destination, topic: undefined, partition: undefined, offset: undefined };
          if (whole) {
            letters.push({ ...base, payload: block, records: staged.blockRecords[index++] ?? 0 });
            continue;
          }
          let start = 0;
          for (let at = block.indexOf(0x0a); at >= 0; at = block.indexOf(0x0a, at + 1)) {
            letters.push({ ...base, payload: block.subarray(start, at) });
            start = at + 1;
          }
        }
      } catch (readErr) {
        this.#errored([hold], "refused file could not be read back", { err: readErr, path: f.relPath });
        return;
      }
      log.warn({ err, path: f.relPath, records: f.records }, "store refused the file for good: dead-lettering");
      this.#deadLetter(hold, letters);
    }
    await staging?.discard(f.relPath).catch((e: unknown) => log.warn({ err: e }, "refused copy not removed"));
    this.#d.scheduleCommit();
  }

  /**
   * Releases holds Errored. Where the source reads them again from the held offsets (kafka with acknowledgements),
   * the process drains and exits so the restart does. A source that cannot deliver them again (grpc, or kafka with
   * acknowledgements off) has already let them go: they are counted dropped as unreplayable and the pipeline runs on.
   */
  #errored(holds: readonly Hold[], reason: string, fields: Record<string, unknown>): void {
    const { metrics, log, tracker } = this.#d;
    if (this.#d.offsetsHeld) {
      for (const h of holds) tracker.release(h, "errored");
      log.error(fields, `${reason}: offsets withheld`);
      this.#d.withhold(reason);
      return;
    }
    let records = 0;
    for (const h of holds) records += tracker.release(h, "dropped");
    metrics.messagesDropped.inc({ reason: "unreplayable" }, records);
    log.error({ ...fields, records }, `${reason}: records dropped, the source cannot deliver them again`);
    this.#d.scheduleCommit();
  }
}
