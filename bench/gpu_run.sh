#!/usr/bin/env bash
# One visit to the GPU machine (DEVICE.md): build factorjit there (Release, no LLVM, fmt header-only from
# .carry/fmt_include), run the CUDA test suites, then bench_gpu (G1 G4 G5 J1 J2 J3 of TARGETS.md) and,
# with --peers, /work/shared/peers/rolling_corr_peers.py (copied to .carry/) at 50,000 x $PEERS_N (10,000).
# A short table comes last. Logs go to $OUT (the device tool's output folder) or /tmp/fj_gpu_out.
#
#   bench/gpu_run.sh [--quick] [--peers] [--profile] [--no-tests] [--no-bench] [--no-xcheck] [--kernel-suites] [--a1] [--h1] [--ops] [--rank] [--python]
# --ops: factorjit bench of each time-series operator at w = 20 and 250 (20,000 x 5,000 float32 device panels) and
# of rank over 50,000 x 5,000 (issue 21's Windows and Rank figures), with the GPU's telemetry.
# --rank: rank over 50,000 x 5,000 and 4,000 x 5,000 float32 (factorjit bench) and where the row kernel's warps
# stall (ncu, bench/gpu_stalls.sh).
# --python: the Python module built there, its device tests (CuPy, PyTorch) and bench/bench_python.py's overhead
# and cupy-g1 figures (issue 23).
# --h1: bench_gpu --host: issue 22's host-to-host figures (corr w=20 on 50,000 x 50,000 and 50,000 x 10,000 float32
# host panels: the PCIe and host staging floors, the talk's demo 3, G2a, G2b, G2r, G3) and J2 of run_async.
# --a1: the 101 alphas on 4,000 x 5,000 float32 (bench/alpha_data.py's market): a cold process (empty kernel
# cache), then a warm-disk-cache one, each with --repeat 3 and FJ_PROFILE's per-step times.
# --profile: SASS instruction counts of the headline kernel (cuobjdump) and an ncu run of it.
# --kernel-suites: the GPU suite twice more, on window scans and on chained window scans wherever a kernel
# can be one (about 10 more minutes: with them the visit no longer fits one 600 s device call).
#
# Prepare on the development machine (once):
#   mkdir -p .carry/fmt_include && cp -r /usr/include/fmt .carry/fmt_include/
#   cp /work/shared/peers/rolling_corr_peers.py .carry/
# and pass carry=[".carry"] to the device call.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOG=${OUT:-/tmp/fj_gpu_out}
mkdir -p "$LOG"
QUICK="" PEERS=0 TESTS=1 BENCH=1 PROFILE=0 XCHECK=1 SUITES=0 A1=0 H1=0 OPS=0 RANK=0 PY=0
for a in "$@"; do
  case "$a" in
    --quick) QUICK=--quick ;;
    --peers) PEERS=1 ;;
    --no-tests) TESTS=0 ;;
    --no-bench) BENCH=0 ;;
    --no-xcheck) XCHECK=0 ;;
    --kernel-suites) SUITES=1 ;;
    --profile) PROFILE=1 ;;
    --a1) A1=1 ;;
    --h1) H1=1 ;;
    --ops) OPS=1 ;;
    --rank) RANK=1 ;;
    --python) PY=1 ;;
    *) echo "unknown option $a"; exit 2 ;;
  esac
done
JOBS=$(nproc 2>/dev/null || echo 4)
BUILD=$ROOT/build-gpu
FMT=$ROOT/.carry/fmt_include
[ -d "$FMT/fmt" ] || { echo "missing $FMT/fmt (see the header of this script)"; exit 2; }

echo "== machine: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1); $(nproc) cores"
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_throttle_reasons.active \
  --format=csv -lms 1000 > "$LOG/smi.csv" 2>&1 &
SMI_PID=$!
trap 'kill $SMI_PID 2>/dev/null' EXIT

# ---- build: the library, the CLI and the benchmark through CMake; the CUDA tests directly, so that
# another suite's file failing to build here cannot stop this visit.
t0=$(date +%s)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFJ_WITH_LLVM=OFF -DFJ_BUILD_TESTS=OFF \
  -DFJ_FMT_INCLUDE="$FMT" > "$LOG/cmake.log" 2>&1 || { tail -30 "$LOG/cmake.log"; exit 1; }
