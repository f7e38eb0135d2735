// One lane of the snappy pool (see snappy.ts): runs the package's frame-format Compressor and Decompressor here,
// off the event loop.

import { parentPort } from "node:worker_threads";
import { Compressor, Decompressor } from "snappy";
import type { SnappyReply, SnappyRequest } from "./snappy.ts";

const port = parentPort;
if (port === null) throw new Error("snappy-worker.ts runs only as a worker thread of the snappy codec");

port.on("message", (request: SnappyRequest) => {
  void handle(request).then(
    (output) => port.postMessage({ id: request.id, output } satisfies SnappyReply, [output.buffer]),
    (err: unknown) => port.postMessage({ id: request.id, error: err instanceof Error ? err.message : String(err) }),
  );
});

async function handle({ op, input }: SnappyRequest): Promise<Uint8Array<ArrayBuffer>> {
  const stream = op === "compress" ? new Compressor() : new Decompressor();
  const head = stream.update(input);
  const tail = await stream.finish();
  // A fresh buffer of its own, so transferring it detaches nothing else (the package's buffers may be pooled).
  const output = new Uint8Array(head.length + tail.length);
  output.set(head);
  output.set(tail, head.length);
  return output;
}
