#!/usr/bin/env python3
"""CPU peers of the headline case (TARGETS.md C1), measured on this machine in the same run as bench_cpu:
a 2-read-1-write numpy stream (one thread) and pandas rolling(w).corr. pandas runs on COLS_PANDAS columns
and is scaled to the full width (its cost is linear in columns); the scale factor is printed.
Usage: peers_cpu.py [rows=50000] [cols=1000] [cols_pandas=100]"""
import sys, time
import numpy as np

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
cols = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
cols_pd = min(cols, int(sys.argv[3]) if len(sys.argv) > 3 else 100)

rng = np.random.default_rng(1)
common = rng.standard_normal((rows, cols))
a = (100 * np.exp(np.cumsum(0.01 * common, axis=0))).astype(np.float32)
b = (100 * np.exp(np.cumsum(0.01 * (0.6 * common + 0.8 * rng.standard_normal((rows, cols))), axis=0))).astype(np.float32)
c = np.empty_like(a)

def median_time(f, reps):
    f()
    t = []
    for _ in range(reps):
        s = time.perf_counter(); f(); t.append(time.perf_counter() - s)
    return sorted(t)[len(t) // 2]

t = median_time(lambda: np.add(a, b, out=c), 7)
print(f"numpy add (one thread, 2 reads + 1 write)   {t*1e3:9.2f} ms")
try:
    import pandas as pd
except ImportError:
    print("pandas: not installed (python3-pandas)")
    sys.exit(0)
da, db = pd.DataFrame(a[:, :cols_pd]), pd.DataFrame(b[:, :cols_pd])
for w in (20, 250):
    s = time.perf_counter()
    r = da.rolling(w).corr(db)
    t = time.perf_counter() - s
    print(f"pandas {pd.__version__} rolling({w}).corr        {t * cols / cols_pd:9.2f} s  "
          f"({t:.2f} s on {cols_pd} columns, x{cols / cols_pd:g})")
