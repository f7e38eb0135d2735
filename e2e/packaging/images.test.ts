// The two images, without a Docker engine: Dockerfile.runtime and Dockerfile.operator read statically (pinned base,
// multi-stage, production dependencies only, numeric non-root USER matching the pods' securityContext, no secret,
// every COPY source present and let through .dockerignore, exec-form entrypoints), hadolint on both, the entrypoint
// script's heap sizing and exec, and the build output the images are made of run as they would run it: bundled by
// the Dockerfiles' own build command, laid out as /app, started through the entrypoint, stopped by SIGTERM.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { describe, it, type TestContext } from "node:test";
import { METRICS_PORT, renderDeployment, resolveSpec } from "../../operator/src/render/index.ts";
import {
  freePort,
  nodeBin,
  produce,
  readArchive,
  startArchiver,
  tempDir,
  waitCommittedToEnd,
  waitFor,
} from "../support/archiver.ts";
import { chartDir, repo, tool } from "../support/packaging.ts";
import { kafkaTopic, kubeNamespace, need, uniqueName } from "../support/testbed.ts";
import { pipeline } from "../../operator/test/api/helpers.ts";

interface Instruction {
  op: string;
  args: string;
}
interface Stage {
  from: string;
  name?: string;
  instructions: Instruction[];
}

/** A Dockerfile's stages: continuation lines joined, comments and parser directives dropped. */
function stages(file: string): Stage[] {
  const text = readFileSync(join(repo, file), "utf8").replace(/\\\n/g, " ");
  const out: Stage[] = [];
  for (const line of text.split("\n").map((l) => l.trim())) {
    if (line === "" || line.startsWith("#")) continue;
    const [, op = "", args = ""] = /^(\S+)\s*(.*)$/.exec(line) ?? [];
    const ins = { op: op.toUpperCase(), args: args.replace(/\s+/g, " ") };
    if (ins.op === "FROM") {
      const [, from = "", name] = /^(\S+)(?: AS (\S+))?$/i.exec(ins.args) ?? [];
      out.push({ from, ...(name ? { name } : {}), instructions: [] });
    } else {
      assert.ok(out.length > 0, `${file}: ${ins.op} before FROM`);
      out.at(-1)!.instructions.push(ins);
    }
  }
  return out;
}

const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as {
  devDependencies: Record<string, string>;
};
const IMAGES = [
  { file: "Dockerfile.runtime", main: "dist/runtime/src/main.js", port: METRICS_PORT },
  { file: "Dockerfile.operator", main: "dist/operator/src/main.js", port: 8080 },
] as const;
const SECRETISH = /(PASSWORD|PASSWD|SECRET|TOKEN|CREDENTIAL|PRIVATE|ACCESS_KEY|API_KEY|_KEY)\b/i;

/** The paths .dockerignore lets into the build context: it denies everything, then allows by `!` patterns. */
function allowedByDockerignore(path: string): boolean {
  const patterns = readFileSync(join(repo, ".dockerignore"), "utf8")
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#"));
  let allowed = true;
  for (const p of patterns) {
    const negate = p.startsWith("!");
    const glob = negate ? p.slice(1) : p;
    const re = new RegExp(
      `^${glob
        .split("**")
        .map((part) => part.replace(/[.+^${}()|[\]]/g, "\\$&").replace(/\*/g, "[^/]*"))
        .join(".*")}$`,
    );
    // A directory's contents follow the directory's rule.
    if (re.test(path) || re.test(`${path}/x`)) allowed = negate;
  }
  return allowed;
}