ninja -C "$BUILD" -j"$JOBS" factorjit factorjit_cli bench_gpu > "$LOG/build.log" 2>&1 \
  || { grep -E "error|FAILED" -A3 "$LOG/build.log" | head -60; exit 1; }
DOCTEST_INC=$(dirname "$(dirname "$(find /usr/include /usr/local/include -name doctest.h -path '*doctest/doctest.h' 2>/dev/null | head -1)")")
CXXFLAGS="-std=c++20 -O2 -I$ROOT -I$ROOT/tests -isystem $FMT -DFMT_HEADER_ONLY=1 -DFJ_WITH_CUDA=1"
case "$DOCTEST_INC" in /usr/include|/usr/local/include|"") ;; *) CXXFLAGS="$CXXFLAGS -isystem $DOCTEST_INC" ;; esac
mkdir -p "$BUILD/cuda_tests/tmp"
pids=()
for f in tests/main.cpp tests/reference.cpp tests/test_cuda_compile.cpp tests/test_cuda_cache.cpp tests/test_cuda_gpu.cpp tests/test_plan.cpp tests/test_spikes.cpp tests/test_cuda_refold.cpp tests/test_cross_section.cpp tests/test_cuda_pipeline.cpp tests/test_alpha101.cpp tests/test_column_steps.cpp; do
  o="$BUILD/cuda_tests/$(basename "$f" .cpp).o"
  g++ $CXXFLAGS -DFJ_TEST_TMP="\"$BUILD/cuda_tests/tmp\"" -DFJ_CLI_PATH="\"$BUILD/factorjit\"" -c "$f" -o "$o" > "$o.log" 2>&1 &
  pids+=($!)
