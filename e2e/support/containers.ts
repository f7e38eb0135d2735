// The testbed's container engine (e2e/testbed/containers/up.sh) as the image tests use it.
import { spawn } from "node:child_process";
import { repo } from "./packaging.ts";
import { need } from "./testbed.ts";

export const RUNTIME = "dfe-archiver:testbed";
export const OPERATOR = "dfe-archiver-operator:testbed";

/** Runs a command to its end; a non-zero exit throws with its output unless allowFailure. */
export async function run(
  cmd: string,
  args: readonly string[],
  opts: { allowFailure?: boolean; env?: NodeJS.ProcessEnv } = {},
) {
  const child = spawn(cmd, args, {
    cwd: repo,
    env: { ...process.env, ...opts.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  const status = await new Promise<number | null>((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", resolve);
  });
  if (status !== 0 && opts.allowFailure !== true)
    throw new Error(`${cmd} ${args.join(" ")} exited ${status}:\n${stdout.slice(-6000)}\n${stderr.slice(-4000)}`);
  return { status, stdout: stdout.trim(), stderr: stderr.trim() };
}

/** The testbed's docker client against the testbed's engine. */
export function docker(args: readonly string[], opts: { allowFailure?: boolean } = {}) {
  // The legacy builder: BuildKit would fetch the Dockerfiles' `# syntax=docker/dockerfile:1` frontend from Docker
  // Hub, which this machine cannot reach; the Dockerfiles use nothing the legacy builder lacks.
  return run(need("TESTBED_DOCKER"), args, {
    ...opts,
    env: { DOCKER_HOST: need("TESTBED_DOCKER_HOST"), DOCKER_BUILDKIT: "0" },
  });
}

/** Builds both images from their Dockerfiles (layers cached by the engine); one line of time and size each. */
export async function buildImages(): Promise<string[]> {
  const out: string[] = [];
  for (const [file, tag] of [
    ["Dockerfile.runtime", RUNTIME],
    ["Dockerfile.operator", OPERATOR],
  ] as const) {
    const start = performance.now();
    // Host networking for the build steps too: the engine runs without a bridge.
    await docker(["build", "--network", "host", "--file", file, "--tag", tag, "."]);
    const size = Number((await docker(["image", "inspect", "--format", "{{.Size}}", tag])).stdout);
    out.push(
      `${file}: built as ${tag} in ${((performance.now() - start) / 1000).toFixed(1)} s, ${(size / 2 ** 20).toFixed(0)} MiB`,
    );
  }
  return out;
}
