;; The copies that put an lz4 batch's records into a route reply (route/reply-wasm.ts): from the lz4 decoder's memory,
;; where the records were decoded and routed, into the reply's shared memory, each followed by a newline, with its end
;; and its Kafka offset noted in the reply. The caller writes a table of copies into the decoder's memory and puts a
;; table at a time: one call for thousands of records, where a Buffer#copy and two DataView writes a record cost the
;; lane three calls into the runtime each.
;;
;; A row of the table (32 bytes, in the decoder's reply table: runtime/src/wasm/memory.ts): i32 to, i32 from,
;; i32 length, i32 endAt, i32 end, i32 offsetAt, f64 offset. `to`, `endAt` and `offsetAt` are places in the reply; `from` in the decoder's memory.
(module
  (import "env" "records" (memory $records 1))
  (import "env" "reply" (memory $reply 1 65536 shared))

  (func (export "put") (param $table i32) (param $rows i32)
    (local $row i32) (local $last i32) (local $to i32) (local $length i32)
    (local.set $row (local.get $table))
    (local.set $last (i32.add (local.get $table) (i32.shl (local.get $rows) (i32.const 5))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $row) (local.get $last)))
        (local.set $to (i32.load $records (local.get $row)))
        (local.set $length (i32.load $records offset=8 (local.get $row)))
        (memory.copy $reply $records
          (local.get $to) (i32.load $records offset=4 (local.get $row)) (local.get $length))
        (i32.store8 $reply (i32.add (local.get $to) (local.get $length)) (i32.const 0x0a))
        (i32.store $reply
          (i32.load $records offset=12 (local.get $row)) (i32.load $records offset=16 (local.get $row)))
        (f64.store $reply
          (i32.load $records offset=20 (local.get $row)) (f64.load $records offset=24 (local.get $row)))
        (local.set $row (i32.add (local.get $row) (i32.const 32)))
        (br $next)))))
