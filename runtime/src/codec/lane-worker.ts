// A codec lane's thread (see lanes.ts): the compile cache first, then the lane's jobs (lane-jobs.ts). The cache is
// written once they are loaded, since the process ends a lane's thread without letting it write on exit.
import { enableCompileCache, flushCompileCache } from "../compile-cache.ts";

enableCompileCache();
await import("./lane-jobs.ts");
flushCompileCache();
