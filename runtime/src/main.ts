#!/usr/bin/env node
// The entry point: turns on Node's on-disk compile cache (V8's code cache, and the TypeScript stripped from the
// sources), then loads and runs the CLI (cli.ts). Loading modules was 1.2 of the 1.6 s to the first fetch on the
// bench, and with the cache the first record came 0.25-0.45 s sooner, hence nothing is imported before it is on. It
// lives under NODE_COMPILE_CACHE, else Node's default in the temp directory; one that cannot be written leaves it off.
import module from "node:module";

module.enableCompileCache();
await import("./cli.ts");