describe("the images", () => {
  for (const image of IMAGES) {
    describe(image.file, () => {
      const all = stages(image.file);
      const final = all.at(-1)!;
      const named = new Set(all.flatMap((s) => (s.name ? [s.name.toLowerCase()] : [])));

      it("is multi-stage on a base image pinned to the project's exact Node version", () => {
        assert.ok(all.length >= 3, "build, production dependencies and the image");
        for (const s of all) {
          if (named.has(s.from.toLowerCase())) continue;
          assert.match(s.from, /^[\w./-]+(:[\w.-]+)?(@sha256:[a-f0-9]{64})?$/);
          assert.ok(
            /@sha256:[a-f0-9]{64}$/.test(s.from) || /:\d+\.\d+\.\d+(-[\w.-]+)?$/.test(s.from),
            `${s.from}: pin an exact version tag or a digest`,
          );
          assert.doesNotMatch(s.from, /:latest\b/);
          assert.ok(
            s.from.startsWith(`node:${pkg.devDependencies["node"]}-`),
            `${s.from}: not Node ${pkg.devDependencies["node"]}`,
          );
        }
      });

      it("installs production dependencies only into the image, from the lockfile", () => {
        const copies = final.instructions.filter((i) => i.op === "COPY" && i.args.includes("node_modules"));
        assert.equal(copies.length, 1);
        const from = /--from=(\S+)/.exec(copies[0]!.args)?.[1];
        const deps = all.find((s) => s.name === from);
        assert.ok(deps, "node_modules comes from a stage of its own");
        assert.ok(deps.instructions.some((i) => i.op === "RUN" && /\bnpm ci\b.*--omit=dev/.test(i.args)));
        assert.ok(!final.instructions.some((i) => i.op === "RUN" && /\bnpm (ci|install)\b/.test(i.args)));
      });

      it("runs as a numeric non-root user, the one the pods' securityContext names", () => {
        const users = final.instructions.filter((i) => i.op === "USER");
        assert.ok(users.length > 0, "no USER in the final stage");
        const last = users.at(-1)!.args;
        assert.match(last, /^\d+:\d+$/, "numeric uid:gid, so runAsNonRoot can verify it");
        const [uid, gid] = last.split(":").map(Number) as [number, number];
        assert.ok(uid > 0 && gid > 0);
        // Nothing after USER runs as root.
        const after = final.instructions.slice(final.instructions.lastIndexOf(users.at(-1)!) + 1);
        assert.ok(!after.some((i) => i.op === "RUN"), "a RUN after USER");
        if (image.file === "Dockerfile.runtime") {
          const cr = pipeline({ archive: { destination: "s3://b/p" } });
          const dep = renderDeployment(cr, resolveSpec(cr), { image: "i", kedaManaged: false, secretHashes: {} });
          const sc = dep.spec?.template.spec?.securityContext;
          assert.deepEqual([sc?.runAsUser, sc?.runAsGroup], [uid, gid], "the operator renders another user");
        } else {
          for (const f of [
            join(chartDir, "templates", "deployment.yaml"),
            join(repo, "config", "manager", "manager.yaml"),
          ]) {
            const text = readFileSync(f, "utf8");
            assert.match(text, new RegExp(`runAsUser: ${uid}\\n`), f);
            assert.match(text, new RegExp(`runAsGroup: ${gid}\\n`), f);
          }
        }
      });

      it("holds no secret: no secret-looking ENV or ARG, no credentials file copied", () => {
        for (const s of all)
          for (const i of s.instructions) {
            if (i.op === "ENV" || i.op === "ARG")
              for (const m of i.args.matchAll(/([A-Za-z_][A-Za-z0-9_]*)(?:=|\s)/g))
                assert.doesNotMatch(m[1]!, SECRETISH, `${image.file}: ${i.op} ${m[1]}`);
            if (i.op === "COPY" || i.op === "ADD")
              assert.doesNotMatch(
                i.args,
                /\.env\b|\.npmrc|id_rsa|\.pem\b|kubeconfig|credentials/i,
                `${image.file}: ${i.op} ${i.args}`,
              );
          }
        assert.ok(!allowedByDockerignore(".env") && !allowedByDockerignore(".npmrc"));
        assert.ok(!allowedByDockerignore("e2e/testbed/testbed.env"));
      });

      it("copies only what is in the repository and let through .dockerignore", () => {
        for (const s of all)
          for (const i of s.instructions.filter((x) => x.op === "COPY" && !x.args.includes("--from="))) {
            const sources = i.args
              .split(" ")
              .filter((a) => !a.startsWith("--"))
              .slice(0, -1);
            for (const src of sources) {
              assert.ok(existsSync(join(repo, src)), `${image.file}: COPY ${src}: not in the repository`);
              assert.ok(
                allowedByDockerignore(src.replace(/\/$/, "")),
                `${image.file}: COPY ${src}: .dockerignore leaves it out`,
              );
            }
          }
      });

      it("starts its program through the entrypoint script, in exec form", () => {
        const entry = final.instructions.filter((i) => i.op === "ENTRYPOINT").at(-1);
        assert.ok(entry);
        const argv = JSON.parse(entry.args) as string[];
        assert.equal(argv.length, 2);
        const script = final.instructions.find((i) => i.op === "COPY" && i.args.endsWith(` ${argv[0]}`));
        assert.ok(script, `${argv[0]} is not copied into the image`);
        assert.ok(script.args.startsWith("docker/entrypoint.sh "));
        assert.equal(argv[1], `/app/${image.main}`);
        const workdir = final.instructions.filter((i) => i.op === "WORKDIR").at(-1)?.args;
        assert.equal(workdir, "/app");
        const exposed = final.instructions.find((i) => i.op === "EXPOSE")?.args;
        assert.equal(Number(exposed), image.port);
      });
    });
  }

  it("pass hadolint", () => {
    const hadolint = tool("TESTBED_HADOLINT");
    const r = hadolint(["--failure-threshold", "info", ...IMAGES.map((i) => i.file)], { allowFailure: true });
    assert.equal(r.status, 0, r.stdout + r.stderr);
  });
});

