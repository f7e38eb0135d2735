// pino JSON logs to stdout; `--log-format text` pretty-prints through pino-pretty (synchronously, so a crash's
// last lines are not lost). Node's own warnings go through the same log (logProcessWarnings).
import pino, { type Logger } from "pino";
import pretty from "pino-pretty";

export type LogFormat = "json" | "text";

export function createLogger(level: string, format: LogFormat): Logger {
  const opts = { level, base: { app: "dfe-archiver" }, timestamp: pino.stdTimeFunctions.isoTime };
  if (format === "text") return pino(opts, pretty({ colorize: false, sync: true }));
  return pino(opts, pino.destination({ dest: 1, sync: true }));
}

/**
 * Node's process warnings (a library's negative timer, a deprecation) logged as warnings, instead of Node's bare
 * `(node:PID) ...` lines on stderr, which a JSON log pipeline cannot parse: kafkajs's request queue raises a
 * TimeoutNegativeWarning under Node 24.
 */
export function logProcessWarnings(log: Logger): void {
  process.removeAllListeners("warning");
  process.on("warning", function logWarning(warning: Error) {
    log.warn({ err: warning }, `node warning: ${warning.name}: ${warning.message}`);
  });
}
