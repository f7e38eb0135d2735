// The Push RPC's contract (proto/dfe/archiver/v1/push.proto), loaded at runtime, typed for the listener and for
// senders: the proto file is the one source of the wire format, so nothing generated can drift from it.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { loadSync } from "@grpc/proto-loader";
import type { ServiceDefinition } from "@grpc/grpc-js";

export interface PushHeader {
  key: string;
  value: Buffer;
}

export interface PushRecord {
  payload: Buffer;
  /** Empty for none. */
  routing_key: string;
  headers: PushHeader[];
}

export interface PushRequest {
  records: PushRecord[];
}

export interface PushResponse {
  accepted: number;
}

/** A sender's PushRequest: fields it leaves out take their proto defaults. */
export interface PushRequestInput {
  records: { payload: Buffer | Uint8Array; routing_key?: string; headers?: PushHeader[] }[];
}

export const PUSH_SERVICE = "dfe.archiver.v1.PushService";
/** The gRPC retry spec's server pushback trailer, milliseconds. */
export const PUSHBACK_TRAILER = "grpc-retry-pushback-ms";

/** The package root (the nearest directory with a package.json), the same from runtime/src and from dist. */
function packageRoot(from: string): string {
  for (let dir = from; ; dir = dirname(dir)) {
    if (existsSync(join(dir, "package.json"))) return dir;
    if (dirname(dir) === dir) throw new Error(`no package.json above ${from}`);
  }
}

export const PUSH_PROTO_PATH = join(packageRoot(import.meta.dirname), "proto/dfe/archiver/v1/push.proto");

let service: ServiceDefinition | undefined;

/** The PushService definition; keepCase keeps routing_key as written, uint64 reads as a number. */
export function pushService(): ServiceDefinition {
  if (service === undefined) {
    const def = loadSync(PUSH_PROTO_PATH, { keepCase: true, longs: Number, defaults: true });
    service = def[PUSH_SERVICE] as ServiceDefinition | undefined;
    if (service === undefined) throw new Error(`${PUSH_PROTO_PATH} defines no ${PUSH_SERVICE}`);
  }
  return service;
}
