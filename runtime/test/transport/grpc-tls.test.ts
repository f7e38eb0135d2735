// The Push listener as openTransport builds it from the grpc section: TLS with a server certificate, mutual TLS
// with grpc.tls.ca_path, and the refusals of a TLS section that cannot work. Certificates are made with openssl.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { credentials, status, type ServiceError } from "@grpc/grpc-js";
import { pino } from "pino";
import { freePort, tempDir } from "../../../e2e/support/archiver.ts";
import { parseConfigText } from "../../src/config/load.ts";
import { resolveMemoryLimit } from "../../src/regulate/memory.ts";
import { GrpcTransport, grpcCredentials } from "../../src/transport/grpc.ts";
import { openTransport } from "../../src/transport/open.ts";
import { connectPush } from "../../src/transport/push-client.ts";
import type { Transport } from "../../src/transport/types.ts";
import { onlyFault, refusal } from "../config/helpers.ts";

const log = pino({ level: "silent" });
const memory = resolveMemoryLimit(1 << 30, 0.85);

interface Pki {
  dir: string;
  ca: Buffer;
  clientKey: Buffer;
  clientCert: Buffer;
}

/** A CA, a server certificate for 127.0.0.1 and a client certificate, all signed by the CA. */
function makePki(t: TestContext): Pki {
  const dir = tempDir(t, "dfe-grpc-tls-");
  const ssl = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  ssl(
    "req",
    "-x509",
    "-newkey",
    "rsa:2048",
    "-nodes",
    "-keyout",
    "ca.key",
    "-out",
    "ca.pem",
    "-days",
    "1",
    "-subj",
    "/CN=ca",
  );
  for (const [name, ext] of [
    ["server", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
    ["client", "extendedKeyUsage=clientAuth"],
  ] as const) {
    ssl(
      "req",
      "-newkey",
      "rsa:2048",
      "-nodes",
      "-keyout",
      `${name}.key`,
      "-out",
      `${name}.csr`,
      "-subj",
      `/CN=${name}`,
    );
    writeFileSync(join(dir, `${name}.ext`), `${ext}\n`);
    ssl(
      "x509",
      "-req",
      "-in",
      `${name}.csr`,
      "-CA",
      "ca.pem",
      "-CAkey",
      "ca.key",
      "-CAcreateserial",
      "-days",
      "1",
      "-extfile",
      `${name}.ext`,
      "-out",
      `${name}.pem`,
    );
  }
  const read = (f: string) => readFileSync(join(dir, f));
  return { dir, ca: read("ca.pem"), clientKey: read("client.key"), clientCert: read("client.pem") };
}

async function openGrpc(t: TestContext, yaml: string): Promise<{ transport: Transport; address: string }> {
  const port = await freePort();
  const { config } = parseConfigText(`transport: grpc\ngrpc:\n  listen: "127.0.0.1:${port}"\n${yaml}`, {
    env: {},
    sourceName: "test.yaml",
  });
  const transport = await openTransport(config, log, memory);
  await transport.start({ onBatch: async () => undefined, onAssigned: () => undefined, onRevoked: () => undefined });
  t.after(() => transport.close());
  return { transport, address: `127.0.0.1:${port}` };
}

async function pushOnce(address: string, creds: ReturnType<typeof credentials.createSsl>): Promise<number> {
  const client = connectPush(address, creds, { "grpc.initial_reconnect_backoff_ms": 100 });
  try {
    const res = await client.push({ records: [{ payload: Buffer.from("x") }] });
    return res.accepted;
  } finally {
    client.close();
  }
}

test("openTransport builds the Push listener on grpc: not replayable, plaintext unless TLS is set", async (t) => {
  const { transport, address } = await openGrpc(t, "");
  assert.ok(transport instanceof GrpcTransport);
  assert.equal(transport.replayable, false);
  assert.equal(await pushOnce(address, credentials.createInsecure()), 1);
});

test("grpc.tls cert and key serve TLS: a client trusting the CA pushes, a plaintext one cannot", async (t) => {
  const pki = makePki(t);
  const { address } = await openGrpc(
    t,
    `  tls: { cert_path: "${join(pki.dir, "server.pem")}", key_path: "${join(pki.dir, "server.key")}" }\n`,
  );
  assert.equal(await pushOnce(address, credentials.createSsl(pki.ca)), 1);
  await assert.rejects(
    pushOnce(address, credentials.createInsecure()),
    (e: ServiceError) => e.code === status.UNAVAILABLE,
  );
});

test("grpc.tls.ca_path asks for a client certificate the CA signed (mutual TLS)", async (t) => {
  const pki = makePki(t);
  const d = pki.dir;
  const { address } = await openGrpc(
    t,
    `  tls: { cert_path: "${join(d, "server.pem")}", key_path: "${join(d, "server.key")}", ca_path: "${join(d, "ca.pem")}" }\n`,
  );
  assert.equal(await pushOnce(address, credentials.createSsl(pki.ca, pki.clientKey, pki.clientCert)), 1);
  await assert.rejects(
    pushOnce(address, credentials.createSsl(pki.ca)),
    (e: ServiceError) => e.code === status.UNAVAILABLE,
    "no client certificate",
  );
});

test("a TLS section that cannot work is refused, naming the key and the fix", () => {
  const ca = onlyFault('transport: grpc\ngrpc: { listen: "0.0.0.0:50051", tls: { ca_path: /etc/ca.pem } }');
  assert.equal(ca.key, "grpc.tls.cert_path");
  assert.match(ca.message, /required when ca_path is set.*set cert_path and key_path/);
  const key = onlyFault('transport: grpc\ngrpc: { listen: "0.0.0.0:50051", tls: { cert_path: /etc/c.pem } }');
  assert.equal(key.key, "grpc.tls.key_path");
  const unreadable = refusal(() =>
    grpcCredentials({ cert_path: "/nonexistent/c.pem", key_path: "/nonexistent/k.pem" }),
  );
  assert.equal(unreadable.key, "grpc.tls.cert_path");
  assert.match(unreadable.message, /cannot read \/nonexistent\/c.pem .*readable PEM file/);
});
