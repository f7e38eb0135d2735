// An HTTP proxy in front of the testbed's MinIO, for tests that need the store to answer slowly or to refuse one
// request. Everything it does not intercept is MinIO's own request and answer, byte for byte: the Host header, which
// S3 signatures cover, passes unchanged.
import { createServer, request, type IncomingMessage } from "node:http";
import type { TestContext } from "node:test";
import { need } from "./testbed.ts";

/** What the proxy does with a request: forwards it (after any wait the interceptor took), or answers it itself. */
export type Intercept = (req: IncomingMessage, url: URL) => Promise<{ status: number; body: string } | undefined>;

export interface StoreProxy {
  readonly endpoint: string;
  /** Requests received and not yet answered. */
  readonly inFlight: number;
}

export async function storeProxy(t: TestContext, intercept: Intercept): Promise<StoreProxy> {
  const target = new URL(need("TESTBED_MINIO_ENDPOINT"));
  let inFlight = 0;
  const server = createServer((req, res) => {
    inFlight++;
    res.on("close", () => inFlight--);
    const url = new URL(req.url ?? "/", "http://proxy");
    intercept(req, url).then(
      (answer) => {
        if (answer !== undefined) {
          req.resume();
          req.on("end", () => {
            res.writeHead(answer.status, { "content-type": "application/xml" });
            res.end(answer.body);
          });
          return;
        }
        // Expect is never signed: the proxy answers it itself rather than forward it.
        const headers = { ...req.headers };
        delete headers.expect;
        const up = request(
          { host: target.hostname, port: target.port, method: req.method, path: req.url, headers },
          (got) => {
            res.writeHead(got.statusCode ?? 502, got.headers);
            got.pipe(res);
          },
        );
        up.on("error", (err) => res.destroy(err));
        req.pipe(up);
      },
      (err: unknown) => res.destroy(err instanceof Error ? err : new Error(String(err))),
    );
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.after(
    () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  );
  const a = server.address();
  const endpoint = `http://127.0.0.1:${typeof a === "object" && a ? a.port : 0}`;
  return {
    endpoint,
    get inFlight() {
      return inFlight;
    },
  };
}

/** An S3 error answer, as the SDK reads it: the code becomes the error's name. */
export function s3Error(code: string, message: string, resource: string): { status: number; body: string } {
  return {
    status: 400,
    body:
      `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${message}</Message>` +
      `<Resource>${resource}</Resource><RequestId>proxy</RequestId></Error>`,
  };
}
