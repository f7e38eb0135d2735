// Shared by the object-store tests: configs, staged files, a log that keeps its lines, and a forwarding proxy in
// front of a testbed server, through which a test watches (and interrupts) an upload's requests.
import { randomBytes } from "node:crypto";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createServer, request, type IncomingMessage } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { TestContext } from "node:test";
import pino, { type Logger } from "pino";
import { parseConfigText } from "../../src/config/load.ts";
import type { ResolvedConfig } from "../../src/config/resolve.ts";
import type { UploadMeta } from "../../src/store/object/types.ts";

export const MIB = 1024 * 1024;
/** The smallest chunk size the config takes, so the tests' files stay small. */
export const CHUNK = 5 * MIB;
/** About 3.5 chunks: three whole parts and a short last one. */
export const BIG = 3 * CHUNK + CHUNK / 2 + 12_345;

export const META: UploadMeta = {
  records: 42,
  codec: "zstd",
  openedAt: Date.UTC(2026, 0, 2, 3, 4, 5, 6),
  closedAt: Date.UTC(2026, 0, 2, 3, 9, 5, 6),
};

export function config(yaml: string, env: NodeJS.ProcessEnv = {}): ResolvedConfig {
  return parseConfigText(`archive:\n  multipart_chunk_size: ${CHUNK}\n${yaml}`, { env, sourceName: "test.yaml" })
    .config;
}

/** A logger whose lines (JSON text) the test can read. */
export function captureLog(): { log: Logger; lines: string[] } {
  const lines: string[] = [];
  return { log: pino({ level: "debug" }, { write: (line: string) => void lines.push(line) }), lines };
}

/** A staged file of `size` random bytes, removed when the test ends. */
export async function staged(t: TestContext, size: number): Promise<{ path: string; data: Buffer }> {
  const dir = await mkdtemp(join(tmpdir(), "dfe-store-object-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  const data = randomBytes(size);
  const path = join(dir, "file.zst");
  await writeFile(path, data);
  return { path, data };
}

export interface Exchange {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingMessage["headers"];
  /** Set once the upstream answers. */
  status?: number | undefined;
}

/**
 * A proxy on 127.0.0.1 that forwards every request to `target` as it came (Host included, so a SigV4 signature
 * still holds) and rewrites a Location pointing at the target to point at itself. `onRequest` sees each request as
 * it starts, `onResponse` once it is over (answered or cut), `refuse` may answer it in the
 * target's stead; `exchanges` lists them all. Closed when the test ends.
 */
export async function proxy(
  t: TestContext,
  target: string,
  hooks: {
    onRequest?(x: Exchange): void;
    onResponse?(x: Exchange): void;
    /** A status to answer with instead of forwarding (the request's body is dropped). */
    refuse?(x: Exchange): number | undefined;
  } = {},
): Promise<{ url: string; exchanges: Exchange[] }> {
  const upstream = new URL(target);
  const exchanges: Exchange[] = [];
  const server = createServer((req, res) => {
    const x: Exchange = { method: req.method ?? "GET", url: req.url ?? "/", headers: req.headers };
    exchanges.push(x);
    hooks.onRequest?.(x);
    const refused = hooks.refuse?.(x);
    if (refused !== undefined) {
      x.status = refused;
      req.resume();
      res.on("close", () => hooks.onResponse?.(x));
      res.writeHead(refused, { "content-type": "text/plain" }).end("refused by the test proxy");
      return;
    }
    // The proxy already answered 100-continue itself; the upstream gets the body straight away.
    const { expect: _expect, ...headers } = req.headers;
    const out = request(
      { host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers },
      (up) => {
        x.status = up.statusCode;
        const back = { ...up.headers };
        if (typeof back.location === "string")
          back.location = back.location.replace(upstream.origin, `http://127.0.0.1:${port}`);
        res.writeHead(up.statusCode ?? 502, back);
        up.pipe(res);
      },
    );
    res.on("close", () => {
      out.destroy();
      hooks.onResponse?.(x);
    });
    out.on("error", () => res.destroy());
    req.on("error", () => out.destroy());
    req.pipe(out);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  t.after(
    () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  );
  return { url: `http://127.0.0.1:${port}`, exchanges };
}

/** Counts requests in flight that `match`, keeping the most seen at once. */
export function inFlight(match: (x: Exchange) => boolean) {
  const counter = { now: 0, max: 0, total: 0 };
  return {
    counter,
    onRequest(x: Exchange) {
      if (!match(x)) return;
      counter.now++;
      counter.total++;
      counter.max = Math.max(counter.max, counter.now);
    },
    onResponse(x: Exchange) {
      if (match(x)) counter.now--;
    },
  };
}
