import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { parseDotenv } from "../../src/config/env.ts";
import { CONFIG_SEARCH, loadConfig, parseCliArgs, parseConfigText } from "../../src/config/load.ts";
import { ConfigFaultsError } from "../../src/config/validate.ts";
import { refusal, tempDir } from "./helpers.ts";

describe("cascade", () => {
  it("ranks CLI > env > .env > file > defaults, key by key", () => {
    const cwd = tempDir({
      "config.yaml": [
        "logger: { level: debug, format: json }",
        "kafka: { group_id: from-file, client_id: from-file }",
        "buffer: { flush_bytes: 100, flush_records: 5, writer_parallelism: 3 }",
        "metrics: { addr: 127.0.0.1:1 }",
      ].join("\n"),
      ".env": [
        "DFE_ARCHIVER_KAFKA_GROUP_ID=from-dotenv",
        "DFE_ARCHIVER_FLUSH_BYTES=200",
        "LOG_LEVEL=warn",
        "DFE_ARCHIVER_BUFFER__WRITER_PARALLELISM=4",
      ].join("\n"),
    });
    const { config, file, warnings } = loadConfig({
      argv: ["--log-level", "trace", "--log-format=text"],
      env: { DFE_ARCHIVER_KAFKA_GROUP_ID: "from-env", LOG_LEVEL: "error", METRICS_ADDR: "127.0.0.1:2" },
      cwd,
    });
    assert.equal(file, join(cwd, "config.yaml"));
    assert.deepEqual(warnings, []);
    assert.equal(config.logger.level, "trace", "CLI beats env, .env and file");
    assert.equal(config.logger.format, "text", "CLI beats file");
    assert.equal(config.kafka.group_id, "from-env", "env beats .env and file");
    assert.equal(config.metrics.addr, "127.0.0.1:2", "env beats file");
    assert.equal(config.buffer.flush_bytes, 200, ".env beats file");
    assert.equal(config.buffer.writer_parallelism, 4, ".env nested names beat file too");
    assert.equal(config.kafka.client_id, "from-file", "file beats defaults");
    assert.equal(config.buffer.flush_records, 5);
    assert.equal(config.buffer.flush_age_secs, 60, "defaults fill the rest");
  });

  it("lets --metrics-addr beat METRICS_ADDR", () => {
    const { config } = loadConfig({
      argv: ["--metrics-addr", "[::1]:9191"],
      env: { METRICS_ADDR: "0.0.0.0:1" },
      cwd: tempDir(),
    });
    assert.equal(config.metrics.addr, "[::1]:9191");
  });

  it("runs on defaults and env alone when no file exists", () => {
    if (CONFIG_SEARCH.some((p) => p.startsWith("/") && existsSync(p))) return;
    const { config, file } = loadConfig({
      argv: [],
      env: { DFE_ARCHIVER_DESTINATION: "file:///data" },
      cwd: tempDir(),
    });
    assert.equal(file, undefined);
    assert.equal(config.archive.destination, "file:///data");
  });

  it("overrides a file's list with the env's, never merging them", () => {
    const { config } = parseConfigText("kafka: { topics: [a, b, c] }", { env: { DFE_ARCHIVER_KAFKA_TOPICS: "d" } });
    assert.deepEqual(config.kafka.topics, ["d"]);
  });
});

