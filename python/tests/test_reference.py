"""The reference cases through the Python API on the CPU backend: every operator family against the plain
NumPy float64 reference (reference.py) in both dtypes, built from formula text and from Python expressions,
and bit for bit against the C++ library's own results through the `factorjit` command."""

import os
import subprocess

import numpy as np
import pytest

import factorjit as fj
import reference as R
from conftest import assert_contract, panels

# (name, formula, reference over the float64 panels)
CASES = [
    ("arith", "A + B * 2 - C / B", lambda p: p["A"] + p["B"] * 2 - p["C"] / p["B"]),
    ("unary", "abs(C) + sign(C) + sqrt(B) + log(B) + exp(C) - (-A)",
     lambda p: np.abs(p["C"]) + np.sign(p["C"]) + np.sqrt(p["B"]) + np.log(p["B"]) + np.exp(p["C"]) + p["A"]),
    ("pow", "pow(B, C) + signedpower(C, 2)", lambda p: p["B"] ** p["C"] + np.sign(p["C"]) * np.abs(p["C"]) ** 2),
    ("fminmax", "fmin(A, 100) + fmax(B, C)", lambda p: np.minimum(p["A"], 100) + np.maximum(p["B"], p["C"])),
    ("gt", "A > 100", lambda p: R.compare(p["A"], 100, np.greater)),
    ("ne", "B != C", lambda p: np.where(np.isnan(p["B"]) | np.isnan(p["C"]), 1.0, (p["B"] != p["C"]) * 1.0)),
    ("logic", "(C > 0) && (B > 1) || !(A < 100)",
     lambda p: R.logical(R.logical(R.compare(p["C"], 0, np.greater), R.compare(p["B"], 1, np.greater), np.logical_and),
                         1.0 - R.compare(p["A"], 100, np.less), np.logical_or)),
    ("and_nan", "C && (B - 1)", lambda p: R.logical(p["C"], p["B"] - 1, np.logical_and)),  # NaN operands: NaN
    ("where", "where(C > 0, A, B)", lambda p: R.where(R.compare(p["C"], 0, np.greater), p["A"], p["B"])),
    ("delay", "delay(A, 3)", lambda p: R.delay(p["A"], 3)),
    ("delta", "delta(A, 2)", lambda p: p["A"] - R.delay(p["A"], 2)),
    ("sum", "ts_sum(C, 5)", lambda p: R.ts_sum(p["C"], 5)),
    ("mean_mp", "mean(window(A, 10, 3))", lambda p: R.ts_mean(p["A"], 10, 3)),
    ("count", "count(window(A, 7))", lambda p: R.ts_count(p["A"], 7)),
    ("var", "var(window(B, 6))", lambda p: R.ts_var(p["B"], 6)),
    ("std_mp", "std(window(A, 20, 5))", lambda p: R.ts_std(p["A"], 20, 5)),
    ("min", "ts_min(A, 4)", lambda p: R.ts_min(p["A"], 4)),
    ("max", "ts_max(C, 9)", lambda p: R.ts_max(p["C"], 9)),
    ("argmin", "ts_argmin(A, 6)", lambda p: R.ts_argmin(p["A"], 6)),
    ("argmax", "ts_argmax(C, 6)", lambda p: R.ts_argmax(p["C"], 6)),
    ("ts_rank", "ts_rank(C, 8)", lambda p: R.ts_rank(p["C"], 8)),
    ("product", "product(B, 5)", lambda p: R.ts_product(p["B"], 5)),
    ("decay", "decay_linear(A, 7)", lambda p: R.decay_linear(p["A"], 7)),
    ("corr", "correlation(A, B, 10)", lambda p: R.ts_corr(p["A"], p["B"], 10)),
    ("cov", "covariance(A, C, 10)", lambda p: R.ts_cov(p["A"], p["C"], 10)),
    ("nested", "mean(window(std(window(A, 5)), 10))", lambda p: R.ts_mean(R.ts_std(p["A"], 5), 10)),
    ("median", "median(A, 7)", lambda p: R.ts_quantile(p["A"], 7, 0.5)),
    ("quantile", "quantile(C, 9, 0.3)", lambda p: R.ts_quantile(p["C"], 9, 0.3)),
    ("ema", "ema(A, 10)", lambda p: R.ema(p["A"], 10)),
    ("rank", "rank(A)", lambda p: R.rank(p["A"])),
    ("zscore", "zscore(C)", lambda p: R.zscore(p["C"])),
    ("demean", "demean(B)", lambda p: R.demean(p["B"])),
    ("scale", "scale(C)", lambda p: R.scale(p["C"])),
    ("gneutral", "group_neutralize(A, G)", lambda p: R.demean(p["A"], p["G"])),
    ("grank", "group_rank(C, G)", lambda p: R.rank(p["C"], p["G"])),
    ("gzscore", "group_zscore(B, G)", lambda p: R.zscore(p["B"], p["G"])),
    ("rank_then_mean", "ts_mean(rank(A), 5)", lambda p: R.ts_mean(R.rank(p["A"]), 5)),
]