describe("docker/entrypoint.sh", () => {
  const script = join(repo, "docker", "entrypoint.sh");
  const probe = (t: TestContext, cgroup: Record<string, string>, env: Record<string, string> = {}) => {
    const dir = tempDir(t);
    for (const [f, v] of Object.entries(cgroup)) {
      mkdirSync(join(dir, f, ".."), { recursive: true });
      writeFileSync(join(dir, f), `${v}\n`);
    }
    const main = join(dir, "probe.cjs");
    writeFileSync(
      main,
      "console.log(JSON.stringify({ pid: process.pid, execArgv: process.execArgv, argv: process.argv.slice(2) }))",
    );
    const child = spawn("sh", [script, main, "a", "b c"], {
      env: { PATH: `${join(repo, "node_modules", ".bin")}:${process.env["PATH"] ?? ""}`, DFE_CGROUP_ROOT: dir, ...env },
      stdio: ["ignore", "pipe", "inherit"],
    });
    return new Promise<{ shellPid: number; pid: number; execArgv: string[]; argv: string[] }>((resolve, reject) => {
      let out = "";
      child.stdout.on("data", (d: Buffer) => (out += d.toString()));
      child.once("exit", (code) =>
        code === 0 ? resolve({ shellPid: child.pid!, ...JSON.parse(out) }) : reject(new Error(`exit ${code}`)),
      );
    });
  };

  it("passes ShellCheck", () => {
    const r = tool("TESTBED_SHELLCHECK")([script], { allowFailure: true });
    assert.equal(r.status, 0, r.stdout);
  });

  it("gives V8's old space half of a cgroup v2 limit, execs node in its own place, passes the arguments on", async (t) => {
    const r = await probe(t, { "memory.max": String(512 << 20) });
    assert.deepEqual(r.execArgv, ["--max-old-space-size=256"]);
    assert.equal(r.pid, r.shellPid, "node replaced the shell (exec), so it gets the container's signals");
    assert.deepEqual(r.argv, ["a", "b c"]);
  });

  it("reads cgroup v1, a floor of 64 MiB, DFE_HEAP_PERCENT, and leaves no limit and NODE_OPTIONS alone", async (t) => {
    const v1 = "memory/memory.limit_in_bytes";
    assert.deepEqual((await probe(t, { [v1]: String(1 << 30) })).execArgv, ["--max-old-space-size=512"]);
    assert.deepEqual((await probe(t, { [v1]: String(64 << 20) })).execArgv, ["--max-old-space-size=64"]);
    assert.deepEqual((await probe(t, { "memory.max": String(1 << 30) }, { DFE_HEAP_PERCENT: "75" })).execArgv, [
      "--max-old-space-size=768",
    ]);
    assert.deepEqual((await probe(t, { "memory.max": "max" })).execArgv, []);
    assert.deepEqual((await probe(t, { [v1]: "9223372036854771712" })).execArgv, []);
    assert.deepEqual((await probe(t, {})).execArgv, []);
    const own = await probe(t, { "memory.max": String(1 << 30) }, { NODE_OPTIONS: "--max-old-space-size=300" });
    assert.deepEqual(own.execArgv, []);
  });
});