done
ok=1
for p in "${pids[@]}"; do wait "$p" || ok=0; done
if [ $ok = 1 ]; then
  g++ "$BUILD"/cuda_tests/*.o "$BUILD/libfactorjit.a" -ldl -lpthread -o "$BUILD/cuda_tests/fj_cuda_tests" \
    > "$BUILD/cuda_tests/link.log" 2>&1 || ok=0
fi
[ $ok = 1 ] || { cat "$BUILD"/cuda_tests/*.log | grep -E "error" -A3 | head -40; echo "CUDA tests did not build"; }
echo "== built in $(( $(date +%s) - t0 )) s"

# The GPU suite under the given FJ_* settings (label, log name, VAR=value...), appended to TEST_SUMMARY.
gpu_suite() {
  local label=$1 log=$2 t0 rc summary
  shift 2
  t0=$(date +%s)
  env "$@" "$BUILD/cuda_tests/fj_cuda_tests" --no-intro -ts=cuda_gpu > "$LOG/$log.log" 2>&1
  rc=$?
  grep -E "ERROR|FAILED" -A6 "$LOG/$log.log" | head -40
  summary="rc=$rc; $(grep -E '^\[doctest\] (test cases|assertions)' "$LOG/$log.log" | tr '\n' ' ') ($(( $(date +%s) - t0 )) s)"
  echo "== GPU tests, $label: $summary"
  TEST_SUMMARY="$TEST_SUMMARY; $label: $summary"
}

export FJ_CACHE_DIR=$BUILD/kernel_cache
rm -rf "$FJ_CACHE_DIR"
TEST_SUMMARY="not run"
if [ $TESTS = 1 ] && [ -x "$BUILD/cuda_tests/fj_cuda_tests" ]; then
  t0=$(date +%s)
  "$BUILD/cuda_tests/fj_cuda_tests" --no-intro > "$LOG/tests.log" 2>&1
  rc=$?
  grep -E "ERROR|FAILED|MESSAGE|skipped" -A6 "$LOG/tests.log" | head -60
  TEST_SUMMARY="rc=$rc; $(grep -E '^\[doctest\] (test cases|assertions)' "$LOG/tests.log" | tr '\n' ' ') ($(( $(date +%s) - t0 )) s)"
  echo "== tests: $TEST_SUMMARY"
  if [ $SUITES = 1 ]; then
    # The GPU suite again with every kernel specialised on its leading dimensions and a (plain) window scan
    # wherever one can be (the defaults give window scans only to big panels with long windows), then with
    # chained window scans wherever the sums split. Cold compiles: about 5 minutes each on the H200.
    gpu_suite "window scans wherever possible" tests_scan FJ_CUDA_FIXED_LD=1 FJ_CUDA_WINDOW_SCAN=1 FJ_CUDA_SCAN_CHAIN=0
    gpu_suite "chained window scans wherever possible" tests_chain FJ_CUDA_FIXED_LD=1 FJ_CUDA_WINDOW_SCAN=1 FJ_CUDA_SCAN_CHAIN=1
  fi
fi

# CUDA against the CPU backend's results made on the development machine (tests/cross_backend), with the
# kernels small panels get and with those specialised on leading dimensions (big panels).
XCHECK_SUMMARY="not run (no .carry/xcheck/cpu)"
if [ $XCHECK = 1 ] && [ -d .carry/xcheck/cpu ] && [ -x "$BUILD/factorjit" ]; then
  XCHECK_SUMMARY=""
  for fixed in ${FJ_XCHECK_KINDS:-0 1 scan chain}; do
    rm -rf "$BUILD/xcheck_$fixed"
    scan=0; { [ $fixed = scan ] || [ $fixed = chain ]; } && scan=1
    chain=-1; [ $fixed = scan ] && chain=0; [ $fixed = chain ] && chain=1  # (-1: the library's default)
    FJ_CUDA_FIXED_LD=$([ $fixed = 0 ] && echo 0 || echo 1) FJ_CUDA_WINDOW_SCAN=$scan FJ_CUDA_SCAN_CHAIN=$chain python3 tests/cross_backend/cross_check.py run .carry/xcheck "$BUILD/xcheck_$fixed" cuda \
      "$BUILD/factorjit" > "$LOG/xcheck_$fixed.log" 2>&1
    python3 tests/cross_backend/cross_check.py compare "$BUILD/xcheck_$fixed" .carry/xcheck/cpu >> "$LOG/xcheck_$fixed.log" 2>&1
    grep -E "^BAD" "$LOG/xcheck_$fixed.log" | head -10
    label="fixed ld $fixed"; [ $fixed = scan ] && label="fixed ld 1, window scans wherever possible"
    [ $fixed = chain ] && label="fixed ld 1, chained window scans wherever possible"
    XCHECK_SUMMARY="$XCHECK_SUMMARY [$label: $(tail -1 "$LOG/xcheck_$fixed.log")]"
  done
  echo "== cross-check against the CPU backend:$XCHECK_SUMMARY"
fi

if [ $BENCH = 1 ]; then
  "$BUILD/bench_gpu" $QUICK 2>&1 | tee "$LOG/bench.log"
fi

if [ $OPS = 1 ]; then
  echo "== time-series operators, w = 20 and 250: factorjit bench --rows 20000 --cols 5000 (median ms)"
  for op in "skew(window(A,W))" "kurt(window(A,W))" "slope(window(A,W))" "rsquare(window(A,W))" "resid(window(A,W))" \
            "median(window(A,W))" "quantile(window(A,W), 0.25)" "ema(A, W)" "ts_rank(window(A,W))" "argmax(window(A,W))" \
            "decay_linear(window(A,W))" "product(window(A,W))" "std(window(A,W))"; do
    t20=$(timeout 60 "$BUILD/factorjit" bench -e "${op//W/20}" --rows 20000 --cols 5000 --repeat 5 2>&1 | awk '/^median/ {print $2}')
    t250=$(timeout 60 "$BUILD/factorjit" bench -e "${op//W/250}" --rows 20000 --cols 5000 --repeat 5 2>&1 | awk '/^median/ {print $2}')
    awk -v o="$op" -v a="$t20" -v b="$t250" 'BEGIN { printf "  %-30s w=20 %8s ms  w=250 %8s ms  ratio %.2f\n", o, a, b, (a > 0 ? b / a : 0) }'
  done
  echo "== rank over 50,000 x 5,000 float32 (copy floor about 0.48 ms: 1 GB read and 1 GB written at 4.2 TB/s)"
  timeout 60 "$BUILD/factorjit" bench -e "rank(A)" --rows 50000 --cols 5000 --repeat 5 2>&1 | grep -E "^median|^GPU"
fi

if [ $RANK = 1 ]; then
  for shape in "50000 5000" "4000 5000"; do
    set -- $shape
    echo "== rank over $1 x $2 float32 (factorjit bench, device panels)"
    timeout 60 "$BUILD/factorjit" bench -e "rank(A)" --rows $1 --cols $2 --repeat 7 2>&1 | grep -E "^median|^GPU|floor"
  done
  FJ_STALLS_KERNEL=fj_rows FJ_STALLS_CMD="$BUILD/factorjit bench -e rank(A) --rows 20000 --cols 5000 --repeat 2" \
    timeout 200 bench/gpu_stalls.sh 25 2>&1 | tail -45
fi

if [ $PY = 1 ]; then
  echo "== Python module (issue 23): build, device tests, overhead, cupy-g1"
  cmake -S . -B "$ROOT/build-py" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFJ_WITH_LLVM=OFF -DFJ_BUILD_TESTS=OFF \
    -DFJ_FMT_INCLUDE="$FMT" > "$LOG/py_cmake.log" 2>&1 && cmake --build "$ROOT/build-py" -j"$JOBS" --target fj_python > "$LOG/py_build.log" 2>&1 \
    || { tail -30 "$LOG/py_cmake.log" "$LOG/py_build.log"; }
  PYTHONPATH=$ROOT/build-py/python timeout 300 python3 -m pytest -q -rs python/tests/test_device.py 2>&1 | tail -15
  for d in cpu cupy torch; do
    PYTHONPATH=$ROOT/build-py/python timeout 120 python3 bench/bench_python.py overhead --device $d 2>&1 | tail -2
  done
  PYTHONPATH=$ROOT/build-py/python timeout 120 python3 bench/bench_python.py cupy-g1 2>&1 | tail -3
fi

if [ $H1 = 1 ]; then
  # 50,000 x 50,000 and the talk's 50,000 x 10,000, or the one size H1_T x H1_N; the whole log in $LOG/h1.log.
  echo "== H1 floors, demo 3, G2a, G2b, G2r, G3a, G3b, J2: bench_gpu --host ${H1_T:-} ${H1_N:-}"
  timeout 400 "$BUILD/bench_gpu" --host ${H1_T:-} ${H1_N:-} 2>&1 | tee "$LOG/h1.log" \
    | grep -E "^(==|H1|G2a|G2b|G2r|G3a|G3b|J2|bench_gpu)"
fi

if [ $A1 = 1 ]; then
  A1_DATA=$BUILD/a1_data
  [ -f "$A1_DATA/close.npy" ] || python3 bench/alpha_data.py ${A1_T:-4000} ${A1_N:-5000} "$A1_DATA" > "$LOG/a1_data.log" 2>&1
  rm -rf "$FJ_CACHE_DIR"
  for state in cold warm-disk; do
    echo "== A1 ($state kernel cache): factorjit alpha101 --data $A1_DATA --backend cuda --repeat 3"
    FJ_PROFILE=1 timeout 400 "$BUILD/factorjit" alpha101 --data "$A1_DATA" --backend cuda --repeat 3 > "$LOG/a1_$state.log" 2>&1
    echo "rc=$?"
    grep -v "^  " "$LOG/a1_$state.log" | tail -12
    grep -A12 "factorjit profile" "$LOG/a1_$state.log" | tail -13
  done
  echo "== A1 on device panels: bench_gpu --a1 (then with FJ_PROFILE=1)"
  timeout 200 "$BUILD/bench_gpu" --a1 ${A1_T:-4000} ${A1_N:-5000} 2>&1 | tee "$LOG/a1_device.log" | grep -E "^A1|rror"
  FJ_PROFILE=1 timeout 200 "$BUILD/bench_gpu" --a1 ${A1_T:-4000} ${A1_N:-5000} > "$LOG/a1_device_profile.log" 2>&1
  grep -A20 "factorjit profile: ${A1_T:-4000}" "$LOG/a1_device_profile.log" | tail -21
fi

if [ $PROFILE = 1 ]; then
  echo "== SASS of corr w=20 (float32, unroll 1 and the default): instruction counts"
  for u in 1 0; do
    cub="$BUILD/corr_u$u.cubin"
    if [ $u = 0 ]; then unset FJ_CUDA_UNROLL; else export FJ_CUDA_UNROLL=$u; fi
    "$BUILD/factorjit" compile -e "corr(window(A,20), window(B,20))" --ld 10000 --cubin "$cub" | head -1
    cuobjdump -sass "$cub" > "$cub.sass" 2>&1 || true
    cp "$cub.sass" "$LOG/" 2>/dev/null
    awk '/\/\*[0-9a-f]+\*\// { for (i = 1; i <= NF; i++) if ($i !~ /^\/\*/ && $i !~ /^@/) { split($i, o, "."); c[o[1]]++; break } }
      END { for (k in c) printf "%s %d\n", k, c[k] }' "$cub.sass" | sort -k2 -nr | tr '\n' ' '
    echo
  done
  unset FJ_CUDA_UNROLL
  echo "== ncu (corr w=20, 10,000 x 10,000 f32, one launch)"
  timeout 180 ncu --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section SourceCounters \
    --metrics smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__pcsamp_warps_issue_stalled_drain,smsp__pcsamp_warps_issue_stalled_no_instructions,smsp__pcsamp_warps_issue_stalled_branch_resolving,smsp__pcsamp_warps_issue_stalled_tex_throttle,smsp__pcsamp_warps_issue_stalled_membar,smsp__pcsamp_warps_issue_stalled_imc_miss \
    --section LaunchStats -k regex:fj_corr --launch-skip 1 --launch-count 1 "$BUILD/bench_gpu" --profile > "$LOG/ncu.log" 2>&1
  grep -E "Duration|Throughput|Pipe|Occupancy|Registers|Block Size|Grid Size|Warp Cycles|Issued|Executed Ipc|FP64|fp64|Waves|Stall|Eligible|Active Warps|No Eligible|One or More|pcsamp" "$LOG/ncu.log" | head -80
  echo "== ncu pipe utilisation (same kernel): which unit bounds the loop"
  PIPES=""
  for m in fp64 alu fma fmaheavy fmalite lsu xu adu cbu uniform; do
    PIPES="$PIPES,sm__inst_executed_pipe_$m.avg.pct_of_peak_sustained_active"
  done
  PIPES="$PIPES,sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active"
  PIPES="$PIPES,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active"
  PIPES="$PIPES,smsp__issue_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,l1tex__throughput.avg.pct_of_peak_sustained_active"
  PIPES="$PIPES,lts__t_sector_hit_rate.pct,dram__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__t_sector_hit_rate.pct"
  timeout 120 ncu --clock-control none --metrics "${PIPES#,}" -k regex:fj_corr --launch-skip 1 --launch-count 1 \
    "$BUILD/bench_gpu" --profile > "$LOG/ncu_pipes.log" 2>&1
  grep -E "__|pct" "$LOG/ncu_pipes.log" | head -40
