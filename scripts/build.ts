// npm run build: the runtime and the operator, each bundled by esbuild into dist/ (the images run dist/ as the bench
// does). One bundle rather than a module per file: Node resolves, reads and links each module of an unbundled tree
// one by one, and the runtime's ~900 (the Kafka client alone 330, zod, yaml, ajv, pino) were 0.4 s of its start,
// before the first record; bundled, a pod scaled from zero reads its first records 0.1-0.2 s sooner.
// Usage: node_modules/.bin/node scripts/build.ts [OUTDIR]   (default dist/ at the repo root)
import { rmSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import { build, type BuildOptions, type Plugin } from "esbuild";
import { gitCommit } from "../runtime/src/version.ts";

const root = resolve(import.meta.dirname, "..");
const out = resolve(process.argv[2] ?? resolve(root, "dist"));

/**
 * Left to node_modules: packages that load files beside their own modules (native addons, a .wasm file), which a
 * bundle would not carry, and the big clients loaded only when configured (an object store, gRPC, kafkajs, the
 * Kubernetes client), which a lazy import keeps off the start either way.
 */
const EXTERNAL = [
  "snappy",
  "lz4-napi",
  "@node-rs/crc32",
  "@platformatic/wasm-utils",
  "@aws-sdk/*",
  "@google-cloud/*",
  "@azure/*",
  "@grpc/*",
  "kafkajs",
  "@kubernetes/client-node",
];

/** The Kafka client's module that makes its ajv instance, where scripts/lazy-validators.ts is applied. */
const CLIENT_AJV = /[\\/]@platformatic[\\/]kafka[\\/]dist[\\/]utils\.js$/;
let clientAjvSeen = false;

/** Appends to the client's utils.js, after its `ajv` is made and before any schema of it compiles, the switch. */
const lazyValidators: Plugin = {
  name: "lazy-validators",
  setup(b) {
    b.onLoad({ filter: CLIENT_AJV }, async (args) => {
      const text = await readFile(args.path, "utf8");
      if (!/^export const ajv = /m.test(text)) {
        throw new Error(`${args.path} no longer makes "export const ajv": see scripts/lazy-validators.ts`);
      }
      clientAjvSeen = true;
      const helper = JSON.stringify(resolve(root, "scripts/lazy-validators.ts"));
      return {
        contents: `${text}\nimport { compileOnFirstUse } from ${helper};\ncompileOnFirstUse(ajv);\n`,
        loader: "js",
      };
    });
  },
};

const common: BuildOptions = {
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node24",
  // The lazy imports (a store, a transport, the DLQ) stay lazy: each is a chunk of its own, loaded when imported.
  splitting: true,
  entryNames: "[name]",
  chunkNames: "chunk-[hash]",
  sourcemap: "linked",
  external: EXTERNAL,
  plugins: [lazyValidators],
  // The CommonJS packages bundled (pino, prom-client) require Node's modules, which an ES module has no require for.
  banner: {
    js: 'import { createRequire as __createRequire } from "node:module"; const require = __createRequire(import.meta.url);',
  },
  logLevel: "warning",
  // The commit --version names (runtime/src/version.ts); empty where the sources are no git checkout (an image's build).
  define: { DFE_ARCHIVER_COMMIT: JSON.stringify(gitCommit() ?? "") },
};

rmSync(out, { recursive: true, force: true });
await Promise.all([
  // The lanes' worker lies beside the chunk that starts it (codec/lanes.ts finds it next to itself).
  build({
    ...common,
    entryPoints: [resolve(root, "runtime/src/main.ts"), resolve(root, "runtime/src/codec/lane-worker.ts")],
    outdir: resolve(out, "runtime/src"),
  }),
  build({ ...common, entryPoints: [resolve(root, "operator/src/main.ts")], outdir: resolve(out, "operator/src") }),
]);
// A client that moved its ajv elsewhere would start 0.16 s slower with nothing said: say it.
if (!clientAjvSeen)
  throw new Error("the build never loaded @platformatic/kafka's utils.js: see scripts/lazy-validators.ts");