@pytest.fixture(scope="module")
def program():
    return fj.compile({name: text for name, text, _ in CASES}, backend="cpu")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_formulas_against_reference(program, dtype):
    data = {k: v.astype(dtype) for k, v in panels().items()}
    out = program.run(**data)
    assert set(out) == {name for name, _, _ in CASES}
    ref_in = {k: v.astype(np.float64) for k, v in data.items()}  # float32: the rounded inputs, in float64
    for name, _, ref in CASES:
        assert out[name].dtype == dtype
        assert_contract(out[name], ref(ref_in), dtype, name)


def test_python_expressions_are_the_formulas():
    A, B, C = fj.input("A"), fj.input("B"), fj.input("C")
    built = {
        "arith": A + B * 2 - C / B,
        "corr": fj.corr(fj.window(A, 10), fj.window(B, 10)),
        "std_mp": fj.std(fj.window(A, 20, 5)),
        "nested": fj.mean(fj.window(fj.std(fj.window(A, 5)), 10)),
        "logic": (C > 0) & (B > 1) | ~(A < 100),
        "where": fj.where(C > 0, A, B),
        "rank_then_mean": fj.mean(fj.window(fj.rank(A), 5)),
        "fminmax": fj.min(A, 100) + fj.max(B, C),
        "min": fj.min(fj.window(A, 4)),
        "unary": abs(C) + fj.sign(C) + fj.sqrt(B) + fj.log(B) + fj.exp(C) - (-A),
        "pow": B ** C + fj.signedpower(C, 2),
        "delta": fj.delta(A, 2),
        "median": fj.median(fj.window(A, 7)),
        "quantile": fj.quantile(fj.window(C, 9), 0.3),
        "ema": fj.ema(A, 10),
    }
    formulas = {name: text for name, text, _ in CASES}
    for name, e in built.items():
        assert e.same(fj.parse(formulas[name])), f"{name}: {e} is not {formulas[name]}"
    # Numbers on either side are constants; NumPy scalars too.
    assert (2 * A).same(fj.parse("2 * A")) and (A - 1).same(fj.parse("A - 1"))
    assert (np.float64(3) * A).same(fj.parse("3 * A")) and (1 / A).same(fj.parse("1 / A"))
    assert (2 ** A).same(fj.parse("pow(2, A)"))
    for name in ("skew", "kurt", "slope", "rsquare", "resid"):
        assert getattr(fj, name)(fj.window(A, 12)).same(fj.parse(f"{name}(A, 12)")), name


def test_equals_the_cxx_command_bit_for_bit(program, cli_path, tmp_path):
    """The Python module runs the library itself: same results as `factorjit eval`, bit for bit."""
    data = {k: v.astype(np.float32) for k, v in panels(rows=200, cols=9).items()}
    for k, v in data.items():
        np.save(tmp_path / f"{k}.npy", v)
    picked = [c for c in CASES if c[0] in ("corr", "nested", "rank_then_mean", "gzscore", "decay", "logic")]
    args = [cli_path, "eval", "--backend", "cpu"]
    for k in data:
        args += ["-i", f"{k}={tmp_path / (k + '.npy')}"]
    for name, text, _ in picked:
        args += ["-e", text, "-o", str(tmp_path / f"out_{name}.npy")]
    r = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "FJ_QUIET": "1"})
    assert r.returncode == 0, f"factorjit eval failed ({r.returncode}): {r.stderr}"
    out = program.run(**data)
    for name, _, _ in picked:
        cxx = np.load(tmp_path / f"out_{name}.npy")
        assert cxx.dtype == out[name].dtype
        assert np.array_equal(cxx.view(np.uint32), out[name].view(np.uint32)), name


def test_threads_do_not_change_results():
    data = panels(rows=400, cols=37)
    p1 = fj.compile({"c": "correlation(A, B, 12)", "r": "rank(A)"}, backend="cpu", threads=1)
    p2 = fj.compile({"c": "correlation(A, B, 12)", "r": "rank(A)"}, backend="cpu", threads=2)
    o1, o2 = p1.run(**data), p2.run(**data)
    for k in o1:
        assert np.array_equal(o1[k], o2[k], equal_nan=True)
