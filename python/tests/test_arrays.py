"""Array kinds and layouts: pandas round trips, NumPy layouts used in place or copied once, 1-D panels,
compile's dtype conversion, pickling, and the GIL released while a program runs."""

import pickle
import threading
import time

import numpy as np
import pandas as pd
import pytest

import factorjit as fj
from conftest import panels

FORMULAS = {"c": "correlation(A, B, 10)", "z": "zscore(A)", "m": "ts_mean(A, 5) - B"}


@pytest.fixture(scope="module")
def program():
    return fj.compile(FORMULAS, backend="cpu")


def frames(dtype=np.float64):
    p = panels(rows=120, cols=11)
    index = pd.date_range("2020-01-01", periods=120, freq="B", name="date")
    columns = pd.Index([f"S{j:03d}" for j in range(11)], name="ticker")
    return {k: pd.DataFrame(v.astype(dtype), index=index, columns=columns) for k, v in p.items()}


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_dataframes_round_trip(program, dtype):
    dfs = frames(dtype)
    out = program.run(A=dfs["A"], B=dfs["B"])
    ref = program.run(A=dfs["A"].to_numpy().copy(), B=dfs["B"].to_numpy().copy())
    assert set(out) == set(FORMULAS)
    for k, df in out.items():
        assert isinstance(df, pd.DataFrame)
        assert df.index.equals(dfs["A"].index) and df.columns.equals(dfs["A"].columns)
        assert df.index.name == "date" and df.columns.name == "ticker"
        assert (df.dtypes == dtype).all()
        assert np.array_equal(df.to_numpy(), ref[k], equal_nan=True), k


def test_series_and_mixed_pandas_numpy(program):
    dfs = frames()
    s_out = program.run(A=dfs["A"]["S003"], B=dfs["B"]["S003"])
    assert isinstance(s_out["c"], pd.Series) and s_out["c"].index.equals(dfs["A"].index)
    full = program.run(A=dfs["A"], B=dfs["B"])
    assert np.array_equal(s_out["m"].to_numpy(), full["m"]["S003"].to_numpy(), equal_nan=True)
    mixed = program.run(A=dfs["A"], B=dfs["B"].to_numpy())  # a DataFrame among the inputs: DataFrames out
    assert isinstance(mixed["c"], pd.DataFrame) and mixed["c"].columns.equals(dfs["A"].columns)
    assert np.array_equal(mixed["c"].to_numpy(), full["c"].to_numpy(), equal_nan=True)


def test_misaligned_frames_are_refused(program):
    dfs = frames()
    with pytest.raises(fj.InputError, match="index"):
        program.run(A=dfs["A"], B=dfs["B"].iloc[::-1])
    with pytest.raises(fj.InputError, match="columns"):
        program.run(A=dfs["A"], B=dfs["B"][dfs["B"].columns[::-1]])
    with pytest.raises(fj.InputError, match="input 'A': its index"):  # a Series before the DataFrame
        program.run(A=dfs["A"]["S001"].iloc[::-1], B=dfs["B"]["S001"].to_frame())
    mixed = dfs["A"].copy()
    mixed["S000"] = mixed["S000"].astype(np.float32)
    with pytest.raises(TypeError, match="mix dtypes"):
        program.run(A=mixed, B=dfs["B"])


def test_layouts_give_the_same_results(program):
    """C order and column slices are read in place (ld > cols); Fortran order, column steps, reversed rows
    and a foreign byte order are copied once: every layout gives the C-order result."""
    base = panels(rows=90, cols=24)
    A, B = base["A"], base["B"]
    ref = program.run(A=A[:, 4:17].copy(), B=B[:, 4:17].copy())
    wide_A = np.ascontiguousarray(A)
    variants = {
        "column slice (ld 24)": (wide_A[:, 4:17], B[:, 4:17]),
        "fortran": (np.asfortranarray(A[:, 4:17]), np.asfortranarray(B[:, 4:17])),
        "column step": (np.repeat(A[:, 4:17], 2, axis=1)[:, ::2], B[:, 4:17]),
        "big-endian": (A[:, 4:17].astype(">f8"), B[:, 4:17]),
        "read-only": (np.lib.stride_tricks.as_strided(A[:, 4:17], writeable=False), B[:, 4:17]),
    }
    rev = A[::-1, 4:17][::-1]
    variants["reversed twice (negative strides)"] = (rev, B[:, 4:17])
    for what, (a, b) in variants.items():
        out = program.run(A=a, B=b)
        for k in ref:
            assert np.array_equal(out[k], ref[k], equal_nan=True), f"{what}: {k}"
            assert out[k].flags.c_contiguous and out[k].shape == (90, 13)
    assert A[:, 4:17].base is not None  # the slice really is a view with ld 24


