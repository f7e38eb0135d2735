// The map of the WebAssembly memories the transport and the route share, in one place. A lane's lz4 decoder
// (transport/lz4-frame.ts, lz4.wat) decodes Kafka's lz4 batches into its memory; the route scan (route/scan-wasm.ts,
// scan.wat) reads each record there, where the decoder left it, with its tables at the memory's head, and the route
// reply's copies (route/reply-wasm.ts, reply.wat) go from there into the reply, a table of them at a time. A record
// scanned where it lies saves a Buffer#copy a record (about 0.1 µs), and a table of copies a call into the runtime
// three times a record.
//
// A decoder's memory (one a lane; its buffer is replaced when it grows, at the start of a run of decodes):
//
//   0        256      512       1024      2048            67,584           131,072          196,608
//   +--------+--------+---------+---------+---------------+----------------+----------------+--------------------->
//   | HEX    | ESCAPE | keys    | slots   | container     | (unused)       | reply table    | decoded batches, then
//   |        |        |         |         | stack         |                | 2,048 rows of  | each frame's compressed
//   |        |        |         |         |               |                | 32 bytes       | blocks past their
//   +--------+--------+---------+---------+---------------+----------------+----------------+ output's room ------->
//   `------------- scan tables (scan.wat) ----------------'                 REPLY_TABLE_AT   DECODED_AT
//                                                          RECORD_AT
//
// A scanner's own memory (one a router's scanner), for records that lie anywhere else, each copied in:
//
//   0                                                      67,584
//   +------------------------------------------------------+--------------------------------+
//   | scan tables, as above                                | the record, 16 bytes of slack  |
//   +------------------------------------------------------+--------------------------------+
//                                                          RECORD_AT
//
// The scan tables: HEX a hex digit's value (255 for any other byte); ESCAPE 1 for the letters of one-letter escapes;
// keys a u32 count, then per key a u32 length and its bytes, SCAN_KEY_STRIDE apart from SCAN_KEYS_AT + 4; slots per
// key SCAN_SLOT_BYTES: u32 kind (0 absent, 1 scalar, 2 container), u32 start, u32 end, u32 escaped; the container
// stack a byte a depth. A reply table row is reply.wat's (to, from, length, endAt, end, offsetAt, offset). A reply's
// own memory, shared with the event loop, holds the route reply alone, laid out as route/block.ts says.
import { WASM_PAGE, type WasmMemory } from "./loader.ts";

export const SCAN_HEX_AT = 0;
export const SCAN_ESCAPE_AT = 256;
export const SCAN_KEYS_AT = 512;
export const SCAN_KEY_STRIDE = 64;
export const SCAN_SLOTS_AT = 1024;
export const SCAN_SLOT_BYTES = 16;
/** Where a record copied into a scanner's own memory lies: the scan tables end here. */
export const RECORD_AT = 67_584;
/** Where the route reply's table of copies lies in a decoder's memory, and its bytes. */
export const REPLY_TABLE_AT = 2 * WASM_PAGE;
export const REPLY_TABLE_BYTES = WASM_PAGE;
/** Where a decoder's output starts: the bytes below it are the scan's and the reply's, never the decoder's. */
export const DECODED_AT = 3 * WASM_PAGE;

if (RECORD_AT > REPLY_TABLE_AT || REPLY_TABLE_AT + REPLY_TABLE_BYTES > DECODED_AT) {
  throw new Error("the regions of a decoder's memory overlap: see runtime/src/wasm/memory.ts");
}

/** The decoders' memories by their current buffer, so a view of one leads to the memory it lies in. */
const decoders = new WeakMap<ArrayBuffer, WasmMemory>();

/** Marks `memory`'s current buffer as a decoder's, laid out as above: called whenever the buffer is replaced. */
export function registerDecoderMemory(memory: WasmMemory): void {
  decoders.set(memory.buffer, memory);
}

/** The decoder memory `buffer` is the current buffer of, if it is one. */
export function decoderMemory(buffer: ArrayBufferLike): WasmMemory | undefined {
  return decoders.get(buffer as ArrayBuffer);
}
