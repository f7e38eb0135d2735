;; The validating scan of route/extract.ts, for records whose routed paths are all top-level plain keys: one pass over
;; a record that accepts exactly what JSON.parse accepts, and leaves at each routed key's slot the span and kind of the
;; key's last value. String bodies are scanned 16 bytes at a time (SIMD); the rest is the same state machine as
;; extract.ts's parse. The caller (route/scan-wasm.ts) writes the tables and reads the slots. The memory is imported: a
;; scanner's own, into which each record is copied, or an lz4 decoder's, whose output the scan reads where it was
;; decoded. Both are laid out as runtime/src/wasm/memory.ts maps them: the constant offsets below are its SCAN_* ones
;; (the container stack, a byte a depth, 1 object and 2 array, is at 2048).
(module
  (import "env" "memory" (memory 2))
  ;; Escapes met so far: a scan compares it before and after a string, so plain strings store nothing.
  (global $escapes (mut i32) (i32.const 0))
  ;; The routed key the last $key named at depth 1, else -1.
  (global $matched (mut i32) (i32.const -1))

  ;; Records are mostly compact: the byte at p is rarely a space, and then no loop runs.
  (func $ws (param $p i32) (param $n i32) (result i32)
    (if (result i32) (i32.gt_u (i32.load8_u (local.get $p)) (i32.const 0x20))
      (then (local.get $p))
      (else (call $skipSpace (local.get $p) (local.get $n)))))

  (func $skipSpace (param $p i32) (param $n i32) (result i32)
    (local $c i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $p) (local.get $n)))
        (local.set $c (i32.load8_u (local.get $p)))
        (br_if $done
          (i32.eqz
            (i32.or
              (i32.or (i32.eq (local.get $c) (i32.const 0x20)) (i32.eq (local.get $c) (i32.const 0x0a)))
              (i32.or (i32.eq (local.get $c) (i32.const 0x0d)) (i32.eq (local.get $c) (i32.const 0x09))))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $next)))
    (local.get $p))

  ;; A string body from p (after its opening quote); returns the index after the closing quote, or -1.
  (func $string (param $p i32) (param $n i32) (result i32)
    (local $bits i32) (local $v v128) (local $c i32) (local $e i32)
    (loop $scan
      ;; 16 bytes at a time while none is a quote, a backslash or under 0x20; then straight to the first that is.
      (block $found
        (loop $wide
          (br_if $found (i32.gt_u (i32.add (local.get $p) (i32.const 16)) (local.get $n)))
          (local.set $v (v128.load (local.get $p)))
          (local.set $bits
            (i8x16.bitmask
              (v128.or
                (v128.or
                  (i8x16.eq (local.get $v) (i8x16.splat (i32.const 0x22)))
                  (i8x16.eq (local.get $v) (i8x16.splat (i32.const 0x5c))))
                (i8x16.lt_u (local.get $v) (i8x16.splat (i32.const 0x20))))))
          (if (local.get $bits)
            (then
              (local.set $p (i32.add (local.get $p) (i32.ctz (local.get $bits))))
              (br $found)))
          (local.set $p (i32.add (local.get $p) (i32.const 16)))
          (br $wide)))
      (if (i32.ge_u (local.get $p) (local.get $n)) (then (return (i32.const -1))))
      (local.set $c (i32.load8_u (local.get $p)))
      (local.set $p (i32.add (local.get $p) (i32.const 1)))
      (if (i32.eq (local.get $c) (i32.const 0x22)) (then (return (local.get $p))))
      (if (i32.eq (local.get $c) (i32.const 0x5c))
        (then
          (if (i32.ge_u (local.get $p) (local.get $n)) (then (return (i32.const -1))))
          (global.set $escapes (i32.add (global.get $escapes) (i32.const 1)))
          (local.set $e (i32.load8_u (local.get $p)))
          (local.set $p (i32.add (local.get $p) (i32.const 1)))
          (if (i32.eq (local.get $e) (i32.const 0x75))
            (then
              (if (i32.gt_u (i32.add (local.get $p) (i32.const 4)) (local.get $n)) (then (return (i32.const -1))))
              ;; A non-digit is 255 and digits are below 16: the union is 255 exactly when one is not a digit.
              (if (i32.eq
                    (i32.or
                      (i32.or (i32.load8_u (i32.load8_u (local.get $p)))
                              (i32.load8_u (i32.load8_u offset=1 (local.get $p))))
                      (i32.or (i32.load8_u (i32.load8_u offset=2 (local.get $p)))
                              (i32.load8_u (i32.load8_u offset=3 (local.get $p)))))
                    (i32.const 255))
                (then (return (i32.const -1))))
              (local.set $p (i32.add (local.get $p) (i32.const 4))))
            (else
              (if (i32.eqz (i32.load8_u offset=256 (local.get $e))) (then (return (i32.const -1))))))
          (br $scan)))
      ;; A raw byte under 0x20 (quote and backslash are handled): JSON.parse refuses it.
      (if (i32.lt_u (local.get $c) (i32.const 0x20)) (then (return (i32.const -1))))
      (br $scan))
    (i32.const -1))

  (func $isDigit (param $c i32) (result i32)
    (i32.lt_u (i32.sub (local.get $c) (i32.const 0x30)) (i32.const 10)))

  (func $digits (param $p i32) (param $n i32) (result i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $p) (local.get $n)))
        (br_if $done (i32.eqz (call $isDigit (i32.load8_u (local.get $p)))))
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (br $next)))
    (local.get $p))

  ;; A number at p (JSON's grammar); returns the index after it, or -1.
  (func $number (param $p i32) (param $n i32) (result i32)
    (local $c i32)
    (if (i32.and (i32.lt_u (local.get $p) (local.get $n)) (i32.eq (i32.load8_u (local.get $p)) (i32.const 0x2d)))
      (then (local.set $p (i32.add (local.get $p) (i32.const 1)))))
    (if (i32.ge_u (local.get $p) (local.get $n)) (then (return (i32.const -1))))
    (local.set $c (i32.load8_u (local.get $p)))
    (if (i32.eq (local.get $c) (i32.const 0x30))
      (then (local.set $p (i32.add (local.get $p) (i32.const 1))))
      (else
        (if (i32.eqz (call $isDigit (local.get $c))) (then (return (i32.const -1))))
        (local.set $p (call $digits (local.get $p) (local.get $n)))))
    (if (i32.and (i32.lt_u (local.get $p) (local.get $n)) (i32.eq (i32.load8_u (local.get $p)) (i32.const 0x2e)))
      (then
        (local.set $p (i32.add (local.get $p) (i32.const 1)))
        (if (i32.ge_u (local.get $p) (local.get $n)) (then (return (i32.const -1))))
        (if (i32.eqz (call $isDigit (i32.load8_u (local.get $p)))) (then (return (i32.const -1))))
        (local.set $p (call $digits (local.get $p) (local.get $n)))))
    (if (i32.lt_u (local.get $p) (local.get $n))
      (then
        (local.set $c (i32.load8_u (local.get $p)))
        (if (i32.or (i32.eq (local.get $c) (i32.const 0x65)) (i32.eq (local.get $c) (i32.const 0x45)))
          (then
            (local.set $p (i32.add (local.get $p) (i32.const 1)))
            (if (i32.lt_u (local.get $p) (local.get $n))
              (then
                (local.set $c (i32.load8_u (local.get $p)))
                (if (i32.or (i32.eq (local.get $c) (i32.const 0x2b)) (i32.eq (local.get $c) (i32.const 0x2d)))
                  (then (local.set $p (i32.add (local.get $p) (i32.const 1)))))))
            (if (i32.ge_u (local.get $p) (local.get $n)) (then (return (i32.const -1))))
            (if (i32.eqz (call $isDigit (i32.load8_u (local.get $p)))) (then (return (i32.const -1))))
            (local.set $p (call $digits (local.get $p) (local.get $n)))))))
    (local.get $p))

  ;; The routed key whose bytes are memory[start, end), or -1.
  (func $match (param $start i32) (param $end i32) (result i32)
    (local $i i32) (local $count i32) (local $at i32) (local $len i32) (local $k i32)
    (local.set $count (i32.load (i32.const 512)))
    (local.set $len (i32.sub (local.get $end) (local.get $start)))
    (block $none
      (loop $key
        (br_if $none (i32.ge_u (local.get $i) (local.get $count)))
        (local.set $at (i32.add (i32.const 516) (i32.shl (local.get $i) (i32.const 6))))
        (if (i32.eq (i32.load (local.get $at)) (local.get $len))
          (then
            (local.set $k (i32.const 0))
            (block $differ
              (loop $byte
                (if (i32.ge_u (local.get $k) (local.get $len)) (then (return (local.get $i))))
                (br_if $differ
                  (i32.ne
                    (i32.load8_u (i32.add (local.get $start) (local.get $k)))
                    (i32.load8_u offset=4 (i32.add (local.get $at) (local.get $k)))))
                (local.set $k (i32.add (local.get $k) (i32.const 1)))
                (br $byte)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $key)))
    (i32.const -1))

  (func $slot (param $i i32) (result i32)
    (i32.add (i32.const 1024) (i32.shl (local.get $i) (i32.const 4))))

  ;; scan(p, n, maxDepth), the record being memory[p, n): 0 valid, 1 invalid, 2 nested past maxDepth (extract.ts's
  ;; ScanResult), or 3, left to the JavaScript scan: a top-level key written with an escape, or nesting past 65,535.
  (func (export "scan") (param $p i32) (param $n i32) (param $maxDepth i32) (result i32)
    (local $depth i32) (local $field i32) (local $c i32) (local $d i32) (local $open i32) (local $start i32)
    (local $esc i32) (local $i i32) (local $count i32)
    ;; Every slot absent until its key is met.
    (local.set $count (i32.load (i32.const 512)))
    (block $cleared
      (loop $clear
        (br_if $cleared (i32.ge_u (local.get $i) (local.get $count)))
        (i32.store (call $slot (local.get $i)) (i32.const 0))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $clear)))
    (local.set $field (i32.const -1))
    (local.set $p (call $ws (local.get $p) (local.get $n)))
    (loop $value
      ;; A value starts at p; $field is the routed key it belongs to, or -1.
      (if (i32.ge_s (local.get $field) (i32.const 0))
        (then (i32.store (call $slot (local.get $field)) (i32.const 0))))
      (if (i32.ge_u (local.get $p) (local.get $n)) (then (return (i32.const 1))))
      (local.set $c (i32.load8_u (local.get $p)))
      (block $after
        (if (i32.or (i32.eq (local.get $c) (i32.const 0x7b)) (i32.eq (local.get $c) (i32.const 0x5b)))
          (then
            (local.set $depth (i32.add (local.get $depth) (i32.const 1)))
            (if (i32.gt_u (local.get $depth) (local.get $maxDepth)) (then (return (i32.const 2))))
            (if (i32.gt_u (local.get $depth) (i32.const 65535)) (then (return (i32.const 3))))
            (i32.store8 offset=2048 (local.get $depth) (select (i32.const 1) (i32.const 2) (i32.eq (local.get $c) (i32.const 0x7b))))
            (if (i32.ge_s (local.get $field) (i32.const 0))
              (then (i32.store (call $slot (local.get $field)) (i32.const 2))))
            (local.set $field (i32.const -1))
            (local.set $p (call $ws (i32.add (local.get $p) (i32.const 1)) (local.get $n)))
            (if (i32.ge_u (local.get $p) (local.get $n)) (then (return (i32.const 1))))
            (local.set $d (i32.load8_u (local.get $p)))
            ;; An empty container closes at once.
            (if (i32.eq (local.get $d) (i32.add (local.get $c) (i32.const 2)))
              (then
                (local.set $depth (i32.sub (local.get $depth) (i32.const 1)))
                (local.set $p (i32.add (local.get $p) (i32.const 1)))
                (br $after)))
            (if (i32.eq (local.get $c) (i32.const 0x5b)) (then (br $value)))
            (local.set $p (call $key (local.get $p) (local.get $n) (local.get $depth)))
            (if (i32.lt_s (local.get $p) (i32.const 0)) (then (return (i32.sub (i32.const 0) (local.get $p)))))
            (local.set $field (global.get $matched))
            (br $value)))
        (if (i32.eq (local.get $c) (i32.const 0x22))
          (then
            (local.set $start (local.get $p))
            (local.set $esc (global.get $escapes))
            (local.set $p (call $string (i32.add (local.get $p) (i32.const 1)) (local.get $n)))
            (if (i32.lt_s (local.get $p) (i32.const 0)) (then (return (i32.const 1))))
            (if (i32.ge_s (local.get $field) (i32.const 0))
              (then
                (call $scalar (local.get $field) (local.get $start) (local.get $p))
                (i32.store offset=12 (call $slot (local.get $field)) (i32.ne (global.get $escapes) (local.get $esc)))))
            (br $after)))
        (if (i32.or (i32.eq (local.get $c) (i32.const 0x2d)) (call $isDigit (local.get $c)))
          (then
            (local.set $start (local.get $p))
            (local.set $p (call $number (local.get $p) (local.get $n)))
            (if (i32.lt_s (local.get $p) (i32.const 0)) (then (return (i32.const 1))))
            (if (i32.ge_s (local.get $field) (i32.const 0))
              (then (call $scalar (local.get $field) (local.get $start) (local.get $p))))
            (br $after)))
        ;; true, null ("true" and "null" as little-endian words), false.
        (local.set $start (local.get $p))
        (if (i32.and
              (i32.le_u (i32.add (local.get $p) (i32.const 4)) (local.get $n))
              (i32.or (i32.eq (i32.load (local.get $p)) (i32.const 0x65757274))
                      (i32.eq (i32.load (local.get $p)) (i32.const 0x6c6c756e))))
          (then (local.set $p (i32.add (local.get $p) (i32.const 4))))
          (else
            (if (i32.and
                  (i32.le_u (i32.add (local.get $p) (i32.const 5)) (local.get $n))
                  (i32.and (i32.eq (local.get $c) (i32.const 0x66))
                           (i32.eq (i32.load offset=1 (local.get $p)) (i32.const 0x65736c61))))
              (then (local.set $p (i32.add (local.get $p) (i32.const 5))))
              (else (return (i32.const 1))))))
        (if (i32.and (i32.ge_s (local.get $field) (i32.const 0)) (i32.ne (local.get $c) (i32.const 0x6e)))
          (then (call $scalar (local.get $field) (local.get $start) (local.get $p)))))
      ;; After a value: separators and closers until the next value starts, or the document ends.
      (local.set $field (i32.const -1))
      (loop $close
        (local.set $p (call $ws (local.get $p) (local.get $n)))
        (if (i32.eqz (local.get $depth))
          (then (return (select (i32.const 0) (i32.const 1) (i32.eq (local.get $p) (local.get $n))))))
        (if (i32.ge_u (local.get $p) (local.get $n)) (then (return (i32.const 1))))
        (local.set $d (i32.load8_u (local.get $p)))
        (local.set $open (i32.load8_u offset=2048 (local.get $depth)))
        (if (i32.eq (local.get $d) (i32.const 0x2c))
          (then
            (local.set $p (call $ws (i32.add (local.get $p) (i32.const 1)) (local.get $n)))
            (if (i32.eq (local.get $open) (i32.const 2)) (then (br $value)))
            (local.set $p (call $key (local.get $p) (local.get $n) (local.get $depth)))
            (if (i32.lt_s (local.get $p) (i32.const 0)) (then (return (i32.sub (i32.const 0) (local.get $p)))))
            (local.set $field (global.get $matched))
            (br $value)))
        (if (i32.or
              (i32.and (i32.eq (local.get $d) (i32.const 0x7d)) (i32.eq (local.get $open) (i32.const 1)))
              (i32.and (i32.eq (local.get $d) (i32.const 0x5d)) (i32.eq (local.get $open) (i32.const 2))))
          (then
            (local.set $depth (i32.sub (local.get $depth) (i32.const 1)))
            (local.set $p (i32.add (local.get $p) (i32.const 1)))
            (br $close)))
        (return (i32.const 1))))
    (i32.const 1))

  (func $scalar (param $field i32) (param $start i32) (param $end i32)
    (local $at i32)
    (local.set $at (call $slot (local.get $field)))
    (i32.store (local.get $at) (i32.const 1))
    (i32.store offset=4 (local.get $at) (local.get $start))
    (i32.store offset=8 (local.get $at) (local.get $end)))

  ;; Reads `"key":` at p; returns where the value starts, or the negated result code (-1 invalid, -3 a top-level key
  ;; with an escape). Sets $matched to the routed key it names at depth 1, else -1.
  (func $key (param $p i32) (param $n i32) (param $depth i32) (result i32)
    (local $start i32) (local $end i32) (local $esc i32)
    (global.set $matched (i32.const -1))
    (if (i32.ge_u (local.get $p) (local.get $n)) (then (return (i32.const -1))))
    (if (i32.ne (i32.load8_u (local.get $p)) (i32.const 0x22)) (then (return (i32.const -1))))
    (local.set $start (i32.add (local.get $p) (i32.const 1)))
    (local.set $esc (global.get $escapes))
    (local.set $end (call $string (local.get $start) (local.get $n)))
    (if (i32.lt_s (local.get $end) (i32.const 0)) (then (return (i32.const -1))))
    (if (i32.eq (local.get $depth) (i32.const 1))
      (then
        (if (i32.ne (global.get $escapes) (local.get $esc)) (then (return (i32.const -3))))
        (global.set $matched (call $match (local.get $start) (i32.sub (local.get $end) (i32.const 1))))))
    (local.set $p (call $ws (local.get $end) (local.get $n)))
    (if (i32.ge_u (local.get $p) (local.get $n)) (then (return (i32.const -1))))
    (if (i32.ne (i32.load8_u (local.get $p)) (i32.const 0x3a)) (then (return (i32.const -1))))
    (call $ws (i32.add (local.get $p) (i32.const 1)) (local.get $n)))
)
