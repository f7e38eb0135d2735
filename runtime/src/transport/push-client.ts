// A sender's side of the Push RPC, as the previous stage (or scripts/push.ts) uses it: a typed client, and a push
// that waits out the archiver's pushback (RESOURCE_EXHAUSTED with grpc-retry-pushback-ms) however long it lasts,
// where grpc-js's own retry policy gives up after five attempts, and a stream writer that follows flow control.
import {
  credentials as channelCredentials,
  makeGenericClientConstructor,
  status,
  type ChannelCredentials,
  type ChannelOptions,
  type Client,
  type ClientDuplexStream,
  type ServiceError,
} from "@grpc/grpc-js";
import { setTimeout as sleep } from "node:timers/promises";
import { pushService, PUSHBACK_TRAILER, type PushRequestInput, type PushResponse } from "./push-proto.ts";

export interface PushClient {
  /** One unary push; rejects with the ServiceError the archiver answered. */
  push(req: PushRequestInput): Promise<PushResponse>;
  /** A PushStream call: write requests, read one response per request, in order. */
  stream(): ClientDuplexStream<PushRequestInput, PushResponse>;
  readonly client: Client;
  close(): void;
}

interface RawPushClient extends Client {
  Push(req: PushRequestInput, cb: (err: ServiceError | null, res?: PushResponse) => void): unknown;
  PushStream(): ClientDuplexStream<PushRequestInput, PushResponse>;
}

export function connectPush(
  address: string,
  credentials: ChannelCredentials = channelCredentials.createInsecure(),
  options: Partial<ChannelOptions> = {},
): PushClient {
  const Ctor = makeGenericClientConstructor(pushService(), "PushService");
  const raw = new Ctor(address, credentials, {
    "grpc.max_send_message_length": -1,
    ...options,
  }) as unknown as RawPushClient;
  return {
    push: (req) =>
      new Promise((resolve, reject) =>
        raw.Push(req, (err, res) => (err ? reject(err) : resolve(res ?? { accepted: 0 }))),
      ),
    stream: () => raw.PushStream(),
    client: raw,
    close: () => raw.close(),
  };
}

/** The pushback the archiver asked for, in ms; undefined when the error is not a pushback (do not retry it). */
export function pushbackMs(err: unknown): number | undefined {
  const e = err as Partial<ServiceError>;
  if (e.code !== status.RESOURCE_EXHAUSTED || e.metadata === undefined) return undefined;
  const [hint] = e.metadata.get(PUSHBACK_TRAILER);
  const ms = Number(hint);
  return hint === undefined || !Number.isFinite(ms) || ms < 0 ? undefined : ms;
}

export interface StreamOutcome {
  /** One per request answered, in request order: the first responses.length requests were queued. */
  responses: PushResponse[];
  /** Why the stream ended early (UNAVAILABLE: the archiver is shutting down); absent when it ended OK. */
  error?: ServiceError;
}

/**
 * Writes the requests on one PushStream, waiting whenever the stream's flow control holds the writer back (a full
 * queue or paused intake), then half-closes; resolves once the archiver ends the stream.
 */
export async function streamPushes(client: PushClient, reqs: Iterable<PushRequestInput>): Promise<StreamOutcome> {
  const call = client.stream();
  const responses: PushResponse[] = [];
  let error: ServiceError | undefined;
  call.on("data", (r: PushResponse) => responses.push(r));
  const ended = new Promise<void>((resolve) => {
    call.on("error", (e: ServiceError) => {
      error = e;
      resolve();
    });
    call.on("end", () => resolve());
  });
  for (const req of reqs) {
    if (error !== undefined) break;
    if (!call.write(req)) await Promise.race([new Promise((r) => call.once("drain", r)), ended]);
  }
  if (error === undefined) call.end();
  await ended;
  return error === undefined ? { responses } : { responses, error };
}

/** Pushes, waiting each pushback's hint and trying again; any other error (UNAVAILABLE, too large) is thrown. */
export async function pushWithRetry(
  client: PushClient,
  req: PushRequestInput,
  onPushback?: (ms: number) => void,
): Promise<PushResponse> {
  for (;;) {
    try {
      return await client.push(req);
    } catch (err) {
      const ms = pushbackMs(err);
      if (ms === undefined) throw err;
      onPushback?.(ms);
      await sleep(ms);
    }
  }
}
