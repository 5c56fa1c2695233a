#!/usr/bin/env bash
# Where the headline kernel's warps stall, per SASS instruction (one visit to the GPU machine, after
# bench/gpu_run.sh has built build-gpu/): ncu samples corr w=20 on 10,000 x 10,000 float32 (the kernel big
# panels get), then the instructions with the most stall samples are printed with their stall reasons.
#   bench/gpu_stalls.sh [N]   (N: how many instructions to list, default 40)
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${OUT:-/tmp/fj_gpu_out}
mkdir -p "$LOG"
N=${1:-40}
export FJ_CACHE_DIR=/tmp/fj_stalls_cache
rm -f "$LOG/stalls.ncu-rep"
timeout 240 ncu --clock-control none --section WarpStateStats --section SourceCounters \
  -k regex:fj_corr --launch-skip 1 --launch-count 1 -o "$LOG/stalls" build-gpu/bench_gpu --profile > "$LOG/stalls_ncu.log" 2>&1
tail -3 "$LOG/stalls_ncu.log"
ncu -i "$LOG/stalls.ncu-rep" --page source --csv --print-source sass > "$LOG/stalls_source.csv" 2> "$LOG/stalls_source.err"
head -c 600 "$LOG/stalls_source.csv"; echo
python3 - "$LOG/stalls_source.csv" "$N" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
if not rows: sys.exit("no rows")
hdr = rows[0]
print("columns:", hdr[:40])
def col(name):
    for i, h in enumerate(hdr):
        if h.strip().lower() == name.lower(): return i
    return None
src = col("Source"); tot = None
for cand in ("Warp Stall Sampling (All Samples)", "Warp Stall Sampling (All Cycles)", "Sampling Data (All)"):
    tot = col(cand)
    if tot is not None: break
if tot is None: sys.exit("no stall column")
stall_cols = [i for i, h in enumerate(hdr) if h.startswith("stall_") or "Stall" in h]
body = [r for r in rows[1:] if len(r) > tot and r[tot].replace(',', '').replace('.', '').isdigit()]
body.sort(key=lambda r: -float(r[tot].replace(',', '')))
total = sum(float(r[tot].replace(',', '')) for r in body)
print(f"total samples {total:.0f}")
for r in body[:int(sys.argv[2])]:
    print(f"{float(r[tot].replace(',', '')):8.0f}  {r[src][:90]}")
PY
