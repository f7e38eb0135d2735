// e2e/kind needs a Docker engine, which this machine lacks, so it is checked here without one: ShellCheck on its
// script, every repository file it uses present, and its Kafka and MinIO at the addresses the sample it applies uses.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { manifestFile, manifests, repo, tool } from "../support/packaging.ts";

const script = join(repo, "e2e", "kind", "run.sh");
const text = readFileSync(script, "utf8");
const value = (name: string) => new RegExp(`^${name}=(\\S+)$`, "m").exec(text)?.[1];

describe("e2e/kind", () => {
  it("passes ShellCheck, and npm run e2e:kind runs it", () => {
    const r = tool("TESTBED_SHELLCHECK")(["-x", script], { allowFailure: true });
    assert.equal(r.status, 0, r.stdout);
    const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { scripts: Record<string, string> };
    assert.equal(pkg.scripts["e2e:kind"], "bash e2e/kind/run.sh");
  });

  it("uses files that exist", () => {
    const used = [...text.matchAll(/(?:^|[\s"=/])((?:config|charts|e2e)\/[\w./-]+|Dockerfile\.\w+)/gm)].map(
      (m) => m[1]!,
    );
    const scripts = [...text.matchAll(/\$here\/([\w.-]+)/g)].map((m) => `e2e/kind/${m[1]}`);
    for (const f of [...used, ...scripts, value("SAMPLE")!]) assert.ok(existsSync(join(repo, f)), `${f} is missing`);
    for (const f of text.matchAll(/(\S+\.ts) /g))
      if (!f[1]!.includes("/")) assert.ok(existsSync(join(repo, "e2e", "kind", f[1]!)), `e2e/kind/${f[1]} is missing`);
  });

  it("serves Kafka and MinIO where the sample it applies looks for them", () => {
    const services = manifests(readFileSync(join(repo, "e2e", "kind", "services.yaml"), "utf8"));
    const at = (ns: string) => services.filter((o) => o.kind === "Service" && o.metadata.namespace === ns);
    const port = (ns: string, name: string) =>
      (at(ns).find((s) => s.metadata.name === name) as unknown as { spec: { ports: { port: number }[] } } | undefined)
        ?.spec.ports[0]?.port;
    const sample = manifestFile(join(repo, value("SAMPLE")!)).find((o) => o.kind === "ArchivePipeline") as unknown as {
      metadata: { name: string };
      spec: {
        kafka: { brokers: string[]; topics: string[] };
        archive: { destination: string; minio: { endpoint: string } };
      };
    };
    assert.equal(sample.metadata.name, value("PIPELINE"));
    assert.deepEqual(sample.spec.kafka.brokers, [`kafka.kafka.svc:${port("kafka", "kafka")}`]);
    assert.equal(sample.spec.archive.minio.endpoint, `http://minio.minio.svc:${port("minio", "minio")}`);
    // The script creates the sample's topic and bucket, and reads back under its prefix.
    assert.match(text, new RegExp(`--topic ${sample.spec.kafka.topics[0]} `));
    const [, bucket, prefix] = /^minio:\/\/([^/]+)\/(.+)$/.exec(sample.spec.archive.destination) ?? [];
    assert.match(text, new RegExp(`s3\\.ts make-bucket http://minio\\.minio\\.svc:9000 ${bucket} `));
    assert.match(text, new RegExp(`s3\\.ts count http://minio\\.minio\\.svc:9000 ${bucket} ${prefix}/\\)`));
  });
});
