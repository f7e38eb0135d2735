// What a bench's runtime does with its time and its memory, preloaded into it:
//   DFE_BENCH_PROFILE=gc,heap NODE_OPTIONS=--import=./bench/profile.ts node bench/destinations.bench.ts 2000000 10k 1
// gc: V8 prints each collection (--trace-gc, which NODE_OPTIONS refuses as a flag of its own).
// heap: V8's sampling heap profiler, keeping what the collector has freed since, so the profile is every allocation
// by its call stack, not only what is live at the end (what --heap-prof writes); saved as
// <DFE_BENCH_PROFILE_DIR or the working directory>/heap-<pid>.heapprofile when the runtime exits, for Chrome's
// DevTools (Memory, Load) or a script. promoted: the same, less what the young generation's scavenges freed, so the
// objects that lived long enough to be promoted, which are what full collections mark and sweep. For where the time
// goes, NODE_OPTIONS="--cpu-prof --cpu-prof-dir=DIR" alone.
// Only the runtime is profiled: the process its memory limit restarted with V8's heap flags (regulate/heap.ts), not
// the bench that starts it nor the other scripts the same NODE_OPTIONS reach.
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector";
import { join } from "node:path";
import { setFlagsFromString } from "node:v8";
import { HEAP_SIZED_ENV } from "../runtime/src/regulate/heap.ts";

const wanted = new Set((process.env["DFE_BENCH_PROFILE"] ?? "").split(","));
if (process.env[HEAP_SIZED_ENV] !== undefined) {
  if (wanted.has("gc")) setFlagsFromString("--trace-gc");
  if (wanted.has("heap") || wanted.has("promoted")) {
    const session = new Session();
    session.connect();
    session.post("HeapProfiler.enable");
    session.post("HeapProfiler.startSampling", {
      samplingInterval: 16384,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: !wanted.has("promoted"),
    });
    const out = join(process.env["DFE_BENCH_PROFILE_DIR"] ?? process.cwd(), `heap-${process.pid}.heapprofile`);
    // A session on its own thread answers at once, so the profile is written before the process is gone.
    process.on("exit", () =>
      session.post("HeapProfiler.stopSampling", (err, r) => {
        if (err === null) writeFileSync(out, JSON.stringify(r.profile));
      }),
    );
  }
}
