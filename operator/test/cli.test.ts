// dfe-archiver-operator's command line, run as a user runs it, against the testbed's kube-apiserver: the cluster
// found through --kubeconfig and through KUBECONFIG (two files merged, one missing), logged once, and a pipeline
// reconciled; no configuration at all, and an apiserver that refuses it (401, 403, a certificate that does not
// verify), each refused in one line with exit 1; one not answering yet waited for; --help, --version and usage
// errors.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, it, type TestContext } from "node:test";
import { AppsV1Api, CoreV1Api } from "@kubernetes/client-node";
import { stringify } from "yaml";
import { objectNames } from "../src/render/index.ts";
import { FLAGS } from "../src/cli.ts";
import { freePort, nodeBin, tempDir, waitFor, watchChild } from "../../e2e/support/archiver.ts";
import { kubeConfig, kubeNamespace, need } from "../../e2e/support/testbed.ts";
import { createPipeline, installCrds, serviceAccountKubeconfig } from "./support/kube.ts";

const repo = resolve(import.meta.dirname, "../..");
const main = join(repo, "operator/src/main.ts");
const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { version: string };
/** An environment with nothing of the test's own cluster config in it. */
const bareEnv = (home: string, more: Record<string, string> = {}) => ({
  PATH: process.env["PATH"] ?? "",
  HOME: home,
  ...more,
});

interface LogEntry {
  msg?: string;
  [key: string]: unknown;
}

