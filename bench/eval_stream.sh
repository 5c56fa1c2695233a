#!/bin/bash
# `factorjit eval` end to end on the 50,000 x 1,000 float32 price panels (bench/make_price_npy.cpp):
# corr(window(A,20), window(B,20)), CPU backend, REPS runs of each binary given, alternating, a `sync`
# before each so that one run's write-back does not land in the next. Prints wall and CPU seconds, the
# largest resident set and the load average (the development machine is shared; read the numbers with it).
# usage: bench/eval_stream.sh DATA_DIR REPS BINARY [BINARY ...]   (extra eval options in $EVAL_ARGS)
set -e
dir=$1; reps=$2; shift 2
[ -f "$dir/A.npy" ] || { echo "no $dir/A.npy: run make_price_npy $dir first" >&2; exit 2; }
for r in $(seq "$reps"); do
  for bin in "$@"; do
    sync
    load=$(cut -d' ' -f1 /proc/loadavg)
    /usr/bin/time -f "%e %U %S %M" -o /tmp/eval_stream_time.txt "$bin" eval --backend cpu \
      -e 'corr(window(A,20), window(B,20))' -i A="$dir/A.npy" -i B="$dir/B.npy" -o "$dir/out.npy" $EVAL_ARGS
    read -r wall user sys rss < /tmp/eval_stream_time.txt
    echo "$(basename "$bin") wall ${wall}s cpu $(echo "$user + $sys" | bc)s maxrss $((rss / 1024))MB load $load"
  done
done
