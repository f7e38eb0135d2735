;; LZ4 block decoding (the sequences inside an LZ4 frame's blocks) for transport/lz4-frame.ts, which parses the frame,
;; places its compressed blocks in this memory past the room for their output, and hands out views of the output
;; (the memory's regions: runtime/src/wasm/memory.ts). On the bench's Kafka batches this ran at 2.1-2.8 GB/s where
;; lz4-napi's decompressFrameSync ran at 0.4.
;;
;; block(ip, end, op, limit, lowest): decodes memory[ip, end) to op onward; returns the new op, or -1 where the block
;; is malformed (a length running past the block or past limit, a match offset of 0 or reaching before lowest). The
;; output may be written, and the block read, up to 16 bytes past their ends (copies go 16 bytes a store, the last one
;; running over): the caller keeps nothing there, and leaves that slack after a frame's output and after its blocks.
;; A memory.copy for each copy longer than 16 bytes was a call out of the module: on JSON lines in 64 KiB blocks this
;; decodes at 3.8 GB/s where that ran at 3.0.
(module
  (memory (export "memory") 16)
  ;; n bytes from `from` to `to`, 16 a store, the last store running over (at least one store, even for n = 0).
  (func $copy16 (param $to i32) (param $from i32) (param $n i32)
    (local $stop i32)
    (local.set $stop (i32.add (local.get $to) (local.get $n)))
    (loop $next
      (v128.store (local.get $to) (v128.load (local.get $from)))
      (local.set $from (i32.add (local.get $from) (i32.const 16)))
      (local.set $to (i32.add (local.get $to) (i32.const 16)))
      (br_if $next (i32.lt_u (local.get $to) (local.get $stop)))))
  (func (export "block") (param $ip i32) (param $end i32) (param $op i32) (param $limit i32) (param $lowest i32) (result i32)
    (local $token i32) (local $lit i32) (local $b i32) (local $off i32) (local $ml i32) (local $from i32) (local $stop i32)
    (loop $seq
      (if (i32.ge_u (local.get $ip) (local.get $end)) (then (return (i32.const -1))))
      (local.set $token (i32.load8_u (local.get $ip)))
      (local.set $ip (i32.add (local.get $ip) (i32.const 1)))
      (local.set $lit (i32.shr_u (local.get $token) (i32.const 4)))
      (if (i32.eq (local.get $lit) (i32.const 15))
        (then
          (loop $more
            (if (i32.ge_u (local.get $ip) (local.get $end)) (then (return (i32.const -1))))
            (local.set $b (i32.load8_u (local.get $ip)))
            (local.set $ip (i32.add (local.get $ip) (i32.const 1)))
            (local.set $lit (i32.add (local.get $lit) (local.get $b)))
            (br_if $more (i32.eq (local.get $b) (i32.const 255))))))
      (if (i32.or (i32.gt_u (local.get $lit) (i32.sub (local.get $end) (local.get $ip)))
                  (i32.gt_u (local.get $lit) (i32.sub (local.get $limit) (local.get $op))))
        (then (return (i32.const -1))))
      ;; Literals (input and output never overlap).
      (call $copy16 (local.get $op) (local.get $ip) (local.get $lit))
      (local.set $ip (i32.add (local.get $ip) (local.get $lit)))
      (local.set $op (i32.add (local.get $op) (local.get $lit)))
      (if (i32.eq (local.get $ip) (local.get $end)) (then (return (local.get $op))))
      (if (i32.lt_u (i32.sub (local.get $end) (local.get $ip)) (i32.const 2)) (then (return (i32.const -1))))
      (local.set $off (i32.load16_u (local.get $ip)))
      (local.set $ip (i32.add (local.get $ip) (i32.const 2)))
      (local.set $ml (i32.add (i32.and (local.get $token) (i32.const 15)) (i32.const 4)))
      (if (i32.eq (local.get $ml) (i32.const 19))
        (then
          (loop $more
            (if (i32.ge_u (local.get $ip) (local.get $end)) (then (return (i32.const -1))))
            (local.set $b (i32.load8_u (local.get $ip)))
            (local.set $ip (i32.add (local.get $ip) (i32.const 1)))
            (local.set $ml (i32.add (local.get $ml) (local.get $b)))
            (br_if $more (i32.eq (local.get $b) (i32.const 255))))))
      (local.set $from (i32.sub (local.get $op) (local.get $off)))
      (if (i32.or (i32.eqz (local.get $off)) (i32.lt_s (local.get $from) (local.get $lowest))) (then (return (i32.const -1))))
      (if (i32.gt_u (local.get $ml) (i32.sub (local.get $limit) (local.get $op))) (then (return (i32.const -1))))
      (if (i32.ge_u (local.get $off) (i32.const 16))
        (then
          ;; At 16 back or more, each 16-byte load reads only output already final.
          (call $copy16 (local.get $op) (local.get $from) (local.get $ml)))
      (else (if (i32.ge_u (local.get $off) (local.get $ml))
        ;; Closer than 16 but not overlapping: one store, whose bytes past the match are written again later.
        (then (v128.store (local.get $op) (v128.load (local.get $from))))
        (else
          ;; Overlapping: the match repeats what it copies, so byte by byte is its meaning.
          (local.set $stop (i32.add (local.get $op) (local.get $ml)))
          (loop $byte
            (i32.store8 (local.get $op) (i32.load8_u (local.get $from)))
            (local.set $op (i32.add (local.get $op) (i32.const 1)))
            (local.set $from (i32.add (local.get $from) (i32.const 1)))
            (br_if $byte (i32.lt_u (local.get $op) (local.get $stop))))
          (local.set $op (i32.sub (local.get $op) (local.get $ml)))))))
      (local.set $op (i32.add (local.get $op) (local.get $ml)))
      (br $seq))
    (i32.const -1))
)