fi

if [ $PEERS = 1 ] && [ -f .carry/rolling_corr_peers.py ]; then
  # PEERS_N=50000 puts the peers at G1's size (pandas then on PANDAS_COLS columns, scaled).
  PN=${PEERS_N:-10000}
  echo "== peers (50,000 x $PN, w=20)"
  PYTHONUNBUFFERED=1 T=50000 N=$PN W=20 REPS=${PEERS_REPS:-5} PANDAS_COLS=${PANDAS_COLS:-40} timeout 420 \
    python3 .carry/rolling_corr_peers.py > "$LOG/peers.log" 2>&1
  grep -E "^  |TABLE| \| " "$LOG/peers.log" | tail -20
fi

kill $SMI_PID 2>/dev/null
echo
echo "== nvidia-smi during the run (min/max SM clock, max temperature, max power):"
awk -F', ' 'NR>1 && $2+0>0 {c=$2+0; if(min==""||c<min)min=c; if(c>max)max=c; t=$4+0; if(t>tm)tm=t; p=$5+0; if(p>pm)pm=p; r[$6]++}
  END {printf "  SM clock %s..%s MHz, temp max %s C, power max %s W; throttle reasons seen:", min, max, tm, pm; for (k in r) printf " [%s]x%d", k, r[k]; print ""}' "$LOG/smi.csv"
echo "== tests: $TEST_SUMMARY"
echo "== cross-check:$XCHECK_SUMMARY"
if [ -f "$LOG/bench.log" ]; then sed -n '/^SUMMARY/,$p' "$LOG/bench.log"; fi
