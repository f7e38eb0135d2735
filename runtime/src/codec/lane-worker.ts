// A codec lane's thread (see lanes.ts): the compile cache first (a thread's is its own to turn on, see main.ts), then
// the lane's jobs (lane-jobs.ts). The cache is written once they are loaded: the process ends a lane's thread at exit
// without letting it write.
import module from "node:module";

module.enableCompileCache();
await import("./lane-jobs.ts");
module.flushCompileCache();
