// e2e/testbed/up's lock and its check of the apiserver's key pairs (issue 34), run on a control plane of the test's
// own: its own cache (DFE_ARCHIVER_CACHE), ports and env file, so that the shared testbed is never stopped or touched.
// It reuses the shared cache's k8s-testbed binary and KEDA CRDs through symlinks rather than build them again.
import assert from "node:assert/strict";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { X509Certificate, createPrivateKey, generateKeyPairSync } from "node:crypto";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { after, before, describe, it, type TestContext } from "node:test";
import { CoreV1Api, KubeConfig } from "@kubernetes/client-node";
import { freePort, watchChild } from "../support/archiver.ts";

const here = import.meta.dirname;
let root = "";
let env: NodeJS.ProcessEnv = {};
let apiserverPort = 0;
const pki = () => join(root, "testbed/run/kube/pki");

/** Runs e2e/testbed/up on the test's own cache and ports. */
function up(t: TestContext) {
  return watchChild(t, spawn("bash", [join(here, "up"), "kube"], { env, stdio: ["ignore", "pipe", "pipe"] }));
}

/** The pids whose command line has `flag value` (the one apiserver on our port, the one etcd on our data). */
function processesWith(flag: string, value: string): number[] {
  return readdirSync("/proc")
    .filter((d) => /^\d+$/.test(d))
    .filter((pid) => {
      try {
        const argv = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
        return argv.some((a, i) => a === flag && argv[i + 1] === value);
      } catch {
        return false; // gone meanwhile
      }
    })
    .map(Number);
}

/** The key matches its certificate and the testbed's CA signed that certificate. */
function assertPairOk(name: string): void {
  const cert = new X509Certificate(readFileSync(join(pki(), `${name}.crt`)));
  const ca = new X509Certificate(readFileSync(join(pki(), "ca.crt")));
  assert.ok(cert.checkPrivateKey(createPrivateKey(readFileSync(join(pki(), `${name}.key`)))), `${name}.key matches`);
  assert.ok(cert.verify(ca.publicKey), `${name}.crt is signed by ca.crt`);
}

/** The apiserver answers over TLS checked against ca.crt, with the admin token: the material on disk is in use. */
async function assertApiserverAnswers(): Promise<void> {
  const kc = new KubeConfig();
  kc.loadFromFile(join(root, "testbed/run/kube/admin.kubeconfig"));
  assert.equal(kc.getCurrentCluster()?.server, `https://127.0.0.1:${apiserverPort}`);
  const list = await kc.makeApiClient(CoreV1Api).listNamespace();
  assert.ok(list.items.some((ns) => ns.metadata?.name === "default"));
}

describe("e2e/testbed/up", { timeout: 300_000 }, () => {
  before(async () => {
    root = mkdtempSync(join(tmpdir(), "testbed-up-"));
    // The shared cache's binary and CRDs (both print their path; both are cached by the suite's own up).
    const bin = execFileSync("bash", [join(here, "apiserver/build.sh")], { encoding: "utf8" }).trim();
    const crds = execFileSync("bash", [join(here, "keda/crds.sh")], { encoding: "utf8" }).trim();
    for (const [svc, dir] of [
      ["kube", dirname(dirname(bin))],
      ["keda", dirname(crds)],
    ] as const) {
      mkdirSync(join(root, "testbed", svc), { recursive: true });
      symlinkSync(dir, join(root, "testbed", svc, basename(dir)));
    }
    const ports = new Set<number>();
    while (ports.size < 3) ports.add(await freePort());
    const [etcd, peer, apiserver] = [...ports].map(String);
    apiserverPort = Number(apiserver);
    env = {
      ...process.env,
      DFE_ARCHIVER_CACHE: root,
      TESTBED_ENV_FILE: join(root, "testbed.env"),
      TESTBED_KUBE_ETCD_PORT: etcd,
      TESTBED_KUBE_ETCD_PEER_PORT: peer,
      TESTBED_KUBE_APISERVER_PORT: apiserver,
      // Not what either check is about, and the shared machine's CPU is better spent elsewhere.
      TESTBED_KUBE_SKIP_CONTROLLER_MANAGER: "1",
    };
  });

  after(() => {
    if (root === "") return;
    const down = spawnSync("bash", [join(here, "down"), "kube", "--wipe-all"], { env, encoding: "utf8" });
    rmSync(root, { recursive: true, force: true });
    assert.equal(down.status, 0, down.stderr);
  });

  it("two ups at once both succeed: the second waits, then reuses the control plane the first started", async (t) => {
    const [a, b] = [up(t), up(t)];
    const codes = await Promise.all([a.exited, b.exited]);
    const out = [a.output(), b.output()];
    assert.deepEqual(codes, [0, 0], out.join("\n---\n"));
    const one = (s: string) =>
      assert.equal(out.filter((o) => o.includes(s)).length, 1, `${s}:\n${out.join("\n---\n")}`);
    one("waiting for the testbed up/down already running");
    one("kube-apiserver: starting");
    one("kube: already running");

    assert.equal(processesWith("--secure-port", String(apiserverPort)).length, 1, "one kube-apiserver");
    assert.equal(processesWith("--data-dir", join(root, "testbed/run/kube-etcd/data")).length, 1, "one etcd");
    for (const name of ["serving", "front-proxy-client"]) assertPairOk(name);
    assert.match(
      readFileSync(join(root, "testbed.env"), "utf8"),
      new RegExp(`TESTBED_KUBE_SERVER=.*:${apiserverPort}`),
    );
    await assertApiserverAnswers();
  });

  it("a key planted beside a certificate it does not match is remade, and the apiserver restarted with it", async (t) => {
    const [before] = processesWith("--secure-port", String(apiserverPort));
    assert.ok(before !== undefined, "the apiserver of the first test runs");
    const stranger = generateKeyPairSync("ec", { namedCurve: "prime256v1" }).privateKey;
    writeFileSync(join(pki(), "serving.key"), stranger.export({ type: "pkcs8", format: "pem" }), { mode: 0o600 });
    assert.throws(() => assertPairOk("serving"), /serving.key matches/);

    const again = up(t);
    assert.equal(await again.exited, 0, again.output());
    assert.match(again.output(), /kube: made the serving certificate and key/);
    assertPairOk("serving");
    const now = processesWith("--secure-port", String(apiserverPort));
    assert.equal(now.length, 1, "one kube-apiserver");
    assert.notEqual(now[0], before, "the apiserver was started again on the new pair");
    await assertApiserverAnswers();
  });
});
