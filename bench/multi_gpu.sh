#!/usr/bin/env bash
# Issue 24's figures on a machine with several GPUs (device kinds nvidia-h200-x2, -x4, -x8), after
# bench/gpu_run.sh --no-tests --no-bench has built $BUILD (build-gpu) there:
#   1. corr(window(A,20), window(B,20)) on 50,000 x 50,000 float32 host panels registered in place
#      (fj::register_host: DMA without staging) and pageable, on 1, 2, 4, ... GPUs (factorjit bench --devices:
#      each line of GPU telemetry is one device);
#   2. the 101 alphas on 4,000 x 5,000 and 4,000 x 50,000 float32 (bench/alpha_data.py's market) on one GPU
#      and on all of them (factorjit alpha101 --devices all).
# Logs go to $OUT (the device tool's output folder) or /tmp/fj_gpu_out. ROWS, COLS and REPEAT override the sizes.
#   bench/multi_gpu.sh [--no-alphas]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-$PWD/build-gpu}
LOG=${OUT:-/tmp/fj_gpu_out}
mkdir -p "$LOG"
ALPHAS=1
[ "${1:-}" = "--no-alphas" ] && ALPHAS=0
FJ="$BUILD/factorjit"
[ -x "$FJ" ] || { echo "no $FJ: run bench/gpu_run.sh --no-tests --no-bench first"; exit 1; }
GPUS=$(nvidia-smi -L | wc -l)
lists="0"
n=2
while [ $n -le "$GPUS" ]; do
  lists="$lists $(seq -s, 0 $((n - 1)))"
  n=$((n * 2))
done
[ "$GPUS" -gt 1 ] && [ $((GPUS & (GPUS - 1))) -ne 0 ] && lists="$lists all"
echo "== $GPUS GPU(s); device lists: $lists; load $(cut -d' ' -f1-3 /proc/loadavg)"
EXPR='corr(window(A,20), window(B,20))'
for mode in --registered --host; do
  for d in $lists; do
    echo "== factorjit bench -e '$EXPR' --rows ${ROWS:-50000} --cols ${COLS:-50000} $mode --devices $d"
    timeout 300 "$FJ" bench -e "$EXPR" --rows "${ROWS:-50000}" --cols "${COLS:-50000}" --repeat "${REPEAT:-5}" $mode --devices "$d" \
      2>&1 | tee "$LOG/multi_gpu_${mode#--}_${d//,/_}.log" | grep -E "registered|runs on|median|GPU|rror"
  done
done
if [ $ALPHAS = 1 ]; then
  for n in 5000 50000; do
    data=/tmp/fj_alpha_4000x$n
    [ -f "$data/close.npy" ] || python3 bench/alpha_data.py 4000 $n "$data" > "$LOG/alpha_data_$n.log" 2>&1
    for d in 0 all; do
      echo "== factorjit alpha101 --data $data --backend cuda --repeat 3 --devices $d"
      timeout 300 "$FJ" alpha101 --data "$data" --backend cuda --repeat 3 --devices "$d" 2>&1 \
        | tee "$LOG/multi_gpu_alpha_${n}_$d.log" | grep -E "^compiled|^runs on|^run |rror" | cut -c1-160
    done
  done
fi