describe("config file search", () => {
  it("takes config.yaml before config/settings.yaml", () => {
    const cwd = tempDir({ "config.yaml": "kafka: { group_id: a }", "config/settings.yaml": "kafka: { group_id: b }" });
    const { config, file } = loadConfig({ argv: [], env: {}, cwd });
    assert.equal(file, join(cwd, "config.yaml"));
    assert.equal(config.kafka.group_id, "a");
  });

  it("falls back to config/settings.yaml", () => {
    const cwd = tempDir({ "config/settings.yaml": "kafka: { group_id: b }" });
    const { config, file } = loadConfig({ argv: [], env: {}, cwd });
    assert.equal(file, join(cwd, "config", "settings.yaml"));
    assert.equal(config.kafka.group_id, "b");
    assert.equal(CONFIG_SEARCH.at(-1), "/etc/dfe-archiver/config.yaml");
  });

  it("takes DFE_ARCHIVER_CONFIG before the search, and --config before both", () => {
    const cwd = tempDir({
      "config.yaml": "kafka: { group_id: searched }",
      "env.yaml": "kafka: { group_id: from-env-var }",
      "cli.yaml": "kafka: { group_id: from-flag }",
    });
    const byEnv = loadConfig({ argv: [], env: { DFE_ARCHIVER_CONFIG: "env.yaml" }, cwd });
    assert.equal(byEnv.file, join(cwd, "env.yaml"));
    assert.equal(byEnv.config.kafka.group_id, "from-env-var");
    const byFlag = loadConfig({ argv: ["--config", "cli.yaml"], env: { DFE_ARCHIVER_CONFIG: "env.yaml" }, cwd });
    assert.equal(byFlag.file, join(cwd, "cli.yaml"));
    assert.equal(byFlag.config.kafka.group_id, "from-flag");
  });

  it("reads DFE_ARCHIVER_CONFIG from .env", () => {
    const cwd = tempDir({ ".env": "DFE_ARCHIVER_CONFIG=other.yaml\n", "other.yaml": "kafka: { group_id: other }" });
    assert.equal(loadConfig({ argv: [], env: {}, cwd }).config.kafka.group_id, "other");
  });

  it("refuses an explicitly named file that is missing, naming where it was named", () => {
    const cwd = tempDir({ "config.yaml": "{}" });
    const byFlag = refusal(() => loadConfig({ argv: ["--config", "nope.yaml"], env: {}, cwd }));
    assert.equal(byFlag.key, "--config");
    assert.match(byFlag.message, /nope\.yaml/);
    const byEnv = refusal(() => loadConfig({ argv: [], env: { DFE_ARCHIVER_CONFIG: "/no/such.yaml" }, cwd }));
    assert.equal(byEnv.key, "DFE_ARCHIVER_CONFIG");
    assert.match(byEnv.message, /\/no\/such\.yaml/);
  });

  it("refuses a file that is not YAML, or not a mapping, naming the file", () => {
    const cwd = tempDir({ "config.yaml": "kafka: [unclosed\n" });
    const err = refusal(() => loadConfig({ argv: [], env: {}, cwd }));
    assert.match(err.message, /config\.yaml/);
    const list = refusal(() => parseConfigText("- a\n- b\n", { sourceName: "x.yaml" }));
    assert.match(list.message, /^x\.yaml: must be a mapping of sections.*got a list/);
  });

  it("reads an empty file as all defaults", () => {
    assert.equal(parseConfigText("# nothing\n", {}).config.transport, "kafka");
  });
});