def test_one_dimensional_panels_are_one_column():
    p = fj.compile({"m": "ts_mean(x, 3)"}, backend="cpu")
    x = np.arange(10, dtype=np.float64)
    out = p.run(x=x)["m"]
    assert out.shape == (10,)
    assert np.array_equal(out[2:], (x[:-2] + x[1:-1] + x[2:]) / 3) and np.isnan(out[:2]).all()
    strided = np.arange(20, dtype=np.float64)[::2]  # a 1-D view with a step: one column, ld 2
    assert np.array_equal(p.run(x=strided)["m"], p.run(x=strided.copy())["m"], equal_nan=True)


def test_compile_dtype_converts_inputs():
    data = panels(rows=60, cols=5)
    p32 = fj.compile({"c": "correlation(A, B, 10)"}, backend="cpu", dtype="float32")
    out = p32.run(A=data["A"], B=data["B"].astype(np.float32))  # float64 and float32 in: both become float32
    assert out["c"].dtype == np.float32
    plain = fj.compile({"c": "correlation(A, B, 10)"}, backend="cpu")
    ref = plain.run(A=data["A"].astype(np.float32), B=data["B"].astype(np.float32))["c"]
    assert np.array_equal(out["c"], ref, equal_nan=True)
    assert p32.dtype == np.float32 and plain.dtype is None


def test_inputs_given_as_a_mapping_and_unread_inputs_ignored():
    p = fj.compile({"s": "x + 1"}, backend="cpu")
    x = np.ones((3, 2))
    assert np.array_equal(p.run({"x": x}, unused=np.zeros((5, 5), np.int64))["s"], x + 1)
    assert p.inputs == ["x"] and p.outputs == ["s"]


def test_program_properties_and_explain(program):
    assert program.inputs == ["A", "B"]
    assert program.outputs == ["c", "z", "m"]
    assert program.backend == "cpu"
    assert program.halo == 9
    assert fj.compile({"n": "ts_mean(stddev(A, 5), 10) + delay(ts_sum(A, 3), 2)"}, backend="cpu").halo == 13
    text = program.explain()
    assert "step" in text.lower() and "zscore" in text


def test_pickle_round_trip_compiles_the_same_program(program):
    data = panels(rows=50, cols=4)
    again = pickle.loads(pickle.dumps(program))
    assert again.outputs == program.outputs and again.halo == program.halo
    a, b = program.run(A=data["A"], B=data["B"]), again.run(A=data["A"], B=data["B"])
    for k in a:
        assert np.array_equal(a[k], b[k], equal_nan=True)
    built = fj.compile({"e": fj.corr(fj.window(fj.input("A"), 7), fj.window(fj.input("B"), 7))}, backend="cpu")
    assert pickle.loads(pickle.dumps(built)).halo == 6


def test_the_gil_is_released_while_a_program_runs():
    """A Python thread keeps running while the main thread is inside Program::run: with the GIL held it
    would not count at all during the run."""
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((4000, 1000)), rng.standard_normal((4000, 1000))
    p = fj.compile({"c": "correlation(A, B, 20)", "s": "stddev(A, 60)"}, backend="cpu", threads=1)
    p.run(A=A[:100], B=B[:100])  # compile the kernels first
    count, stop = [0], [False]

    def spin():
        while not stop[0]:
            count[0] += 1

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.05)
    before = count[0]
    t0 = time.perf_counter()
    p.run(A=A, B=B)
    elapsed = time.perf_counter() - t0
    during = count[0] - before
    stop[0] = True
    t.join()
    # The counter gains about 10^7 a second when free; a held GIL allows a few switches at most.
    assert during > 20000 * elapsed / 0.1, f"{during} increments in {elapsed:.3f} s"


