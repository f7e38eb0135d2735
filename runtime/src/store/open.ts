// The store a destination URL names. Object stores (s3, minio, gs, az) stage and upload whole files.
import { ConfigError } from "../errors.ts";
import { createFileStore } from "./file.ts";
import type { ArchiveStore } from "./types.ts";

export function openStore(destination: string): ArchiveStore {
  const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(destination)?.[1]?.toLowerCase();
  switch (scheme) {
    case "file":
      return createFileStore(destination);
    case "s3":
    case "minio":
    case "gs":
    case "az":
      throw new ConfigError(
        "archive.destination",
        `${scheme}:// destinations are not available in this build yet; use a file:// destination`,
      );
    default:
      throw new ConfigError(
        "archive.destination",
        `'${destination}' has no supported scheme: use file://, s3://, minio://, gs:// or az://`,
      );
  }
}
