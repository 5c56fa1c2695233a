#!/usr/bin/env python3
"""CUDA against the CPU backend on the same inputs, through the factorjit CLI.

The GPU machine has no LLVM, so the two backends cannot run in one process there. This script makes the
inputs here (price-like walks and N(0,1), with NaNs, suspensions and constant stretches, float32 and
float64), lists the expressions, runs `factorjit eval` on one backend into a folder, and compares two such
folders with the accuracy contract of docs/operators.md (float64 1e-9, float32 1e-5 per element, relative to
max(1, |cpu|); identical NaN placement).

  cross_check.py make DIR                 inputs and expressions.txt into DIR
  cross_check.py run DIR OUTDIR BACKEND [FACTORJIT]   evaluate every expression (one eval per dtype)
  cross_check.py compare DIR_A DIR_B      exit 1 on any disagreement
"""
import os, subprocess, sys
import numpy as np

EXPRS = [
    "A + B * C - A / B", "-A", "abs(C)", "sign(C)", "sqrt(A)", "exp(C)", "log(A)", "pow(A, 0.5)",
    "signedpower(C, 2)", "min(A, B)", "max(A, B)", "A < B", "A <= B", "A > B", "A >= B", "A == B", "A != B",
    "(A > B) && (C > 0)", "(A > B) || (C > 0)", "!(C > 0)", "C > 0 ? A : B",
    "delay(A, 3)", "delta(A, 5)",
    "sum(window(A, 20))", "mean(window(C, 20, 5))", "count(window(A, 20))", "var(window(A, 20))",
    "std(window(C, 61, 30))", "min(window(A, 20))", "max(window(C, 37, 20))",
    "corr(window(A, 20), window(B, 20))", "cov(window(A, 20), window(B, 20))",
    "corr(window(A, 250, 150), window(B, 250, 150))",
    "mean(window(std(window(A, 5)), 10))", "delay(mean(window(A, 7)), 4)",
    "sum(window(B / (A - delay(A, 1)), 5))", "correlation(A * B - C, delay(B, 2), 15)",
    "A >= delay(A, 1)", "A == delay(A, 1)", "A <= delay(A, 1)",
]
ROWS, COLS = 1200, 64  # small enough to carry the CPU results to the GPU machine


def panel(rng, kind):
    if kind == "price":
        x = 100 * np.exp(np.cumsum(0.01 * rng.standard_normal((ROWS, COLS)), axis=0))
    else:
        x = rng.standard_normal((ROWS, COLS))
    x[rng.random((ROWS, COLS)) < 0.03] = np.nan                      # isolated NaNs
    for j in rng.choice(COLS, COLS // 3, replace=False):             # suspensions
        s = rng.integers(0, ROWS); x[s:s + rng.integers(5, 60), j] = np.nan
    for j in rng.choice(COLS, COLS // 2, replace=False):             # constant stretches
        s = rng.integers(0, ROWS); x[s:s + rng.integers(5, 80), j] = x[s, j]
    return x


def make(d):
    os.makedirs(d, exist_ok=True)
    rng = np.random.default_rng(7)
    data = {"A": panel(rng, "price"), "B": panel(rng, "price"), "C": panel(rng, "normal")}
    for name, x in data.items():
        for dt in ("f32", "f64"):
            np.save(os.path.join(d, f"{name}_{dt}.npy"), x.astype(np.float32 if dt == "f32" else np.float64))
    with open(os.path.join(d, "expressions.txt"), "w") as f:
        f.write("\n".join(EXPRS) + "\n")


def run(d, out, backend, exe):
    os.makedirs(out, exist_ok=True)
    exprs = open(os.path.join(d, "expressions.txt")).read().split("\n")[:-1]
    for dt in ("f32", "f64"):
        args = [exe, "eval", "--backend", backend]
        for n in "ABC":
            args += ["-i", f"{n}={os.path.join(d, f'{n}_{dt}.npy')}"]
        for k, e in enumerate(exprs):
            args += ["-e", e, "-o", os.path.join(out, f"out{k}_{dt}.npy")]
        subprocess.run(args, check=True)


def compare(a, b):
    exprs = EXPRS
    bad = 0
    for k, e in enumerate(exprs):
        for dt, tol in (("f32", 1e-5), ("f64", 1e-9)):
            x = np.load(os.path.join(a, f"out{k}_{dt}.npy")).astype(np.float64)
            y = np.load(os.path.join(b, f"out{k}_{dt}.npy")).astype(np.float64)
            nan_x, nan_y = np.isnan(x), np.isnan(y)
            m = ~nan_x & ~nan_y & np.isfinite(x) & np.isfinite(y)
            err = np.abs(x[m] - y[m]) / np.maximum(1, np.abs(y[m]))
            worst = err.max() if err.size else 0.0
            inf_ok = np.array_equal(np.isinf(x) & ~nan_x, np.isinf(y) & ~nan_y)
            ok = np.array_equal(nan_x, nan_y) and inf_ok and worst <= tol
            bad += not ok
            print(f"{'ok ' if ok else 'BAD'} {dt} {e:45s} max rel err {worst:.2e}  NaN cells {nan_x.sum()}/{nan_y.sum()}")
    print(f"{len(exprs) * 2 - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "make": make(sys.argv[2])
    elif cmd == "run": run(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) > 5 else "factorjit")
    elif cmd == "compare": sys.exit(compare(sys.argv[2], sys.argv[3]))
    else: print(__doc__); sys.exit(2)
