// Where the operator finds its cluster (operator/src/kubeconfig.ts), on files of the test's own: the order of the
// sources, kubectl's merge of $KUBECONFIG, --context, the refusals, and the Lease's namespace. The same sources
// against the testbed's apiserver, run as the program: operator/test/cli.test.ts.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it, type TestContext } from "node:test";
import { stringify } from "yaml";
import { ClusterConfigError, loadCluster, SERVICE_ACCOUNT_DIR } from "../src/kubeconfig.ts";
import { leaseNamespace } from "../src/operator.ts";

function tempDir(t: TestContext): string {
  const dir = mkdtempSync(join(tmpdir(), "kubeconfig-test-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

interface Doc {
  clusters?: { name: string; server: string; ca?: string }[];
  users?: string[];
  contexts?: { name: string; cluster: string; user: string; namespace?: string }[];
  current?: string;
}

/** Writes a kubeconfig at dir/name; users carry a token named after them. */
function kubeconfig(dir: string, name: string, d: Doc): string {
  const file = join(dir, name);
  mkdirSync(join(file, ".."), { recursive: true });
  writeFileSync(
    file,
    stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: (d.clusters ?? []).map((c) => ({
        name: c.name,
        cluster: { server: c.server, ...(c.ca ? { "certificate-authority": c.ca } : {}) },
      })),
      users: (d.users ?? []).map((u) => ({ name: u, user: { token: `token-${u}` } })),
      contexts: (d.contexts ?? []).map((c) => ({
        name: c.name,
        context: { cluster: c.cluster, user: c.user, ...(c.namespace ? { namespace: c.namespace } : {}) },
      })),
      ...(d.current ? { "current-context": d.current } : {}),
    }),
  );
  return file;
}

const one = (dir: string, name = "config", server = "https://a.example:6443") =>
  kubeconfig(dir, name, {
    clusters: [{ name: "a", server, ca: "ca.crt" }],
    users: ["alice"],
    contexts: [{ name: "ctx", cluster: "a", user: "alice", namespace: "team" }],
    current: "ctx",
  });

const refused = (pattern: RegExp) => (e: unknown) => {
  assert.ok(e instanceof ClusterConfigError, String(e));
  assert.match(e.message, pattern);
  assert.doesNotMatch(e.message, /\n/, "one line");
  assert.equal(e.retryable, false);
  return true;
};

describe("loadCluster", () => {
  it("takes --kubeconfig over KUBECONFIG, the service account and ~/.kube/config", (t) => {
    const dir = tempDir(t);
    const flag = one(dir, "flag/config", "https://flag.example:6443");
    const env = { KUBECONFIG: one(dir, "env/config", "https://env.example:6443"), HOME: dir };
    one(dir, ".kube/config", "https://home.example:6443");
    const c = loadCluster({ kubeconfig: flag, env });
    assert.equal(c.server, "https://flag.example:6443");
    assert.equal(c.source, `--kubeconfig ${flag}`);
    assert.equal(c.context, "ctx");
    assert.equal(c.namespace, "team");
    // Relative paths of a file are its directory's, as kubectl reads them.
    assert.equal(c.kc.getCurrentCluster()?.caFile, join(dir, "flag", "ca.crt"));
    assert.equal(loadCluster({ env }).server, "https://env.example:6443");
    assert.equal(loadCluster({ env: { HOME: dir } }).server, "https://home.example:6443");
  });

  it("merges KUBECONFIG as kubectl does: the first file's entries and current-context win, missing files skipped", (t) => {
    const dir = tempDir(t);
    const first = kubeconfig(dir, "first/config", {
      clusters: [{ name: "shared", server: "https://first.example:6443", ca: "ca.crt" }],
      contexts: [{ name: "mine", cluster: "shared", user: "bob", namespace: "mine-ns" }],
      current: "mine",
    });
    const second = kubeconfig(dir, "second/config", {
      clusters: [
        { name: "shared", server: "https://second.example:6443" },
        { name: "other", server: "https://other.example:6443", ca: "other-ca.crt" },
      ],
      users: ["bob"],
      contexts: [
        { name: "mine", cluster: "other", user: "bob" },
        { name: "theirs", cluster: "other", user: "bob" },
      ],
      current: "theirs",
    });
    const missing = join(dir, "missing", "config");
    const env = { KUBECONFIG: [first, missing, second, first].join(":") };
    const c = loadCluster({ env });
    assert.equal(c.source, `KUBECONFIG=${env.KUBECONFIG}`);
    assert.equal(c.context, "mine");
    assert.equal(c.server, "https://first.example:6443");
    assert.equal(c.namespace, "mine-ns");
    assert.deepEqual(c.skipped, [missing]);
    // The user only the second file has, and each file's relative paths against its own directory.
    assert.equal(c.kc.getCurrentUser()?.token, "token-bob");
    assert.equal(c.kc.getCurrentCluster()?.caFile, join(dir, "first", "ca.crt"));
    const theirs = loadCluster({ env, context: "theirs" });
    assert.equal(theirs.server, "https://other.example:6443");
    assert.equal(theirs.kc.getCurrentCluster()?.caFile, join(dir, "second", "other-ca.crt"));
    assert.equal(theirs.namespace, undefined);
  });

  it("reads an empty file as an empty config, as kubectl does", (t) => {
    const dir = tempDir(t);
    const empty = join(dir, "empty");
    writeFileSync(empty, "");
    const c = loadCluster({ env: { KUBECONFIG: `${empty}:${one(dir)}` } });
    assert.equal(c.server, "https://a.example:6443");
  });

  it("uses the service account in a pod when neither --kubeconfig nor KUBECONFIG names a file", (t) => {
    const root = tempDir(t);
    const sa = join(root, SERVICE_ACCOUNT_DIR);
    mkdirSync(sa, { recursive: true });
    writeFileSync(join(sa, "token"), "sa-token");
    writeFileSync(join(sa, "namespace"), "operators\n");
    one(root, ".kube/config", "https://home.example:6443");
    const env = { KUBERNETES_SERVICE_HOST: "fd00::1", KUBERNETES_SERVICE_PORT: "443", HOME: root };
    const c = loadCluster({ env, root });
    assert.equal(c.server, "https://[fd00::1]:443");
    assert.equal(c.namespace, "operators");
    assert.equal(c.context, undefined);
    assert.match(c.source, /in-cluster service account/);
    assert.equal(c.kc.getCurrentCluster()?.caFile, join(sa, "ca.crt"));
    assert.equal(c.kc.getCurrentUser()?.authProvider?.config?.tokenFile, join(sa, "token"));
    assert.throws(() => loadCluster({ env, root, context: "ctx" }), refused(/--context ctx .*drop --context/));
    // No token mounted: not in-cluster after all; ~/.kube/config is next.
    rmSync(join(sa, "token"));
    assert.equal(loadCluster({ env, root }).server, "https://home.example:6443");
  });

  it("refuses in one line, saying what it tried and how to fix it", (t) => {
    const dir = tempDir(t);
    const home = join(dir, "home");
    assert.throws(
      () => loadCluster({ env: { HOME: home } }),
      refused(
        new RegExp(
          `^no Kubernetes cluster configured \\(no --kubeconfig, KUBECONFIG unset, not in a pod .*, no ${join(home, ".kube", "config")}\\); pass --kubeconfig FILE or set KUBECONFIG`,
        ),
      ),
    );
    assert.throws(
      () => loadCluster({ env: { KUBECONFIG: `${join(dir, "a")}:${join(dir, "b")}` } }),
      refused(/lists no file that exists/),
    );
    assert.throws(() => loadCluster({ kubeconfig: join(dir, "nope") }), refused(/--kubeconfig .*nope: no such file/));
    const file = one(dir);
    assert.throws(() => loadCluster({ kubeconfig: file, context: "other" }), refused(/context "other" .*one of ctx/));
    const noCurrent = kubeconfig(dir, "no-current", {
      clusters: [{ name: "a", server: "https://a.example" }],
      users: ["u"],
      contexts: [{ name: "x", cluster: "a", user: "u" }],
    });
    assert.throws(() => loadCluster({ kubeconfig: noCurrent }), refused(/sets no current-context; pass --context/));
    const noCluster = kubeconfig(dir, "no-cluster", {
      users: ["u"],
      contexts: [{ name: "x", cluster: "gone", user: "u" }],
      current: "x",
    });
    assert.throws(() => loadCluster({ kubeconfig: noCluster }), refused(/names cluster "gone", which it lacks/));
    const badUrl = one(dir, "bad-url", "https://undefined:undefined");
    assert.throws(() => loadCluster({ kubeconfig: badUrl }), refused(/server "https:\/\/undefined:undefined".*not an/));
    const notYaml = join(dir, "not-yaml");
    writeFileSync(notYaml, "clusters: [\n");
    assert.throws(() => loadCluster({ kubeconfig: notYaml }), refused(/not-yaml \(from --kubeconfig\) is not YAML/));
    const list = join(dir, "list");
    writeFileSync(list, "- a\n");
    assert.throws(() => loadCluster({ kubeconfig: list }), refused(/is not a kubeconfig/));
  });
});

describe("leaseNamespace", () => {
  it("takes the flag, the watched namespace, POD_NAMESPACE, the source's, else says it uses kubectl's default", (t) => {
    const dir = tempDir(t);
    const c = loadCluster({ kubeconfig: one(dir) });
    const env = { POD_NAMESPACE: "pod-ns" };
    assert.deepEqual(leaseNamespace({ leaseNamespace: "l", namespace: "w" }, c, env), {
      namespace: "l",
      from: "--lease-namespace",
    });
    assert.deepEqual(leaseNamespace({ namespace: "w" }, c, env), { namespace: "w", from: "--namespace" });
    assert.deepEqual(leaseNamespace({}, c, env), { namespace: "pod-ns", from: "POD_NAMESPACE" });
    assert.deepEqual(leaseNamespace({}, c, {}), { namespace: "team", from: "context ctx's" });
    assert.deepEqual(leaseNamespace({}, { ...c, context: undefined, namespace: "sa-ns" }, {}), {
      namespace: "sa-ns",
      from: "the service account's",
    });
    const none = leaseNamespace({}, { ...c, namespace: undefined }, {});
    assert.equal(none.namespace, "default");
    assert.match(none.from, /kubectl's default: context ctx names no namespace; --lease-namespace picks one/);
  });
});
