// The gRPC Push listener (proto/dfe/archiver/v1/push.proto): the previous stage pushes batches of records, each
// answered once its records are queued. The queue is bounded by records (grpc.queue_records); a full queue, or the
// pipeline pausing intake, pushes back: RESOURCE_EXHAUSTED with a grpc-retry-pushback-ms hint on a unary push, or
// no more reading (HTTP/2 flow control) on a stream. Nothing a push delivered can be read again, so the transport is
// not replayable and commit is a no-op: the archive copy is at-most-once.
import {
  Metadata,
  Server,
  ServerCredentials,
  status,
  type sendUnaryData,
  type ServerDuplexStream,
  type StatusObject,
  type ServerUnaryCall,
} from "@grpc/grpc-js";
import type { Logger } from "pino";
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import type { ResolvedConfig } from "../config/resolve.ts";
import { ArchiverError, ConfigError } from "../errors.ts";
import { Fifo } from "../fifo.ts";
import type { InboundRecord, RecordsBatch } from "../records.ts";
import { pushService, PUSHBACK_TRAILER, type PushRequest, type PushResponse } from "./push-proto.ts";
import type { Transport, TransportSink } from "./types.ts";

/** Plaintext unless grpc.tls names a certificate; with ca_path a client must present a certificate it signed. */
export function grpcCredentials(tls: ResolvedConfig["grpc"]["tls"]): ServerCredentials {
  if (tls.cert_path === undefined || tls.key_path === undefined) return ServerCredentials.createInsecure();
  const pair = {
    cert_chain: readPem("grpc.tls.cert_path", tls.cert_path),
    private_key: readPem("grpc.tls.key_path", tls.key_path),
  };
  const ca = tls.ca_path === undefined ? null : readPem("grpc.tls.ca_path", tls.ca_path);
  return ServerCredentials.createSsl(ca, [pair], ca !== null);
}

function readPem(key: string, path: string): Buffer {
  try {
    return readFileSync(path);
  } catch (err) {
    throw new ConfigError(key, `cannot read ${path} (${(err as Error).message}): point it at a readable PEM file`);
  }
}

/** The latch re-reads its sources about once a second: sooner than that a paused listener is still paused. */
export const PAUSED_PUSHBACK_MS = 1000;
/** A full queue frees as the pipeline takes batches, a few a second at the least. */
export const FULL_PUSHBACK_MS = 250;
/** Records handed to the pipeline at once: consecutive queued pushes with one routing key are joined up to this. */
const MAX_BATCH_RECORDS = 10_000;
/** How long the shutdown waits for connections to close once every call is answered. */
const SHUTDOWN_GRACE_MS = 5000;

export interface GrpcTransportOptions {
  /** host:port, as grpc.listen; port 0 binds any free port (boundPort then tells which). */
  listen: string;
  credentials: ServerCredentials;
  maxMessageBytes: number;
  queueRecords: number;
  log: Logger;
}

interface Queued {
  readonly topic: string | undefined;
  readonly records: InboundRecord[];
}

interface Stream {
  readonly call: ServerDuplexStream<PushRequest, PushResponse>;
  /** Requests read and not yet queued (the first waits for room), answered in order. */
  readonly pending: PushRequest[];
  /** The sender half-closed: end the call once pending is answered. */
  ended: boolean;
  done: boolean;
}

/** A status to answer with; its metadata goes out as trailers. */
type Refusal = Partial<StatusObject>;

type Admission = { ok: true } | { ok: false; refusal: Refusal };

function pushback(ms: number, details: string): Admission {
  const metadata = new Metadata();
  metadata.set(PUSHBACK_TRAILER, String(ms));
  return { ok: false, refusal: { code: status.RESOURCE_EXHAUSTED, details, metadata } };
}

const STOPPED: Refusal = {
  code: status.UNAVAILABLE,
  details: "the archiver is shutting down and queues nothing more",
};
const STOPPING: Admission = { ok: false, refusal: STOPPED };

