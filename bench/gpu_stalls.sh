#!/usr/bin/env bash
# Where the headline kernel's warps stall, per SASS instruction (one visit to the GPU machine, after
# bench/gpu_run.sh has built build-gpu/): ncu samples corr w=20 on 10,000 x 10,000 float32 (the kernel big
# panels get; FJ_PROFILE_ROWS / FJ_PROFILE_COLS set another shape, FJ_PROFILE_W another window), then the stall reasons overall and per code region, and the instructions with the most
# stall samples are printed with their stall reasons.
#   bench/gpu_stalls.sh [N]   (N: how many instructions to list, default 40)
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${OUT:-/tmp/fj_gpu_out}
mkdir -p "$LOG"
N=${1:-40}
export FJ_CACHE_DIR=/tmp/fj_stalls_cache
rm -f "$LOG/stalls.ncu-rep"
# FJ_STALLS_KERNEL / FJ_STALLS_CMD profile another kernel and program (e.g. bench/proto/scan_corr.cu's).
timeout 240 ncu --clock-control none --section WarpStateStats --section SourceCounters --section SchedulerStats \
  -k "regex:${FJ_STALLS_KERNEL:-fj_corr}" --launch-skip 1 --launch-count 1 -o "$LOG/stalls" \
  ${FJ_STALLS_CMD:-build-gpu/bench_gpu --profile} > "$LOG/stalls_ncu.log" 2>&1
ncu -i "$LOG/stalls.ncu-rep" --page details --section WarpStateStats --section SchedulerStats 2>/dev/null | grep -E "Warp Cycles|Issued|Eligible|Active Warps|No Eligible|One or More" | head -12
tail -3 "$LOG/stalls_ncu.log"
ncu -i "$LOG/stalls.ncu-rep" --page source --csv --print-source sass > "$LOG/stalls_source.csv" 2> "$LOG/stalls_source.err"
python3 - "$LOG/stalls_source.csv" "$N" <<'PY'
import csv, re, sys
rows = list(csv.reader(open(sys.argv[1])))
# ncu writes a "Kernel Name" line first; the header is the first row that names the Source column.
start = next((i for i, r in enumerate(rows) if "Source" in r), None)
if start is None: sys.exit("no header row with a Source column")
hdr, rows = rows[start], rows[start:]
def col(name):
    for i, h in enumerate(hdr):
        if h.strip().lower() == name.lower(): return i
    return None
src = col("Source"); tot = None
for cand in ("Warp Stall Sampling (All Samples)", "Warp Stall Sampling (All Cycles)", "Sampling Data (All)"):
    tot = col(cand)
    if tot is not None: break
if tot is None: sys.exit("no stall column")
lsb = col("stall_long_sb")
body = [r for r in rows[1:] if len(r) > tot and r[tot].replace(',', '').replace('.', '').isdigit()]
body.sort(key=lambda r: -float(r[tot].replace(',', '')))
total = sum(float(r[tot].replace(',', '')) for r in body)
print(f"total samples {total:.0f}")
ex = col("Instructions Executed") or col("Warp Instructions Executed")
import os
T = float(os.environ.get("FJ_PROFILE_ROWS", 10000)); N = float(os.environ.get("FJ_PROFILE_COLS", 10000))
warp_rows = T * -(-N // 32)  # (row, 32-column group) pairs: what one warp of a column scan does per row
if ex is not None:
    n_inst = sum(float(r[ex].replace(',', '') or 0) for r in body)
    print(f"warp instructions executed {n_inst:.4g} = {n_inst / warp_rows:.1f} per row of 32 columns")
    # The instruction mix: executed warp instructions per row of 32 columns, by opcode (predicate and
    # modifiers dropped), so that a change's effect on each unit (FP64, LSU, ALU) can be read off.
    mix = {}
    for r in body:
        m = re.match(r"\s*(@!?U?P\w+\s+)?([A-Z0-9_]+)", r[src])
        if m: mix[m.group(2)] = mix.get(m.group(2), 0.0) + float(r[ex].replace(',', '') or 0)
    print("executed per row of 32 columns, by opcode: " +
          ", ".join(f"{k} {v / warp_rows:.1f}" for k, v in sorted(mix.items(), key=lambda kv: -kv[1]) if v / warp_rows >= 0.2))
# Where the time goes by loop: samples between consecutive branches (the regions of the pass), in code order.
seg, seg_ex, first = 0.0, 0.0, None
# Each region's own stall reasons (its three largest), so that a region slow for its instructions says why:
# shared-memory latency (short_sb), a barrier, a dependency (wait), the float64 pipe (math).
num = lambda x: float(x.replace(',', '') or 0)
reasons = [(h[len("stall_"):], i) for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
print("stall reasons overall: " + ", ".join(
    f"{name} {100 * v / total:.1f} %" for name, v in sorted(((n, sum(num(r[i]) for r in body)) for n, i in reasons),
                                                            key=lambda kv: -kv[1]) if v >= 0.005 * total))
print("samples by code region (between branches, regions with >= 0.5 % of the samples), with their top stall reasons:")
why = {}
for r in rows[1:]:
    if len(r) <= tot or not r[tot].replace(',', '').replace('.', '').isdigit(): continue
    first = first or r[0]
    seg += float(r[tot].replace(',', ''))
    seg_ex += float(r[ex].replace(',', '') or 0) if ex is not None else 0.0
    for name, i in reasons: why[name] = why.get(name, 0.0) + num(r[i])
    if 'BRA' in r[src] or 'EXIT' in r[src]:
        if seg >= 0.005 * total:
            top = ", ".join(f"{n} {100 * v / seg:.0f} %" for n, v in sorted(why.items(), key=lambda kv: -kv[1])[:3])
            print(f"  {first[-6:]}..{r[0][-6:]}  {seg:9.0f}  {100 * seg / total:5.1f} %  {seg_ex / warp_rows:6.1f} instr/row  ({top})  ends with {r[src].strip()[:40]}")
        seg, seg_ex, first, why = 0.0, 0.0, None, {}
print("samples  long-scoreboard  address  instruction")
for r in body[:int(sys.argv[2])]:
    print(f"{num(r[tot]):8.0f}  {num(r[lsb]) if lsb is not None else 0:8.0f}  {r[0][-6:]}  {r[src][:90]}")
PY
# Pipe utilisation of the same kernel: which unit bounds it.
PIPES=""
for m in fp64 alu fma fmaheavy lsu xu adu cbu uniform; do PIPES="$PIPES,sm__inst_executed_pipe_$m.avg.pct_of_peak_sustained_active"; done
PIPES="$PIPES,sm__pipe_fp64_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active"
PIPES="$PIPES,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed"
timeout 120 ncu --clock-control none --metrics "${PIPES#,}" -k "regex:${FJ_STALLS_KERNEL:-fj_corr}" --launch-skip 1 --launch-count 1 \
  ${FJ_STALLS_CMD:-build-gpu/bench_gpu --profile} > "$LOG/stalls_pipes.log" 2>&1
grep -E "__" "$LOG/stalls_pipes.log" | head -20
