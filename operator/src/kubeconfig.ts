// Where the operator finds its cluster, in the order of kubectl and controller-runtime: --kubeconfig; else
// $KUBECONFIG, a list of files merged as kubectl merges them; else the in-cluster service account; else
// ~/.kube/config. --context picks a context of a kubeconfig. Nothing found is a refusal that names what was tried.
// @kubernetes/client-node's loadFromDefault is not used: it throws on a name two files of $KUBECONFIG share and on a
// listed file that is missing (kubectl keeps the first file's entry and skips the file), takes current-context from
// the last file that sets one (kubectl: the first), and with nothing found talks to http://localhost:8080.
import { existsSync, readFileSync } from "node:fs";
import { homedir } from "node:os";
import { delimiter, dirname, join } from "node:path";
import { isIPv6 } from "node:net";
import {
  ApiException,
  KubeConfig,
  type Cluster as KubeCluster,
  type Context,
  type User,
} from "@kubernetes/client-node";
import { parse } from "yaml";
import { ArchiverError } from "../../runtime/src/errors.ts";
import { apiMessage } from "./controller/reconcile.ts";

/** Where a pod's service account is mounted (under `root` in tests). */
export const SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount";

/** No cluster, or one the operator cannot talk to as configured: the message says what was tried and the fix. */
export class ClusterConfigError extends ArchiverError {
  constructor(message: string) {
    super("cluster_config", message, "permanent");
  }
}

export interface ClusterSource {
  kc: KubeConfig;
  /** What the config came from, for the log and refusals: "--kubeconfig /x", "KUBECONFIG /a:/b", ... */
  source: string;
  /** The kubeconfig context in use; undefined in-cluster. */
  context: string | undefined;
  server: string;
  /** The namespace the source names: the service account's, or the context's. */
  namespace: string | undefined;
  /** Files $KUBECONFIG lists that do not exist, skipped as kubectl skips them. */
  skipped: string[];
}

export interface ClusterOptions {
  /** --kubeconfig. */
  kubeconfig?: string | undefined;
  /** --context. */
  context?: string | undefined;
  /** KUBECONFIG, HOME, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are read here; process.env by default. */
  env?: NodeJS.ProcessEnv;
  /** Prefixes SERVICE_ACCOUNT_DIR: a test's stand-in for a pod's filesystem. */
  root?: string;
}

const isMapping = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v);

/** One kubeconfig file, its relative paths made absolute against its directory; undefined when it does not exist. */
function readKubeconfig(file: string, from: string): KubeConfig | undefined {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw new ClusterConfigError(`${file} (from ${from}) cannot be read: ${(e as Error).message}`);
  }
  const kc = new KubeConfig();
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (e) {
    throw new ClusterConfigError(`${file} (from ${from}) is not YAML: ${(e as Error).message.split("\n")[0]}`);
  }
  // kubectl reads an empty file as an empty config.
  if (doc === null || doc === undefined) return kc;
  if (!isMapping(doc)) throw new ClusterConfigError(`${file} (from ${from}) is not a kubeconfig: not a YAML mapping`);
  try {
    kc.loadFromString(JSON.stringify(doc));
  } catch (e) {
    throw new ClusterConfigError(`${file} (from ${from}) is not a valid kubeconfig: ${(e as Error).message}`);
  }
  kc.makePathsAbsolute(dirname(file));
  return kc;
}

/** kubectl's merge: the first file to name a cluster, user or context wins, and so does the first current-context. */
function merge(configs: KubeConfig[]): KubeConfig {
  const firsts = <T extends { name: string }>(lists: T[][]): T[] => {
    const byName = new Map<string, T>();
    for (const list of lists) for (const item of list) if (!byName.has(item.name)) byName.set(item.name, item);
    return [...byName.values()];
  };
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: firsts<KubeCluster>(configs.map((c) => c.getClusters())),
    users: firsts<User>(configs.map((c) => c.getUsers())),
    contexts: firsts<Context>(configs.map((c) => c.getContexts())),
    currentContext: configs.map((c) => c.getCurrentContext()).find((name) => name) ?? "",
  });
  return kc;
}

