// pino JSON logs to stdout; `--log-format text` pretty-prints through pino-pretty (synchronously, so a crash's
// last lines are not lost).
import pino, { type Logger } from "pino";
import pretty from "pino-pretty";

export type LogFormat = "json" | "text";

export function createLogger(level: string, format: LogFormat): Logger {
  const opts = { level, base: { app: "dfe-archiver" }, timestamp: pino.stdTimeFunctions.isoTime };
  if (format === "text") return pino(opts, pretty({ colorize: false, sync: true }));
  return pino(opts, pino.destination({ dest: 1, sync: true }));
}