describe("environment", () => {
  it("nests double-underscore names into the config", () => {
    const { config } = parseConfigText("", {
      env: {
        DFE_ARCHIVER_SCALING__ENABLED: "false",
        DFE_ARCHIVER_KAFKA__GROUP_ID: "nested",
        DFE_ARCHIVER_ARCHIVE__S3__REGION: "ap-southeast-2",
        DFE_ARCHIVER_KAFKA__TLS__ENABLED: "1",
        DFE_ARCHIVER_KAFKA__ACKNOWLEDGEMENTS__ENABLED: "FALSE",
        DFE_ARCHIVER_VERSION_CHECK__ENABLED: "0",
        DFE_ARCHIVER_SCALING__MEMORY_GATE_THRESHOLD: "0.5",
        DFE_ARCHIVER_ARCHIVE__ROLL_SIZE_BYTES: "1e6",
      },
    });
    assert.equal(config.scaling.enabled, false);
    assert.equal(config.kafka.group_id, "nested");
    assert.equal(config.archive.s3.region, "ap-southeast-2");
    assert.equal(config.kafka.tls.enabled, true);
    assert.equal(config.kafka.acknowledgements.enabled, false);
    assert.equal(config.version_check.enabled, false);
    assert.equal(config.scaling.memory_gate_threshold, 0.5);
    assert.equal(config.archive.roll_size_bytes, 1000000);
  });

  it("lets a key's declared name beat its nested form, with a warning", () => {
    const { config, warnings } = parseConfigText("", {
      env: { DFE_ARCHIVER_KAFKA_GROUP_ID: "declared", DFE_ARCHIVER_KAFKA__GROUP_ID: "nested" },
    });
    assert.equal(config.kafka.group_id, "declared");
    assert.equal(warnings.length, 1);
    assert.match(
      warnings[0] ?? "",
      /DFE_ARCHIVER_KAFKA_GROUP_ID and DFE_ARCHIVER_KAFKA__GROUP_ID both set kafka\.group_id/,
    );
  });

  it("splits lists on commas, trimming and dropping empties", () => {
    const { config } = parseConfigText("", {
      env: {
        DFE_ARCHIVER_KAFKA_BROKERS: "k1:9092, k2:9092,,",
        DFE_ARCHIVER_KAFKA_TOPICS: "events,logs",
        DFE_ARCHIVER_KAFKA_TOPIC_INCLUDE: "^a, ^b",
        DFE_ARCHIVER_ROUTING__EXPRESSION_FIELDS: "_org_id,tags.category",
      },
    });
    assert.deepEqual(config.kafka.brokers, ["k1:9092", "k2:9092"]);
    assert.deepEqual(config.kafka.topics, ["events", "logs"]);
    assert.deepEqual(config.kafka.topic_include, ["^a", "^b"]);
    assert.deepEqual(config.routing.expression_fields, ["_org_id", "tags.category"]);
  });

  it("reads an empty list variable as the empty list, and an empty scalar as unset", () => {
    const { config } = parseConfigText("kafka: { topics: [a] }\narchive: { destination: file:///x }", {
      env: { DFE_ARCHIVER_KAFKA_TOPICS: "", DFE_ARCHIVER_DESTINATION: "", DFE_ARCHIVER_FLUSH_BYTES: "" },
    });
    assert.deepEqual(config.kafka.topics, [], "empty topics = discovery");
    assert.equal(config.archive.destination, "file:///x");
    assert.equal(config.buffer.flush_bytes, 1048576);
  });

  it("refuses a malformed value, naming the variable and the key", () => {
    for (const [name, value, key, expected] of [
      ["DFE_ARCHIVER_FLUSH_BYTES", "1MiB", "buffer.flush_bytes", /must be a number; got "1MiB"/],
      ["DFE_ARCHIVER_SCALING__ENABLED", "yes", "scaling.enabled", /must be true, false, 1 or 0; got "yes"/],
      ["DFE_ARCHIVER_MEMORY_PRESSURE_THRESHOLD", "high", "memory.pressure_threshold", /must be a number/],
      ["DFE_ARCHIVER_MEMORY_CGROUP_HEADROOM", "1.5", "memory.cgroup_headroom", /must be at most 1; got 1\.5/],
    ] as const) {
      const err = refusal(() => parseConfigText("", { env: { [name]: value } }));
      assert.equal(err.key, key, name);
      assert.match(err.message, expected);
      assert.ok(err.message.includes(`(from ${name})`), err.message);
    }
  });

  it("reads only DFE_ARCHIVER_ names: old names and service links reach nothing, silently", () => {
    const { config, warnings } = parseConfigText("", {
      env: {
        ARCHIVER_DESTINATION: "s3://old/x",
        KAFKA_BROKERS: "old:9092",
        KAFKA_GROUP_ID: "old",
        DLQ_TOPIC: "old-dlq",
        S3_BUCKET: "old",
        S3_REGION: "old",
        DFE_ARCHIVER_SERVICE_HOST: "10.0.0.1",
        DFE_ARCHIVER_PORT_9090_TCP: "tcp://10.0.0.1:9090",
        COMPRESSION_CODEC: "gzip",
      },
    });
    assert.deepEqual(warnings, []);
    assert.deepEqual(config, parseConfigText("", { env: {} }).config);
  });

  it("refuses a nested name that reaches no key, suggesting the nearest variable", () => {
    const typo = refusal(() => parseConfigText("", { env: { DFE_ARCHIVER_KAFKA__GROUPID: "x" } }));
    assert.equal(typo.key, "DFE_ARCHIVER_KAFKA__GROUPID");
    assert.match(typo.message, /did you mean DFE_ARCHIVER_KAFKA__GROUP_ID\?/);
    const memory = refusal(() => parseConfigText("", { env: { DFE_ARCHIVER_MEMORY__LIMIT_BYTES: "1" } }));
    assert.match(memory.message, /did you mean DFE_ARCHIVER_MEMORY_LIMIT_BYTES\?/);
    const section = refusal(() => parseConfigText("", { env: { DFE_ARCHIVER_KAFKA__TLS: "true" } }));
    assert.match(
      section.message,
      /kafka\.tls is a section; set one of its keys, e.g. DFE_ARCHIVER_KAFKA__TLS__ENABLED/,
    );
  });

  it("keeps ${VAR} in the file literal, and warns which variable to set instead", () => {
    const { config, warnings } = parseConfigText('archive:\n  s3:\n    secret_access_key: "${AWS_SECRET}"\n', {
      env: { AWS_SECRET: "expanded" },
    });
    assert.equal(config.archive.s3.secret_access_key, "${AWS_SECRET}");
    assert.equal(warnings.length, 1);
    assert.match(
      warnings[0] ?? "",
      /archive\.s3\.secret_access_key .*\$\{AWS_SECRET\}.*DFE_ARCHIVER_S3_SECRET_ACCESS_KEY/,
    );
  });
});

