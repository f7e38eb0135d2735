// The object backend an s3://, minio://, gs:// or az:// destination names: bucket (or container) from the URL
// unless the backend's section overrides it, and the URL's path as the prefix of every key.
import type { Logger } from "pino";
import type { ResolvedConfig } from "../../config/resolve.ts";
import { ArchiverError, ConfigError } from "../../errors.ts";
import { checkKey, type ObjectBackend } from "./types.ts";

/** Scheme, bucket and prefix of an object-store destination URL; the prefix has no leading or trailing slash. */
export function parseDestination(destination: string): { scheme: string; bucket: string; prefix: string } {
  const m = /^([a-z][a-z0-9+.-]*):\/\/([^/]*)(?:\/(.*))?$/i.exec(destination);
  if (m === null || m[1] === undefined || m[2] === undefined || m[2] === "")
    throw new ConfigError("archive.destination", `'${destination}' is not scheme://bucket/prefix`);
  const prefix = (m[3] ?? "").replace(/^\/+|\/+$/g, "");
  if (prefix !== "") {
    try {
      checkKey(prefix);
    } catch (err) {
      if (!(err instanceof ArchiverError)) throw err;
      throw new ConfigError("archive.destination", `has a prefix no store takes as a key: ${err.message}`);
    }
  }
  return { scheme: m[1].toLowerCase(), bucket: m[2], prefix };
}

/** Each backend's SDK is loaded only when a destination names it: together they take about 0.3 s to load. */
export async function openObjectBackend(
  cfg: ResolvedConfig,
  env: NodeJS.ProcessEnv,
  log: Logger,
): Promise<ObjectBackend> {
  const destination = cfg.archive.destination;
  if (destination === undefined) throw new ConfigError("archive.destination", "is not set");
  const { scheme, bucket, prefix } = parseDestination(destination);
  const a = cfg.archive;
  switch (scheme) {
    case "s3":
      return (await import("./s3.ts")).openS3(cfg, "s3", a.s3.bucket ?? bucket, prefix, log);
    case "minio":
      return (await import("./s3.ts")).openS3(cfg, "minio", a.minio.bucket ?? bucket, prefix, log);
    case "gs":
      return (await import("./gcs.ts")).openGcs(cfg, env, a.gcs.bucket ?? bucket, prefix, log);
    case "az":
      return (await import("./azure.ts")).openAzure(cfg, env, a.azure.container ?? bucket, prefix);
    default:
      throw new ConfigError("archive.destination", `${scheme}:// is not an object store (s3, minio, gs, az)`);
  }
}
