// The checks the apiserver makes itself (x-kubernetes-validations), so `kubectl apply` refuses a spec the runtime
// would refuse at boot. Each mirrors a refinement of the runtime's schema, in the spec's camelCase; the operator
// still judges every spec with the runtime's own validateConfig, which also covers what CEL cannot (regex syntax,
// host:port forms), so these are the early, loud subset.
import { CODEC_LEVELS, DESTINATION_SCHEMES, configSchema, type Codec } from "../../../runtime/src/config/schema.ts";
import { PATH_TOKENS } from "../../../runtime/src/archive/path.ts";

export interface CelRule {
  rule: string;
  message: string;
  /** Where the apiserver reports the fault, relative to the node the rule is on. */
  fieldPath?: string;
}

const DEFAULTS = configSchema.parse({});

// CEL reads a `number` field as a double; a literal must be one too for the comparison to type-check.
const double = (n: number) => (Number.isInteger(n) ? n.toFixed(1) : String(n));

const codec = `(has(self.codec) ? self.codec : '${DEFAULTS.compression.codec}')`;
const levelRanges = (Object.entries(CODEC_LEVELS) as [Codec, { min: number; max: number } | undefined][]).filter(
  (e): e is [Codec, { min: number; max: number }] => e[1] !== undefined,
);

/** Rules on the spec itself: the runtime's cross-section checks, and the file destination's volume. */
export const SPEC_RULES: CelRule[] = [
  {
    rule: "!has(self.transport) || self.transport != 'grpc' || (has(self.grpc) && has(self.grpc.listen))",
    message: "grpc.listen is required when transport is grpc: the host:port the Push listener binds",
    fieldPath: ".grpc",
  },
  {
    rule: "(has(self.transport) && self.transport != 'kafka') || !has(self.kafka) || !has(self.kafka.brokers) || size(self.kafka.brokers) > 0",
    message: "kafka.brokers must list at least one broker when transport is kafka",
    fieldPath: ".kafka.brokers",
  },
  {
    rule: "!(has(self.transport) && self.transport == 'grpc' && has(self.dlq) && has(self.dlq.enabled) && self.dlq.enabled && !has(self.dlq.brokers) && has(self.kafka) && has(self.kafka.brokers) && size(self.kafka.brokers) == 0)",
    message:
      "dlq.brokers must list at least one broker while the DLQ is enabled (unset, it takes kafka.brokers, which is empty)",
    fieldPath: ".dlq",
  },
  {
    rule: "!has(self.archive) || !has(self.archive.destination) || !self.archive.destination.startsWith('file://') || has(self.archiveVolume)",
    message:
      "a file:// destination needs archiveVolume, the claim mounted at its path (the root filesystem is read-only)",
  },
];

const schemes = DESTINATION_SCHEMES.join("|");
const tokens = PATH_TOKENS.join("|");

/** Rules on sections and keys of the runtime part, by runtime key. */
export const CONFIG_RULES: Readonly<Record<string, CelRule[]>> = {
  kafka: [
    {
      rule: "!has(self.saslMechanism) || (has(self.saslUsername) && has(self.saslPassword))",
      message: "saslUsername and saslPassword are required when saslMechanism is set",
    },
  ],
  "kafka.tls": [{ rule: "has(self.certPath) == has(self.keyPath)", message: "certPath and keyPath are set together" }],
  "grpc.tls": [{ rule: "has(self.certPath) == has(self.keyPath)", message: "certPath and keyPath are set together" }],
  "archive.s3": [
    {
      rule: "!has(self.sseKmsKeyId) || (has(self.serverSideEncryption) && self.serverSideEncryption == 'aws:kms')",
      message: "serverSideEncryption must be aws:kms when sseKmsKeyId is set",
    },
  ],
  "archive.destination": [
    {
      rule: `self.matches('^(${schemes})://')`,
      message: `must start with one of ${DESTINATION_SCHEMES.map((s) => `${s}://`).join(", ")}`,
    },
    {
      rule: "!self.startsWith('file://') || self.matches('^file:///.+')",
      message: "file:// needs an absolute directory, e.g. file:///var/data/archive",
    },
    {
      rule: "self.startsWith('file://') || !self.matches('^[a-z0-9]+://[^/]*@')",
      message: "must not carry credentials; reference them from Secrets under archive.s3, minio, gcs or azure",
    },
    {
      rule: "self.startsWith('file://') || self.matches('^[a-z0-9]+://[^/@]')",
      message: "names no bucket or container, e.g. s3://bucket-name/prefix",
    },
  ],
  "archive.path_template": [
    {
      rule: String.raw`self.matches('^([^{}]|\\{(${tokens})\\})*$')`,
      message: `may hold only the tokens ${PATH_TOKENS.map((t) => `{${t}}`).join(" ")}`,
    },
    {
      rule: String.raw`!self.startsWith('/') && !self.matches('(^|/)\\.\\.?(/|$)')`,
      message: "must be relative, with no . or .. segment",
    },
  ],
  compression: [
    {
      rule: `!has(self.level) || ${levelRanges
        .map(([c, r]) => `(${codec} == '${c}' && self.level >= ${r.min} && self.level <= ${r.max})`)
        .join(" || ")}`,
      message: `level must be in the codec's range (${levelRanges.map(([c, r]) => `${c} ${r.min}-${r.max}`).join(", ")}); ${Object.keys(
        CODEC_LEVELS,
      )
        .filter((c) => CODEC_LEVELS[c as Codec] === undefined)
        .join(", ")} takes none`,
      fieldPath: ".level",
    },
  ],
  self_regulation: [
    {
      rule: `(has(self.resumeBelow) ? self.resumeBelow : ${double(DEFAULTS.self_regulation.resume_below)}) < (has(self.pauseAbove) ? self.pauseAbove : ${double(DEFAULTS.self_regulation.pause_above)})`,
      message: "resumeBelow must be below pauseAbove, or the latch never resumes",
      fieldPath: ".resumeBelow",
    },
  ],
};
