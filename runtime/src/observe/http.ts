// /metrics (all, or only the metrics named by name[] parameters), /livez, /readyz, /health and /scaling/pressure on
// metrics_addr.
import type { Server } from "node:http";
import type { Registry } from "prom-client";

import type { HealthSnapshot } from "./health.ts";

export interface HealthSource {
  health(): HealthSnapshot;
  /** The scaling-pressure composite, 0-100. */
  pressure(): number;
}

export interface ObserveServer {
  readonly address: string;
  close(): Promise<void>;
}

// Not an ESM import: that builds a facade of every export of node:http, and reading them loads its lazy ones, undici
// (fetch, WebSocket) among them: 17-20 ms of the start against 2-3 ms for the module alone.
const { createServer } = process.getBuiltinModule("node:http");

export function parseListenAddr(addr: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d+)$/.exec(addr);
  const port = Number(m?.[3]);
  if (!m || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`metrics address '${addr}' is not host:port (for example 0.0.0.0:9090)`);
  }
  return { host: m[1] ?? (m[2] || "0.0.0.0"), port };
}

/**
 * The registry's exposition, or with `names` only those metrics, in the order asked (a name no metric has is left
 * out): a scrape of a counter or two costs tens of microseconds where the whole registry costs milliseconds, most of
 * it the process metrics (/proc/self/fd with a thousand files open, the heap's spaces).
 */
async function metricsText(registry: Registry, names: readonly string[]): Promise<string> {
  if (names.length === 0) return registry.metrics();
  const known = [...new Set(names)].filter((n) => registry.getSingleMetric(n) !== undefined);
  if (known.length === 0) return "";
  const texts = await Promise.all(known.map((n) => registry.getSingleMetricAsString(n)));
  return `${texts.join("\n\n")}\n`;
}

export async function startObserveServer(
  addr: string,
  registry: Registry,
  health: HealthSource,
): Promise<ObserveServer> {
  const { host, port } = parseListenAddr(addr);
  const server: Server = createServer((req, res) => {
    const send = (code: number, type: string, body: string) => {
      res.writeHead(code, { "content-type": type, "cache-control": "no-store" });
      res.end(body);
    };
    let url: URL;
    try {
      url = new URL(req.url ?? "/", "http://localhost");
    } catch {
      return send(400, "text/plain", "bad request target\n");
    }
    const path = url.pathname;
    switch (path) {
      case "/metrics":
        metricsText(registry, url.searchParams.getAll("name[]")).then(
          (text) => send(200, registry.contentType, text),
          (err: unknown) => send(500, "text/plain", String(err)),
        );
        return;
      case "/livez":
        return send(200, "text/plain", "ok\n");
      case "/readyz": {
        const h = health.health();
        const lines = Object.entries(h.components).map(
          ([k, c]) => `${k}: ${c.state}${c.reason ? ` (${c.reason})` : ""}`,
        );
        return send(h.ready ? 200 : 503, "text/plain", `${h.ready ? "ok" : "not ready"}\n${lines.join("\n")}\n`);
      }
      case "/health":
        return send(200, "application/json", JSON.stringify(health.health()));
      case "/scaling/pressure":
        return send(200, "application/json", JSON.stringify({ value: health.pressure() }));
      default:
        return send(404, "text/plain", "not found\n");
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => resolve());
  });
  const a = server.address();
  const bound =
    typeof a === "object" && a ? `${a.address.includes(":") ? `[${a.address}]` : a.address}:${a.port}` : addr;
  return {
    address: bound,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
