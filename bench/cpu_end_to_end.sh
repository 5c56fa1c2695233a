#!/bin/bash
# Issue 22's CPU end-to-end figures, in one run (bench/RESULTS.md):
#
#  1. `factorjit eval --backend cpu -e 'corr(window(A,20), window(B,20))'` on two 50,000 x 1,000 float32 .npy
#     files against what NumPy needs to load both, add them and save the sum (the least any tool that reads the
#     inputs and writes one output of that size does): REPS runs of each, alternating, a `sync` before each so
#     that one run's write-back does not land in the next; the medians and their ratio (target <= 1.5), against
#     numpy's whole process and, stricter, against its load + add + save alone (timed inside the process).
#  2. `--max-memory 256M` on 50,000 x 4,000 (two 800 MB inputs, an 800 MB output): wall time and the peak
#     resident set from `/usr/bin/time -v` (target <= 256 MB + 250 MB).
#
# Both sides read the same files from the page cache (a first untimed run of each warms it) and write into the
# same folder. Every line carries the 1-minute load average: the development machine is shared.
#
# usage: bench/cpu_end_to_end.sh FACTORJIT DIR_1K DIR_4K [REPS]
#   DIR_1K, DIR_4K: folders with A.npy and B.npy of 50,000 x 1,000 and 50,000 x 4,000 (`make_price_npy DIR ROWS
#   COLS`, bench/make_price_npy.cpp); REPS (default 7). Extra eval options in $EVAL_ARGS.
set -euo pipefail
fj=$1; d1=$2; d4=$3; reps=${4:-7}
# The interpreter: $PYTHON, else the first of python3 on PATH and /usr/bin/python3 that imports numpy (on Debian a
# pyenv shim on PATH may have no packages).
py=${PYTHON:-}
if [ -z "$py" ]; then
  for c in python3 /usr/bin/python3; do
    if "$c" -c 'import numpy' 2>/dev/null; then py=$c; break; fi
  done
  [ -n "$py" ] || { echo "no python3 that imports numpy (set PYTHON)" >&2; exit 2; }
fi
for d in "$d1" "$d4"; do
  [ -f "$d/A.npy" ] && [ -f "$d/B.npy" ] || { echo "no $d/A.npy or $d/B.npy: run make_price_npy first" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }

# Prints the wall and CPU seconds of the load + add + save itself (without the interpreter's start and numpy's
# import).
numpy_add() {
  "$py" -c '
import sys, time, numpy as np
d = sys.argv[1]
t0, c0 = time.perf_counter(), time.process_time()
np.save(d + "/sum.npy", np.load(d + "/A.npy") + np.load(d + "/B.npy"))
print(f"{time.perf_counter() - t0:.3f} {time.process_time() - c0:.3f}")' "$1"
}
fj_eval() {  # DIR [extra eval options]
  local d=$1
  shift
  "$fj" eval --backend cpu -e 'corr(window(A,20), window(B,20))' -i A="$d/A.npy" -i B="$d/B.npy" -o "$d/out.npy" \
    ${EVAL_ARGS:-} "$@"
}
# "wall cpu": the wall seconds of one command and its processes' CPU seconds (user + system), from bash's `time`
# (milliseconds; GNU time's %e has 10 ms steps). CPU seconds move less with the machine's load than wall time.
# The command's stdout goes to $tmp/stdout.
wall_cpu() {
  local TIMEFORMAT='%R %U %S' r u s
  { time "$@" > "$tmp/stdout" 2> "$tmp/stderr"; } 2> "$tmp/times"
  read -r r u s < "$tmp/times"
  echo "$r $(echo "$u + $s" | bc)"
}
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "== 1. 50,000 x 1,000 float32: numpy load A, B + add + save, against factorjit eval (CPU), $reps runs each, alternating"
echo "   machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); $(date -u +%FT%TZ)"
numpy_add "$d1" > /dev/null; fj_eval "$d1" > /dev/null   # warm the page cache and the kernel disk cache
np_times="" np_inner="" np_cpus="" np_inner_cpus="" fj_times="" fj_cpus=""
for r in $(seq "$reps"); do
  sync; l=$(load); read -r t c < <(wall_cpu numpy_add "$d1"); read -r i ic < "$tmp/stdout"
  np_times="$np_times $t"; np_cpus="$np_cpus $c"; np_inner="$np_inner $i"; np_inner_cpus="$np_inner_cpus $ic"
  echo "   numpy     run $r: ${t} s (CPU ${c} s), of which load + add + save ${i} s (CPU ${ic} s) (load $l)"
  sync; l=$(load); read -r t c < <(wall_cpu fj_eval "$d1")
  fj_times="$fj_times $t"; fj_cpus="$fj_cpus $c"
  echo "   factorjit run $r: ${t} s (CPU ${c} s) (load $l)"
done
np_med=$(echo "$np_times" | median); np_in=$(echo "$np_inner" | median); fj_med=$(echo "$fj_times" | median)
np_cpu=$(echo "$np_cpus" | median); np_in_cpu=$(echo "$np_inner_cpus" | median); fj_cpu=$(echo "$fj_cpus" | median)
echo "E2E numpy median ${np_med} s (process), ${np_in} s (load + add + save alone); factorjit eval median ${fj_med} s (process):" \
  "ratio $(echo "scale=3; $fj_med / $np_med" | bc) to numpy's process, $(echo "scale=3; $fj_med / $np_in" | bc) to its" \
  "load + add + save alone (target <= 1.5); CPU seconds, medians: numpy ${np_cpu} (process), ${np_in_cpu} (alone), factorjit ${fj_cpu}; load now $(load)"
rm -f "$d1/sum.npy"
echo "   factorjit -v, one more run: $(fj_eval "$d1" -v 2>&1 | grep -iE 'streamed|chunks' | tr '\n' ' ')"

echo "== 2. 50,000 x 4,000 float32 with --max-memory 256M: peak resident set (/usr/bin/time -v)"
sync; l=$(load)
/usr/bin/time -v -o "$tmp/time.txt" "$fj" eval --backend cpu -e 'corr(window(A,20), window(B,20))' \
  -i A="$d4/A.npy" -i B="$d4/B.npy" -o "$d4/out.npy" --max-memory 256M -v ${EVAL_ARGS:-} > "$tmp/eval.txt" 2>&1
rss_kb=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$tmp/time.txt")
el=$(awk -F': ' '/Elapsed \(wall clock\)/ { print $2 }' "$tmp/time.txt")
grep -iE 'streamed|chunks' "$tmp/eval.txt" | sed 's/^/   /'
echo "MEM --max-memory 256M, 50,000 x 4,000: wall $el, peak resident set $((rss_kb / 1024)) MB (target <= 506 MB); load $l"
