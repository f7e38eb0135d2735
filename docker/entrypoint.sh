#!/bin/sh
# The images' entrypoint: entrypoint.sh MAIN.js [ARGS...]. Sizes V8's old space from the container's memory limit,
# then execs node, which stays PID 1 and gets SIGTERM itself: both programs handle SIGTERM and SIGINT and drain, and
# neither starts child processes, so no init is needed to reap any.
#
# Node 24 does read the cgroup limit, but sizes its heap to about the whole of it (a 256 MiB limit gives a 259 MiB
# heap), leaving nothing for Buffers, the compressors' native memory and the thread pool: the kernel would kill the
# pod before V8 collected. DFE_HEAP_PERCENT (default 50) of the limit goes to the old space instead, at least 64 MiB.
# A --max-old-space-size already in NODE_OPTIONS wins. DFE_CGROUP_ROOT (default /sys/fs/cgroup) is for tests.
set -eu
main=${1:?usage: entrypoint.sh MAIN.js [ARGS...]}
shift
root=${DFE_CGROUP_ROOT:-/sys/fs/cgroup}
limit=
for f in "$root/memory.max" "$root/memory/memory.limit_in_bytes"; do
  if [ -r "$f" ]; then
    limit=$(cat "$f")
    break
  fi
done
heap=
case ${NODE_OPTIONS:-} in
  *--max-old-space-size*) ;;
  *)
    case $limit in
      '' | max | *[!0-9]*) ;;
      *)
        # cgroup v1 writes "no limit" as a number near 2^63.
        if [ "$limit" -lt 1152921504606846976 ]; then
          heap=$((limit / 1048576))
          heap=$((heap * ${DFE_HEAP_PERCENT:-50} / 100))
          if [ "$heap" -lt 64 ]; then heap=64; fi
        fi
        ;;
    esac
    ;;
esac
if [ -n "$heap" ]; then
  exec node "--max-old-space-size=$heap" "$main" "$@"
fi
exec node "$main" "$@"