/** The context `wanted` (else the current one) of a kubeconfig, with its cluster's server checked. */
function fromKubeconfig(kc: KubeConfig, source: string, wanted: string | undefined, skipped: string[]): ClusterSource {
  const names = kc.getContexts().map((c) => c.name);
  const choices = names.length ? `one of ${names.join(", ")}` : "it defines no context";
  const name = wanted ?? kc.getCurrentContext();
  if (!name) throw new ClusterConfigError(`${source} sets no current-context; pass --context NAME (${choices})`);
  const context = kc.getContextObject(name);
  if (!context)
    throw new ClusterConfigError(
      `context "${name}"${wanted === undefined ? " (its current-context)" : ""} is not in ${source}; ` +
        (names.length ? `pass --context with one of ${names.join(", ")}` : "it defines no context"),
    );
  kc.setCurrentContext(name);
  const cluster = kc.getCluster(context.cluster);
  if (!cluster)
    throw new ClusterConfigError(`context "${name}" of ${source} names cluster "${context.cluster}", which it lacks`);
  if (context.user && !kc.getUser(context.user))
    throw new ClusterConfigError(`context "${name}" of ${source} names user "${context.user}", which it lacks`);
  let url: URL | undefined;
  try {
    url = new URL(cluster.server);
  } catch {
    url = undefined;
  }
  if (url === undefined || !["http:", "https:"].includes(url.protocol) || !url.hostname)
    throw new ClusterConfigError(
      `cluster "${cluster.name}" of ${source} has server "${cluster.server}", which is not an http(s) URL; fix its server`,
    );
  return { kc, source, context: name, server: cluster.server, namespace: context.namespace || undefined, skipped };
}

/** client-go's rest.InClusterConfig: the apiserver the service's env names, the token and CA the pod mounts. */
function inCluster(host: string, port: string, dir: string): ClusterSource {
  const server = `https://${isIPv6(host) ? `[${host}]` : host}:${port}`;
  const namespaceFile = join(dir, "namespace");
  const namespace = existsSync(namespaceFile) ? readFileSync(namespaceFile, "utf8").trim() || undefined : undefined;
  const kc = new KubeConfig();
  kc.loadFromOptions({
    clusters: [{ name: "in-cluster", server, caFile: join(dir, "ca.crt"), skipTLSVerify: false }],
    // Read again as it changes: the kubelet rotates a projected token.
    users: [{ name: "in-cluster", authProvider: { name: "tokenFile", config: { tokenFile: join(dir, "token") } } }],
    contexts: [{ name: "in-cluster", cluster: "in-cluster", user: "in-cluster", ...(namespace ? { namespace } : {}) }],
    currentContext: "in-cluster",
  });
  return { kc, source: `the in-cluster service account (${dir})`, context: undefined, server, namespace, skipped: [] };
}