describe("memory guard", () => {
  it("reads DFE_ARCHIVER_MEMORY_* from the environment", () => {
    const { config } = parseConfigText("", {
      env: {
        DFE_ARCHIVER_MEMORY_LIMIT_BYTES: "1073741824",
        DFE_ARCHIVER_MEMORY_PRESSURE_THRESHOLD: "0.7",
        DFE_ARCHIVER_MEMORY_CGROUP_HEADROOM: "0.9",
      },
    });
    assert.deepEqual(config.memory, { limit_bytes: 1073741824, pressure_threshold: 0.7, cgroup_headroom: 0.9 });
  });

  it("ignores a memory block in the file, warning to use the env vars", () => {
    const { config, warnings } = parseConfigText("memory:\n  limit_bytes: 5\n  bogus: 1\n", {
      sourceName: "c.yaml",
      env: {},
    });
    assert.equal(config.memory.limit_bytes, 0);
    assert.equal(warnings.length, 1);
    assert.match(warnings[0] ?? "", /^c\.yaml: the memory section is ignored/);
    for (const name of [
      "DFE_ARCHIVER_MEMORY_LIMIT_BYTES",
      "DFE_ARCHIVER_MEMORY_PRESSURE_THRESHOLD",
      "DFE_ARCHIVER_MEMORY_CGROUP_HEADROOM",
    ])
      assert.ok(warnings[0]?.includes(name), name);
  });
});

describe(".env", () => {
  it("parses KEY=VALUE lines with comments, quotes and export", () => {
    const { vars, faults } = parseDotenv(
      [
        "# a comment",
        "",
        "A=plain",
        "B = spaced ",
        "export C=exported",
        'D="double # not a comment"',
        "E='single'",
        "F=value # trailing comment",
        'G="line\\nbreak"',
        "H=",
        "I=a=b",
      ].join("\n"),
    );
    assert.deepEqual(faults, []);
    assert.deepEqual(vars, {
      A: "plain",
      B: "spaced",
      C: "exported",
      D: "double # not a comment",
      E: "single",
      F: "value",
      G: "line\nbreak",
      H: "",
      I: "a=b",
    });
  });

  it("reports a malformed line by file and line number", () => {
    const { faults } = parseDotenv('A=1\nnot a pair\nB="open\n', ".env");
    assert.deepEqual(
      faults.map((f) => f.key),
      [".env:2", ".env:3"],
    );
  });

  it("loses to the process env, and a bad line refuses the boot with the other faults", () => {
    const cwd = tempDir({
      ".env":
        "DFE_ARCHIVER_KAFKA_GROUP_ID=dotenv\nDFE_ARCHIVER_TRANSPORT=grpc\nDFE_ARCHIVER_GRPC_LISTEN=0.0.0.0:50051\n",
    });
    const { config } = loadConfig({ argv: [], env: { DFE_ARCHIVER_KAFKA_GROUP_ID: "process" }, cwd });
    assert.equal(config.kafka.group_id, "process");
    assert.equal(config.transport, "grpc");
    assert.equal(config.grpc.listen, "0.0.0.0:50051");

    const bad = tempDir({ ".env": "oops\n", "config.yaml": "transport: ftp\n" });
    const err = refusal(() => loadConfig({ argv: [], env: {}, cwd: bad }));
    assert.ok(err instanceof ConfigFaultsError);
    assert.deepEqual(
      err.faults.map((f) => f.key),
      [`${join(bad, ".env")}:1`, "transport"],
    );
  });
});

describe("CLI", () => {
  it("parses scalo's common flags in both forms, keeping positionals", () => {
    assert.deepEqual(
      parseCliArgs(["--config", "/c.yaml", "--log-level=debug", "--log-format", "text", "--metrics-addr=:1", "extra"]),
      { config: "/c.yaml", logLevel: "debug", logFormat: "text", metricsAddr: ":1", positionals: ["extra"] },
    );
    assert.deepEqual(parseCliArgs([]), { positionals: [] });
  });

  it("refuses an unknown flag, listing the known ones", () => {
    const err = refusal(() => parseCliArgs(["--log-lvl", "x"]));
    assert.equal(err.key, "cli");
    assert.match(err.message, /--log-lvl/);
    assert.match(err.message, /--config, --log-level, --log-format, --metrics-addr/);
  });

  it("refuses a flag's bad value, naming the flag", () => {
    const err = refusal(() => loadConfig({ argv: ["--log-level", "verbose"], env: {}, cwd: tempDir() }));
    assert.equal(err.key, "logger.level");
    assert.match(
      err.message,
      /must be one of: trace, debug, info, warn, error, fatal; got "verbose" \(from --log-level\)/,
    );
  });
});

describe("reload", () => {
  it("re-parses new text under the env and flags the boot used", () => {
    const cwd = tempDir({ "config.yaml": "kafka: { group_id: v1 }", ".env": "DFE_ARCHIVER_FLUSH_BYTES=300\n" });
    const boot = loadConfig({ argv: ["--log-level", "warn"], env: {}, cwd });
    const next = parseConfigText("kafka: { group_id: v2 }\nlogger: { level: debug }", {
      env: boot.env,
      cli: boot.cli,
      sourceName: boot.file,
    });
    assert.equal(next.config.kafka.group_id, "v2");
    assert.equal(next.config.buffer.flush_bytes, 300);
    assert.equal(next.config.logger.level, "warn");
  });
});