class _FakeDeviceArray:
    """An object with only __cuda_array_interface__ (as Numba's device arrays have), describing NumPy memory:
    enough to check how device panels are described without a GPU."""

    def __init__(self, a, c_order_strides_none=True):
        self._a = a
        self.ndim = a.ndim
        strides = None if (c_order_strides_none and a.flags.c_contiguous) else a.strides
        self.__cuda_array_interface__ = {"shape": a.shape, "typestr": a.dtype.str, "strides": strides,
                                         "data": (a.__array_interface__["data"][0], False), "version": 3}


def test_device_arrays_are_described_in_place():
    from factorjit import _arrays
    base = np.zeros((10, 24), np.float32)
    ptr = base.__array_interface__["data"][0]
    cases = {
        "C order, strides None": (base, (ptr, 10, 24, 24, False)),
        "C order, strides given": (_FakeDeviceArray(base, False), (ptr, 10, 24, 24, False)),
        "column slice": (base[:, 4:10], (ptr + 16, 10, 6, 24, False)),
        "1-D with a step": (base[:, 3], (ptr + 12, 10, 1, 24, False)),
        "float64": (np.zeros((3, 5)), None),
    }
    for what, (a, want) in cases.items():
        fake = a if isinstance(a, _FakeDeviceArray) else _FakeDeviceArray(a)
        batch = _arrays.prepare_inputs({"x": fake}, ["x"], None)
        assert batch.kind == "device", what
        name, p, rows, cols, ld, f64, device = batch.panels[0]
        if want is None:
            assert f64 and (rows, cols, ld) == (3, 5, 5), what
            continue
        assert (p, rows, cols, ld, f64, device) == want + (True,), what
    with pytest.raises(TypeError, match="input 'x': integer arrays"):
        _arrays.prepare_inputs({"x": _FakeDeviceArray(np.zeros((3, 3), np.int32))}, ["x"], None)
    with pytest.raises(TypeError, match="mix device arrays"):
        _arrays.prepare_inputs({"x": _FakeDeviceArray(base), "y": base}, ["x", "y"], None)


def test_torch_cpu_tensors_round_trip(program):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    data = panels(rows=60, cols=7)
    out = program.run(A=torch.from_numpy(data["A"]), B=torch.from_numpy(data["B"]).requires_grad_(False))
    ref = program.run(A=data["A"], B=data["B"])
    for k in ref:
        assert isinstance(out[k], torch.Tensor) and not out[k].is_cuda and out[k].dtype == torch.float64
        assert np.array_equal(out[k].numpy(), ref[k], equal_nan=True), k


def test_compile_options_reach_the_library():
    """materialize, tile_rows, threads and exact_sums change how a program runs, not what it computes."""
    data = panels(rows=500, cols=13)
    formulas = {"n": "ts_mean(stddev(A, 5), 10) * correlation(A, B, 8)"}
    plain = fj.compile(formulas, backend="cpu").run(A=data["A"], B=data["B"])["n"]
    for options in ({"materialize": ["stddev(A, 5)"]}, {"materialize": [fj.parse("correlation(A, B, 8)")]},
                    {"tile_rows": 64}, {"threads": 1, "block_cols": 8}, {"exact_sums": True}):
        p = fj.compile(formulas, backend="cpu", **options)
        got = p.run(A=data["A"], B=data["B"])["n"]
        assert np.array_equal(np.isnan(got), np.isnan(plain)), options
        ok = ~np.isnan(plain)
        assert np.allclose(got[ok], plain[ok], rtol=1e-9, atol=1e-9), options
    text = fj.compile(formulas, backend="cpu", materialize=["stddev(A, 5)"]).explain()
    assert "_fj_t0" in text  # the materialised subexpression is an intermediate panel of its own


def test_concurrent_runs_from_python_threads():
    """With the GIL released, several Python threads run one program at once: each gets its own results."""
    from concurrent.futures import ThreadPoolExecutor
    p = fj.compile({"c": "correlation(A, B, 10)", "r": "rank(A)"}, backend="cpu", threads=1)
    sets = [panels(rows=300, cols=17, seed=s) for s in range(8)]
    want = [p.run(A=d["A"], B=d["B"]) for d in sets]
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda d: p.run(A=d["A"], B=d["B"]), sets * 3))
    for i, out in enumerate(got):
        for k in out:
            assert np.array_equal(out[k], want[i % len(sets)][k], equal_nan=True), (i, k)