/** The cluster to talk to, found as kubectl finds it; throws ClusterConfigError, one line, when there is none. */
export function loadCluster(o: ClusterOptions = {}): ClusterSource {
  const env = o.env ?? process.env;
  if (o.kubeconfig !== undefined) {
    const source = `--kubeconfig ${o.kubeconfig}`;
    const kc = readKubeconfig(o.kubeconfig, "--kubeconfig");
    if (!kc) throw new ClusterConfigError(`${source}: no such file; fix the path`);
    return fromKubeconfig(kc, source, o.context, []);
  }
  const tried: string[] = ["no --kubeconfig"];
  const listed = (env["KUBECONFIG"] ?? "").split(delimiter).filter((f) => f !== "");
  if (listed.length > 0) {
    const source = `KUBECONFIG=${env["KUBECONFIG"]}`;
    const files = [...new Set(listed)];
    const read = files.map((f) => readKubeconfig(f, "KUBECONFIG"));
    const found = read.filter((kc): kc is KubeConfig => kc !== undefined);
    if (found.length === 0)
      throw new ClusterConfigError(
        `${source} lists no file that exists; fix KUBECONFIG, or unset it for the in-cluster account or ~/.kube/config`,
      );
    return fromKubeconfig(
      merge(found),
      source,
      o.context,
      files.filter((_, i) => read[i] === undefined),
    );
  }
  tried.push("KUBECONFIG unset");
  const host = env["KUBERNETES_SERVICE_HOST"];
  const port = env["KUBERNETES_SERVICE_PORT"];
  const dir = join(o.root ?? "", SERVICE_ACCOUNT_DIR);
  if (host && port && existsSync(join(dir, "token"))) {
    if (o.context !== undefined)
      throw new ClusterConfigError(
        `--context ${o.context} names a kubeconfig context, and the config is ${dir}'s service account, ` +
          "which has none; drop --context, or pass --kubeconfig",
      );
    return inCluster(host, port, dir);
  }
  tried.push(
    host && port
      ? `KUBERNETES_SERVICE_HOST set but no token in ${dir}`
      : "not in a pod (KUBERNETES_SERVICE_HOST unset)",
  );
  const home = env["HOME"] || homedir();
  const file = join(home, ".kube", "config");
  const kc = readKubeconfig(file, "HOME");
  if (kc) return fromKubeconfig(kc, file, o.context, []);
  tried.push(`no ${file}`);
  throw new ClusterConfigError(
    `no Kubernetes cluster configured (${tried.join(", ")}); ` +
      "pass --kubeconfig FILE or set KUBECONFIG, or run it in a pod with a service account",
  );
}

/** Network failures a retry may clear: the apiserver down or restarting, a connection cut, a timeout. */
const RETRYABLE_NETWORK = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "EAI_AGAIN",
  "EPIPE",
  "UND_ERR_CONNECT_TIMEOUT",
  "UND_ERR_HEADERS_TIMEOUT",
  "UND_ERR_BODY_TIMEOUT",
  "UND_ERR_SOCKET",
  "UND_ERR_CLOSED",
]);

/** The innermost error of a cause chain that has a string code (fetch's "fetch failed" wraps the socket's). */
function rootCause(e: unknown): { code: string | undefined; message: string } {
  let found: { code: string | undefined; message: string } = { code: undefined, message: String(e) };
  for (let cur: unknown = e, depth = 0; cur instanceof Error && depth < 8; cur = cur.cause, depth++) {
    const code = (cur as { code?: unknown }).code;
    found = { code: typeof code === "string" ? code : found.code, message: cur.message };
  }
  return found;
}

/**
 * A failed request to the apiserver as an ArchiverError: retryable for a network failure a retry may clear, 429 and
 * 5xx; permanent, with what to fix, for the rest (TLS, a bad address, 401, 403, 404).
 */
export function requestError(e: unknown, what: string, cluster: ClusterSource): ArchiverError {
  const at = `the apiserver at ${cluster.server} (from ${cluster.source})`;
  if (e instanceof ApiException) {
    const status = e.code;
    const said = apiMessage(e);
    const text = `${what}: ${at} answered ${status}${said === `HTTP ${status}` ? "" : `: ${said}`}`;
    if (status === 429 || status >= 500) return new ArchiverError("apiserver_unavailable", text, "retryable");
    const fix =
      status === 401
        ? "the credentials of its user are not accepted; renew them or pick another context"
        : status === 403
          ? "grant the operator's RBAC (charts/dfe-archiver-operator, or config/rbac)"
          : status === 404
            ? "install the ArchivePipeline CRD (kubectl apply -f crds/)"
            : "fix the cluster's config";
    return new ClusterConfigError(`${text}; ${fix}`);
  }
  const cause = rootCause(e);
  const text = `${what}: ${at} cannot be reached: ${cause.message}${cause.code ? ` (${cause.code})` : ""}`;
  if (cause.code !== undefined && RETRYABLE_NETWORK.has(cause.code))
    return new ArchiverError("apiserver_unreachable", text, "retryable");
  const fix = /CERT|TLS|SSL|SIGNATURE|ISSUER/.test(cause.code ?? "")
    ? "its certificate does not verify against the cluster's certificate-authority; fix that or the server address"
    : "fix the server address, or the files the kubeconfig names";
  return new ClusterConfigError(`${text}; ${fix}`);
}