export class GrpcTransport implements Transport {
  readonly replayable = false;
  readonly #opts: GrpcTransportOptions;
  readonly #server: Server;
  readonly #log: Logger;
  /** Pushes grouped by routing key, in arrival order. */
  readonly #queue = new Fifo<Queued>();
  #queued = 0;
  /** Offsets number the records in arrival order, one sequence for every routing key. */
  #seq = 0;
  #paused = false;
  #stopping = false;
  #shutDown = false;
  readonly #streams = new Set<Stream>();
  /** Streams waiting for room, in the order they blocked. */
  #blocked: Stream[] = [];
  #poke: (() => void) | undefined;
  #pumping: Promise<void> | undefined;
  #stopped: Promise<void> | undefined;
  #port: number | undefined;

  constructor(opts: GrpcTransportOptions) {
    this.#opts = opts;
    this.#log = opts.log.child({ component: "grpc" });
    this.#server = new Server({
      "grpc.max_receive_message_length": opts.maxMessageBytes,
      "grpc.max_send_message_length": 1 << 20,
    });
    this.#server.addService(pushService(), {
      Push: (call: ServerUnaryCall<PushRequest, PushResponse>, callback: sendUnaryData<PushResponse>) =>
        this.#onPush(call, callback),
      PushStream: (call: ServerDuplexStream<PushRequest, PushResponse>) => this.#onStream(call),
    });
  }

  /** The port the listener bound, once started. */
  get boundPort(): number | undefined {
    return this.#port;
  }

  /** Records queued and not yet handed to the pipeline, or handed and not yet taken. */
  get queuedRecords(): number {
    return this.#queued;
  }

  async start(sink: TransportSink): Promise<void> {
    const listen = this.#opts.listen;
    this.#port = await new Promise<number>((resolve, reject) =>
      this.#server.bindAsync(listen, this.#opts.credentials, (err, port) =>
        err
          ? reject(
              new ArchiverError("grpc_bind_failed", `grpc.listen ${listen}: cannot bind: ${err.message}`, "retryable", {
                cause: err,
              }),
            )
          : resolve(port),
      ),
    );
    this.#log.info({ listen, port: this.#port, queueRecords: this.#opts.queueRecords }, "Push listener bound");
    this.#pumping = this.#pump(sink);
  }

  /** Nothing to commit: a push was released when it was answered. */
  async commit(): Promise<void> {}

  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    this.#paused = false;
    this.#poke?.();
    this.#unblock();
  }

  /**
   * Stops accepting: a new push is refused UNAVAILABLE, every stream ends UNAVAILABLE after its answered requests,
   * and the listener closes. Resolves once every queued record has been handed to the pipeline, so every push
   * already answered is written by the drain that follows.
   */
  stopReceiving(): Promise<void> {
    this.#stopped ??= this.#stop();
    return this.#stopped;
  }

  async #stop(): Promise<void> {
    this.#stopping = true;
    this.#blocked = [];
    let unanswered = 0;
    for (const s of this.#streams) {
      for (const r of s.pending) unanswered += r.records.length;
      s.pending.length = 0;
      this.#finish(s, STOPPED);
    }
    const shut = new Promise<void>((resolve) => this.#server.tryShutdown(() => resolve()));
    this.#poke?.();
    await this.#pumping;
    const grace = new AbortController();
    const closed = await Promise.race([
      shut.then(() => true),
      sleep(SHUTDOWN_GRACE_MS, false, { signal: grace.signal }).catch(() => false),
    ]);
    grace.abort();
    if (!closed) this.#server.forceShutdown();
    this.#shutDown = true;
    this.#log.info({ unansweredStreamRecords: unanswered }, "Push listener closed; every answered push handed on");
  }

  async close(): Promise<void> {
    if (!this.#shutDown) {
      this.#stopping = true;
      this.#server.forceShutdown();
      this.#shutDown = true;
    }
  }

  // ---- intake ----

  #onPush(call: ServerUnaryCall<PushRequest, PushResponse>, callback: sendUnaryData<PushResponse>): void {
    const req = call.request;
    const a = this.#admit(req);
    if (a.ok) callback(null, { accepted: req.records.length });
    else callback(a.refusal);
  }

  #onStream(call: ServerDuplexStream<PushRequest, PushResponse>): void {
    const s: Stream = { call, pending: [], ended: false, done: false };
    if (this.#stopping) {
      this.#finish(s, STOPPED);
      return;
    }
    this.#streams.add(s);
    call.on("data", (req: PushRequest) => {
      if (s.done) return;
      s.pending.push(req);
      if (s.pending.length === 1) this.#serve(s);
    });
    call.on("end", () => {
      s.ended = true;
      if (s.pending.length === 0) this.#finish(s, undefined);
    });
    const gone = () => {
      s.done = true;
      this.#streams.delete(s);
    };
    call.on("cancelled", gone);
    call.on("error", gone);
  }

  /** Queues what the stream's pending requests fit; on the first that does not, stops reading until room frees. */
  #serve(s: Stream): boolean {
    while (s.pending.length > 0) {
      const req = s.pending[0] as PushRequest;
      const a = this.#admit(req);
      if (!a.ok) {
        if (a.refusal.code === status.UNAVAILABLE) {
          this.#finish(s, a.refusal);
          return true;
        }
        s.call.pause();
        if (!this.#blocked.includes(s)) this.#blocked.push(s);
        return false;
      }
      s.pending.shift();
      s.call.write({ accepted: req.records.length });
    }
    s.call.resume();
    if (s.ended) this.#finish(s, undefined);
    return true;
  }

  #finish(s: Stream, refusal: Refusal | undefined): void {
    if (s.done) return;
    s.done = true;
    this.#streams.delete(s);
    // emit("error") is how grpc-js ends a server stream with a status: it first flushes the responses written.
    if (refusal) s.call.emit("error", refusal);
    else s.call.end();
  }

  #admit(req: PushRequest): Admission {
    if (this.#stopping) return STOPPING;
    const n = req.records.length;
    if (this.#paused)
      return pushback(PAUSED_PUSHBACK_MS, "intake paused: the archiver is relieving memory, held records or staging");
    // A push larger than the whole queue still goes into an empty one, or it could never be accepted.
    if (this.#queued > 0 && this.#queued + n > this.#opts.queueRecords)
      return pushback(FULL_PUSHBACK_MS, `queue full: ${this.#queued} records queued of grpc.queue_records`);
    if (n > 0) this.#enqueue(req);
    return { ok: true };
  }

  #enqueue(req: PushRequest): void {
    let last: Queued | undefined;
    for (const r of req.records) {
      const topic = r.routing_key === "" ? undefined : r.routing_key;
      if (last === undefined || last.topic !== topic) {
        last = { topic, records: [] };
        this.#queue.push(last);
      }
      last.records.push({ value: r.payload, offset: String(this.#seq++) });
    }
    this.#queued += req.records.length;
    this.#poke?.();
  }

  /** Lets blocked streams queue, first blocked first, while there is room. */
  #unblock(): void {
    while (this.#blocked.length > 0) {
      const s = this.#blocked[0] as Stream;
      if (!s.done && !this.#serve(s)) return;
      this.#blocked.shift();
    }
  }

  // ---- to the pipeline ----

  /** Joins the queue's head entries that share a routing key, up to MAX_BATCH_RECORDS. */
  #take(): RecordsBatch {
    const first = this.#queue.shift() as Queued;
    const parts = [first.records];
    let n = first.records.length;
    for (let next = this.#queue.peek(); next !== undefined; next = this.#queue.peek()) {
      if (next.topic !== first.topic || n + next.records.length > MAX_BATCH_RECORDS) break;
      this.#queue.shift();
      parts.push(next.records);
      n += next.records.length;
    }
    return { topic: first.topic, partition: 0, records: parts.length === 1 ? first.records : parts.flat() };
  }

  async #pump(sink: TransportSink): Promise<void> {
    for (;;) {
      const empty = this.#queue.length === 0;
      if (empty && this.#stopping) return;
      // Paused, the queue is held as Kafka's fetched data would be; at shutdown it is handed on regardless.
      if (empty || (this.#paused && !this.#stopping)) {
        await new Promise<void>((r) => (this.#poke = r));
        this.#poke = undefined;
        continue;
      }
      const batch = this.#take();
      try {
        await sink.onBatch(batch);
      } catch (err) {
        this.#log.error(
          { err, records: batch.records.length },
          "pipeline failed a pushed batch: its answered records are lost",
        );
      }
      this.#queued -= batch.records.length;
      this.#unblock();
    }
  }
}
