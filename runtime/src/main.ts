#!/usr/bin/env node
// The entry point: refuses a Node older than 24 in one line (node-check.ts), turns on Node's on-disk compile cache
// (V8's code cache, and the TypeScript stripped from the sources), then loads and runs the CLI (cli.ts). Loading
// modules was 1.2 of the 1.6 s to the first fetch on the bench, and with the cache the first record came 0.25-0.45 s
// sooner, hence nothing is imported before it is on. It lives under NODE_COMPILE_CACHE, else Node's default in the
// temp directory; one that cannot be written leaves it off.
import module from "node:module";
import { refuseUnsupportedNode } from "./node-check.ts";

// Before any Node 24 API: module.enableCompileCache below is the first an older Node would die on.
refuseUnsupportedNode("dfe-archiver");
// libuv's pool runs every file operation, and its default of 4 threads queued the fsyncs of a drain's completes (each
// file, then its directories): with 16, ext4 commits more of them together, and the bench's 1000 files completed in
// 0.54 s against 0.66. libuv reads it when the pool first starts, hence here, before any file operation; a size the
// environment sets is kept.
process.env.UV_THREADPOOL_SIZE ??= "16";
module.enableCompileCache();
const { main } = await import("./cli.ts");
main(process.argv.slice(2));