describe("the build output the images run", () => {
  /** dist/ built by the Dockerfiles' command, beside package.json, node_modules and proto: the image's /app. */
  const app = (t: TestContext) => {
    const dir = tempDir(t, "dfe-app-");
    const build = spawnSync(nodeBin, [join(repo, "scripts/build.ts"), join(dir, "dist")], { encoding: "utf8" });
    assert.equal(build.status, 0, `scripts/build.ts failed, so would the image build:\n${build.stdout}${build.stderr}`);
    for (const f of ["package.json", "node_modules", "proto"]) symlinkSync(join(repo, f), join(dir, f));
    for (const { main } of IMAGES) assert.ok(existsSync(join(dir, main)), `${main} not in the build output`);
    return dir;
  };

  /** Runs MAIN through the entrypoint until a log line matches, then SIGTERMs it; resolves with its exit code. */
  async function runUntil(t: TestContext, main: string, args: string[], ready: RegExp): Promise<number | null> {
    const child = spawn("sh", [join(repo, "docker", "entrypoint.sh"), main, ...args], {
      env: {
        PATH: `${join(repo, "node_modules", ".bin")}:${process.env["PATH"] ?? ""}`,
        HOME: "/tmp",
        NODE_ENV: "production",
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    t.after(() => child.kill("SIGKILL"));
    const lines: string[] = [];
    let seen = false;
    createInterface({ input: child.stdout }).on("line", (l) => {
      lines.push(l);
      if (ready.test(l)) seen = true;
    });
    child.stderr.on("data", (d: Buffer) => lines.push(d.toString()));
    await waitFor(
      () => seen,
      60_000,
      () => `no ${ready} from ${main}:\n${lines.join("\n")}`,
      () => child.exitCode !== null,
    );
    child.kill("SIGTERM");
    const code = await exited;
    assert.equal(code, 0, lines.join("\n"));
    return code;
  }

  it("builds, and both programs start from it, the runtime archives, and both stop cleanly on SIGTERM", async (t) => {
    const dir = app(t);
    const config = join(dir, "config.yaml");
    writeFileSync(config, "{}\n");
    const port = await freePort();
    await runUntil(
      t,
      join(dir, IMAGES[0].main),
      ["run", "--config", config, "--metrics-addr", `127.0.0.1:${port}`],
      /idle until configured/,
    );

    // The pipeline itself from the bundle: the lanes' worker found beside its chunk, the Kafka client, the codecs.
    const topic = await kafkaTopic(t, { partitions: 2 });
    const group = uniqueName("image");
    const N = 2000;
    await produce(topic, N, (i) => ({ value: JSON.stringify({ id: i, _org_id: `org-${i % 7}` }) }));
    const root = join(dir, "archive");
    const a = await startArchiver(
      t,
      {
        kafka: { brokers: need("TESTBED_KAFKA_BROKERS").split(","), group_id: group, topics: [topic] },
        archive: { destination: `file://${root}` },
        buffer: { spool_dir: join(dir, "spool") },
        compression: { codec: "zstd" },
        routing: { mode: "expression", expression_fields: ["_org_id"] },
        dlq: { enabled: false },
      },
      { dir, main: join(dir, IMAGES[0].main) },
    );
    await waitFor(
      async () => (await a.metric("messages_received_total")) >= N,
      60_000,
      () => `the built runtime received too little:\n${a.output().slice(-4000)}`,
    );
    assert.equal(await a.stop("SIGTERM"), 0, a.output().slice(-4000));
    const { files, lines } = readArchive(root);
    assert.equal(new Set(files.map((f) => f.path.split("/")[1])).size, 7, files.map((f) => f.path).join("\n"));
    assert.deepEqual(
      lines.map((l) => (JSON.parse(l) as { id: number }).id).sort((x, y) => x - y),
      Array.from({ length: N }, (_, i) => i),
    );
    await waitCommittedToEnd(group, topic, 30_000, () => "the built runtime did not commit to the end");

    const namespace = await kubeNamespace(t);
    await runUntil(
      t,
      join(dir, IMAGES[1].main),
      [
        "--kubeconfig",
        need("TESTBED_KUBECONFIG"),
        "--namespace",
        namespace,
        "--leader-elect=false",
        "--metrics-addr",
        "127.0.0.1:0",
        "--image",
        "i",
      ],
      /operator listening/,
    );
  });
});
