// One run of a replica's process in the chaos tests, and how the test ended it.
import type { RunningArchiver } from "../support/archiver.ts";

export interface Incarnation {
  readonly name: string;
  readonly run: RunningArchiver;
  /** The signal the test sent it, once it did, and when. */
  signal?: NodeJS.Signals;
  signalAt?: number;
  exit?: number | string;
  exitAt?: number;
}