/** The operator as a child process: its JSON log lines, its stderr, its exit. */
function operator(t: TestContext, args: string[], env: Record<string, string>) {
  const proc = spawn(nodeBin, [main, "--metrics-addr", "127.0.0.1:0", "--image", "i", ...args], {
    cwd: repo,
    env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  proc.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  proc.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const child = watchChild(t, proc);
  const logs = (): LogEntry[] =>
    stdout
      .split("\n")
      .filter((l) => l.startsWith("{"))
      .map((l) => JSON.parse(l) as LogEntry);
  const waitLog = async (what: string, match: (e: LogEntry) => boolean, ms = 30_000): Promise<LogEntry> => {
    let found: LogEntry | undefined;
    await waitFor(
      () => (found = logs().find(match)) !== undefined,
      ms,
      () => `${what}: not logged within ${ms} ms:\n${child.output()}`,
      child.done,
    );
    return found!;
  };
  return {
    proc,
    logs,
    stderr: () => stderr,
    stdout: () => stdout,
    exited: child.exited,
    output: child.output,
    waitLog,
  };
}

/** Runs the operator to its exit, with a limit; resolves with its code, output and how long it took. */
async function refusal(t: TestContext, args: string[], env: Record<string, string>) {
  const start = Date.now();
  const op = operator(t, args, env);
  const timer = setTimeout(() => op.proc.kill("SIGKILL"), 30_000);
  const code = await op.exited;
  clearTimeout(timer);
  return { code, stderr: op.stderr(), stdout: op.stdout(), ms: Date.now() - start };
}

const oneLine = (text: string) => {
  assert.equal(text.split("\n").length, 2, `one line, then its newline:\n${text}`);
  assert.ok(text.endsWith("\n"));
};

/** The cluster found, logged once at the start, and a pipeline of its namespace reconciled; then SIGTERM. */
async function reconciles(op: ReturnType<typeof operator>, namespace: string, source: string): Promise<LogEntry> {
  const found = await op.waitLog("the cluster", (e) => e.msg?.startsWith("apiserver ") === true);
  assert.equal(found["source"], source);
  assert.equal(found["server"], need("TESTBED_KUBE_SERVER"));
  assert.equal(found.msg, `apiserver ${need("TESTBED_KUBE_SERVER")}, from ${source}`);
  await createPipeline(namespace, "events", {
    kafka: { brokers: ["kafka:9092"], topics: ["events"] },
    archive: { destination: "minio://archive/events", minio: { endpoint: "http://minio:9000" } },
  });
  const apps = kubeConfig().makeApiClient(AppsV1Api);
  await waitFor(
    () =>
      apps.readNamespacedDeployment({ name: objectNames("events").workload, namespace }).then(
        () => true,
        () => false,
      ),
    30_000,
    () => `no Deployment for the pipeline:\n${op.output()}`,
  );
  op.proc.kill("SIGTERM");
  assert.equal(await op.exited, 0, op.output());
  assert.equal(op.logs().filter((e) => e.msg?.startsWith("apiserver ")).length, 1, "the source logged once");
  return found;
}

describe("dfe-archiver-operator's command line", () => {
  it("--help lists every flag with its default, --version the version; both exit 0 and print nothing else", () => {
    const help = spawnSync(nodeBin, [main, "--help"], { encoding: "utf8" });
    assert.equal(help.status, 0, help.stderr);
    assert.equal(help.stderr, "");
    for (const [name, flag] of Object.entries(FLAGS)) {
      assert.match(help.stdout, new RegExp(`^  (-\\w, )?--${name}\\b`, "m"), `--${name}`);
      if ("default" in flag) assert.ok(help.stdout.replace(/\s+/g, " ").includes(`Default: ${String(flag.default)}.`));
    }
    assert.match(help.stdout, /^ {2}KUBECONFIG +Kubeconfig files/m);
    assert.ok(help.stdout.replace(/\s+/g, " ").includes(`Default: ghcr.io/dfe/dfe-archiver:${pkg.version}.`));
    assert.equal(spawnSync(nodeBin, [main, "-h"], { encoding: "utf8" }).stdout, help.stdout);

    const version = spawnSync(nodeBin, [main, "--version"], { encoding: "utf8" });
    assert.equal(version.status, 0, version.stderr);
    assert.equal(version.stderr, "");
    assert.match(
      version.stdout,
      new RegExp(`^dfe-archiver-operator ${pkg.version} \\(commit [0-9a-f]{12}\\) on Node\\.js ${process.version}\\n$`),
    );
  });

  it("refuses an unknown flag, an argument and a bad value with the usage: exit 2", () => {
    for (const [args, says] of [
      [["--kubecofnig", "x"], /^dfe-archiver-operator: Unknown option '--kubecofnig'\n/],
      [["x"], /^dfe-archiver-operator: takes no arguments, and was given 'x'\n/],
      [["--log-format", "xml"], /^dfe-archiver-operator: --log-format xml: must be one of json, text\n/],
      [["--metrics-addr", "nowhere"], /^dfe-archiver-operator: --metrics-addr: metrics address 'nowhere' is not/],
    ] as const) {
      const r = spawnSync(nodeBin, [main, ...args], { encoding: "utf8" });
      assert.equal(r.status, 2, `${args.join(" ")}: ${r.stderr}`);
      assert.equal(r.stdout, "");
      assert.match(r.stderr, says);
      assert.match(r.stderr, /^usage: dfe-archiver-operator \[FLAGS\]/m);
    }
  });

  it("with no configuration at all, exits 1 within 10 s with one line saying what it tried", async (t) => {
    const home = tempDir(t);
    const r = await refusal(t, [], bareEnv(home));
    assert.equal(r.code, 1);
    assert.ok(r.ms < 10_000, `${r.ms} ms`);
    assert.equal(r.stdout, "");
    oneLine(r.stderr);
    assert.equal(
      r.stderr,
      "dfe-archiver-operator: no Kubernetes cluster configured (no --kubeconfig, KUBECONFIG unset, not in a pod " +
        `(KUBERNETES_SERVICE_HOST unset), no ${join(home, ".kube", "config")}); pass --kubeconfig FILE or set ` +
        "KUBECONFIG, or run it in a pod with a service account\n",
    );
  });

  describe("on the testbed's apiserver", () => {
    it("finds it through --kubeconfig, says so once, and reconciles", async (t) => {
      await installCrds();
      const namespace = await kubeNamespace(t);
      const file = need("TESTBED_KUBECONFIG");
      const op = operator(t, ["--kubeconfig", file, "--namespace", namespace], bareEnv(tempDir(t)));
      const found = await reconciles(op, namespace, `--kubeconfig ${file}`);
      assert.equal(found["leaseNamespace"], namespace);
      assert.equal(found["leaseNamespaceFrom"], "--namespace");
    });

    it("finds it through KUBECONFIG, two files merged as kubectl merges them and a missing one skipped", async (t) => {
      await installCrds();
      const namespace = await kubeNamespace(t);
      const dir = tempDir(t);
      // The first file has the cluster (its CA beside it, named relatively) and the context it makes current; the
      // second the user, and a cluster and a current context of the same names that must lose to the first's.
      mkdirSync(join(dir, "one"));
      mkdirSync(join(dir, "two"));
      copyFileSync(need("TESTBED_KUBE_CA"), join(dir, "one", "ca.crt"));
      const cluster = (server: string) => ({ name: "testbed", cluster: { server, "certificate-authority": "ca.crt" } });
      const context = (name: string) => ({ name, context: { cluster: "testbed", user: "admin", namespace } });
      writeFileSync(
        join(dir, "one", "config"),
        stringify({
          clusters: [cluster(need("TESTBED_KUBE_SERVER"))],
          contexts: [context("ours")],
          "current-context": "ours",
        }),
      );
      writeFileSync(
        join(dir, "two", "config"),
        stringify({
          clusters: [cluster(`https://127.0.0.1:${await freePort()}`)],
          users: [{ name: "admin", user: { token: need("TESTBED_KUBE_ADMIN_TOKEN") } }],
          contexts: [context("theirs")],
          "current-context": "theirs",
        }),
      );
      const missing = join(dir, "missing");
      const list = [join(dir, "one", "config"), missing, join(dir, "two", "config")].join(":");
      const op = operator(t, ["--namespace", namespace], bareEnv(tempDir(t), { KUBECONFIG: list }));
      const found = await reconciles(op, namespace, `KUBECONFIG=${list}`);
      assert.equal(found["context"], "ours");
      assert.deepEqual(found["skipped"], [missing]);
    });

    it("exits 1 with one line when the apiserver refuses it: a bad token, no RBAC, a certificate it cannot verify", async (t) => {
      const namespace = await kubeNamespace(t);
      const dir = tempDir(t);
      const write = (name: string, user: object, ca: boolean) => {
        const file = join(dir, name);
        writeFileSync(
          file,
          stringify({
            clusters: [
              {
                name: "testbed",
                cluster: {
                  server: need("TESTBED_KUBE_SERVER"),
                  ...(ca ? { "certificate-authority": need("TESTBED_KUBE_CA") } : {}),
                },
              },
            ],
            users: [{ name: "u", user }],
            contexts: [{ name: "c", context: { cluster: "testbed", user: "u" } }],
            "current-context": "c",
          }),
        );
        return file;
      };
      await kubeConfig()
        .makeApiClient(CoreV1Api)
        .createNamespacedServiceAccount({ namespace, body: { metadata: { name: "nobody" } } });
      const noRbac = await serviceAccountKubeconfig(t, namespace, "nobody");
      const cases: [string, string[], RegExp][] = [
        [
          "a bad token",
          ["--kubeconfig", write("bad-token", { token: "not-a-token" }, true)],
          /answered 401(: [^;]*)?; the credentials .*renew them/,
        ],
        [
          "no RBAC",
          ["--kubeconfig", noRbac.file, "--namespace", namespace],
          new RegExp(
            `listing ArchivePipelines in namespace ${namespace}: .* answered 403: .*cannot list resource "archivepipelines".*; grant the operator's RBAC`,
          ),
        ],
        [
          "no CA",
          ["--kubeconfig", write("no-ca", { token: need("TESTBED_KUBE_ADMIN_TOKEN") }, false)],
          /cannot be reached: .*certificate.*; its certificate does not verify/,
        ],
      ];
      await Promise.all(
        cases.map(async ([what, args, says]) => {
          const r = await refusal(t, [...args, "--leader-elect=false"], bareEnv(dir));
          assert.equal(r.code, 1, `${what}: ${r.stderr}`);
          oneLine(r.stderr);
          assert.match(r.stderr, /^dfe-archiver-operator: /);
          assert.match(r.stderr, says, what);
        }),
      );
    });

    it("waits for an apiserver that does not answer yet, and stops on SIGTERM meanwhile", async (t) => {
      const dir = tempDir(t);
      const file = join(dir, "config");
      const server = `https://127.0.0.1:${await freePort()}`;
      writeFileSync(
        file,
        stringify({
          clusters: [{ name: "down", cluster: { server } }],
          users: [{ name: "u", user: { token: "t" } }],
          contexts: [{ name: "c", context: { cluster: "down", user: "u", namespace: "ns" } }],
          "current-context": "c",
        }),
      );
      const op = operator(t, ["--kubeconfig", file], bareEnv(dir));
      const waiting = await op.waitLog("the wait", (e) => e.msg === "the apiserver is not answering yet; trying again");
      assert.match(String(waiting["err"]), /ECONNREFUSED/);
      const found = op.logs().find((e) => e.msg?.startsWith("apiserver "));
      assert.equal(found?.["leaseNamespace"], "ns");
      assert.equal(found?.["leaseNamespaceFrom"], "context c's");
      op.proc.kill("SIGTERM");
      assert.equal(await op.exited, 0, op.output());
      assert.equal(op.stderr(), "");
    });
  });
});
