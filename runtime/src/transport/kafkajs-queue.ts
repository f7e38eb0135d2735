// kafkajs 2.2's request queue re-arms its pending-requests check after every check, and with nothing queued and no
// throttle its delay is `-1 - Date.now()`: Node 24 warns (TimeoutNegativeWarning) and runs the check again a
// millisecond later, so every idle broker connection (the DLQ producer's, above all) woke the event loop about a
// thousand times a second (tulios/kafkajs#1704 and #1751, open upstream). With nothing queued and no throttle in
// force there is nothing to check: a request queued later arms the check itself (push), and a response or a timeout
// checks the queue directly.
import { createRequire } from "node:module";

/** The parts of kafkajs's RequestQueue (src/network/requestQueue) this reads. */
interface RequestQueue {
  readonly pending: readonly unknown[];
  readonly throttledUntil: number;
  scheduleCheckPendingRequests(this: RequestQueue): void;
}

const requireCjs = createRequire(import.meta.url);
let quieted = false;

/**
 * Makes kafkajs's request queues arm no check while there is nothing to check. Left as it is where the queue's code
 * is not the one this was written against (a later kafkajs may have fixed it its own way).
 */
export function quietIdleRequestQueues(): void {
  if (quieted) return;
  quieted = true;
  const queue = (requireCjs("kafkajs/src/network/requestQueue/index.js") as { prototype: RequestQueue }).prototype;
  const schedule = queue.scheduleCheckPendingRequests;
  if (!String(schedule).includes("this.throttledUntil - Date.now()")) return;
  queue.scheduleCheckPendingRequests = function (this: RequestQueue) {
    if (this.pending.length === 0 && this.throttledUntil <= Date.now()) return;
    schedule.call(this);
  };
}
