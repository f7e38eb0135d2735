// /metrics, /livez, /readyz, /health and /scaling/pressure on metrics_addr.
import { createServer, type Server } from "node:http";
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

export function parseListenAddr(addr: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d+)$/.exec(addr);
  const port = Number(m?.[3]);
  if (!m || !Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`metrics address '${addr}' is not host:port (for example 0.0.0.0:9090)`);
  }
  return { host: m[1] ?? (m[2] || "0.0.0.0"), port };
}

export async function startObserveServer(
  addr: string,
  registry: Registry,
  health: HealthSource,
): Promise<ObserveServer> {
  const { host, port } = parseListenAddr(addr);
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? "/").split("?")[0];
    const send = (code: number, type: string, body: string) => {
      res.writeHead(code, { "content-type": type, "cache-control": "no-store" });
      res.end(body);
    };
    switch (path) {
      case "/metrics":
        registry.metrics().then(
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
