import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { connect } from "node:net";
import { test } from "node:test";
import { Counter, Gauge, Registry } from "prom-client";
import { Health } from "../../src/observe/health.ts";
import { startObserveServer } from "../../src/observe/http.ts";

async function serve(t: { after: (fn: () => Promise<void>) => void }) {
  const registry = new Registry();
  const received = new Counter({ name: "messages_received_total", help: "received", registers: [registry] });
  const held = new Gauge({ name: "held_records", help: "held", labelNames: ["partition"], registers: [registry] });
  received.inc(7);
  held.set({ partition: "3" }, 2);
  const health = new Health();
  const server = await startObserveServer("127.0.0.1:0", registry, {
    health: () => health.snapshot(),
    pressure: () => 0,
  });
  t.after(() => server.close());
  const get = async (path: string) => {
    const res = await fetch(`http://${server.address}${path}`);
    return { status: res.status, type: res.headers.get("content-type"), body: await res.text() };
  };
  return { registry, address: server.address, get };
}

test("/metrics serves the whole registry, or only the metrics its name[] parameters name", async (t) => {
  const { registry, get } = await serve(t);
  const all = await get("/metrics");
  assert.equal(all.status, 200);
  assert.equal(all.type, registry.contentType);
  assert.equal(all.body, await registry.metrics());

  const one = await get("/metrics?name[]=held_records");
  assert.equal(one.status, 200);
  assert.equal(one.type, registry.contentType);
  assert.equal(one.body, '# HELP held_records held\n# TYPE held_records gauge\nheld_records{partition="3"} 2\n');

  // In the order asked, each once; a name no metric has is left out, as is an encoded one that matches nothing.
  const two = await get(
    "/metrics?name%5B%5D=messages_received_total&name[]=nope&name[]=held_records&name[]=held_records",
  );
  assert.equal(
    two.body,
    "# HELP messages_received_total received\n# TYPE messages_received_total counter\nmessages_received_total 7\n\n" +
      '# HELP held_records held\n# TYPE held_records gauge\nheld_records{partition="3"} 2\n',
  );
  const none = await get("/metrics?name[]=nope");
  assert.equal(none.status, 200);
  assert.equal(none.body, "");
  // Parameters of any other name change nothing.
  assert.equal((await get("/metrics?x=1")).body, await registry.metrics());
});

test("the other endpoints answer beside /metrics, and an unknown path is a 404", async (t) => {
  const { get } = await serve(t);
  assert.deepEqual(await get("/livez"), { status: 200, type: "text/plain", body: "ok\n" });
  assert.equal((await get("/scaling/pressure")).body, JSON.stringify({ value: 0 }));
  assert.equal((await get("/readyz?verbose=1")).status, 200);
  assert.equal((await get("/nope")).status, 404);
});

test("a request target that is no URL is a 400, and the server serves on", async (t) => {
  const { address, get } = await serve(t);
  const [host, port] = [
    address.slice(0, address.lastIndexOf(":")),
    Number(address.slice(address.lastIndexOf(":") + 1)),
  ];
  const socket = connect(port, host);
  socket.end("GET http://[ HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  let reply = "";
  for await (const chunk of socket) reply += String(chunk);
  assert.match(reply, /^HTTP\/1\.1 400 /);
  assert.equal((await get("/livez")).status, 200);
});

test("serving loads node:http alone, not the undici behind its lazy exports (fetch, WebSocket)", () => {
  const child = `
    const { startObserveServer } = await import(${JSON.stringify(new URL("../../src/observe/http.ts", import.meta.url).href)});
    const server = await startObserveServer("127.0.0.1:0", { metrics: async () => "" }, { health: () => ({}), pressure: () => 0 });
    await server.close();
    console.log(process.moduleLoadList.filter((m) => m.includes("undici")).length);`;
  const r = spawnSync(process.execPath, ["--input-type=module", "-e", child], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout.trim(), "0");
});
