"""fj.RunOptions through Program.run on the CPU backend: forced chunks over time and over columns and a host
memory budget give the reference's results; the progress callable sees every chunk; an exception it raises
comes out of run as it is, with the inputs untouched and the next run right; bad options raise TypeError or
ValueError; inputs may be named like the options' fields."""

import numpy as np
import pytest

import factorjit as fj
import reference as R
from conftest import assert_contract, panels

ROWS, COLS = 700, 19


def data(dtype=np.float64, seed=11):
    """conftest's panels (NaN holes, a constant stretch) plus a large offset, ties and a bad tick."""
    p = panels(ROWS, COLS, seed=seed)
    A, B = p["A"], p["B"]
    A[:, 7] += 1e4                     # a large offset: a level far from the window's spread
    B[200:260, 2] = np.round(B[200:260, 2], 1)  # ties
    A[333, 11] = 1e8                   # a bad tick, then the windows after it
    return {"A": A.astype(dtype), "B": B.astype(dtype)}


def reference(d):
    a, b = d["A"].astype(np.float64), d["B"].astype(np.float64)
    return {"c": R.ts_corr(a, b, 20), "m": R.ts_mean(a, 5)}


@pytest.fixture(scope="module")
def program():
    return fj.compile({"c": "corr(window(A, 20), window(B, 20))", "m": "ts_mean(A, 5)"}, backend="cpu")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("options", [
    dict(chunk_rows=61),                  # chunks over time, each carrying the 19 rows of halo
    dict(chunk_rows=1),
    dict(chunk_cols=4),                   # chunks over columns
    dict(max_host_bytes=64 << 10),        # a budget (nothing to budget here: the kernel keeps no intermediates)
    dict(max_device_bytes=1 << 20),       # CUDA's budget: the CPU backend has no device to budget
], ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()))
def test_options_keep_the_contract(program, dtype, options):
    d = data(dtype)
    seen = []
    got = program.run(fj.RunOptions(progress=seen.append, **options), **d)
    ref = reference(d)
    for name in ("c", "m"):
        assert_contract(got[name], ref[name], dtype, name)
    assert got["c"].dtype == dtype
    assert seen and seen[-1].rows_done == seen[-1].rows_total == ROWS
    assert seen[-1].chunks_done == seen[-1].chunks_total
    if "chunk_rows" in options:
        assert seen[-1].chunks_total == -(-ROWS // options["chunk_rows"])


def test_host_budget_bounds_the_intermediates():
    # rank is a row step: its result is an intermediate panel that ts_mean's kernel reads. A budget smaller than
    # that panel makes the run go in more, smaller chunks over time, with the same results.
    rows, cols = 12000, 19
    d = data()
    a = np.tile(d["A"], (rows // ROWS + 1, 1))[:rows]
    p = fj.compile({"r": "ts_mean(rank(A), 5)"}, backend="cpu")
    free, tight = [], []
    got_free = p.run(fj.RunOptions(progress=free.append), A=a)
    got = p.run(fj.RunOptions(max_host_bytes=100 << 10, progress=tight.append), A=a)
    assert tight[-1].chunks_total > free[-1].chunks_total
    assert_contract(got["r"], R.ts_mean(R.rank(a), 5), np.float64, "r")
    assert_contract(got_free["r"], R.ts_mean(R.rank(a), 5), np.float64, "r")


def test_progress_sees_every_chunk(program):
    d = data()
    seen = []
    program.run(fj.RunOptions(chunk_rows=100, progress=seen.append), **d)
    assert [p.chunks_done for p in seen] == list(range(1, 8))
    assert all(p.chunks_total == 7 and p.rows_total == ROWS for p in seen)
    assert sorted(p.rows_done for p in seen) == [p.rows_done for p in seen] and seen[-1].rows_done == ROWS
    assert all(b.bytes_in > a.bytes_in and b.bytes_out > a.bytes_out for a, b in zip(seen, seen[1:]))
    # two inputs read with their halo rows, two outputs written: 8 bytes an element
    assert seen[-1].bytes_out == 2 * ROWS * COLS * 8
    assert seen[-1].bytes_in >= 2 * ROWS * COLS * 8
    assert all(b.elapsed_s >= a.elapsed_s >= 0 for a, b in zip(seen, seen[1:]))
    assert "rows 700/700" in repr(seen[-1])


class Stop(Exception):
    pass


def test_progress_exception_propagates_as_it_is(program):
    d = data()
    before = {k: v.copy() for k, v in d.items()}
    calls = []
    stop = Stop("enough")

    def progress(p):
        calls.append(p.chunks_done)
        if p.chunks_done == 3:
            raise stop

    with pytest.raises(Stop) as e:
        program.run(fj.RunOptions(chunk_rows=100, progress=progress), **d)
    assert e.value is stop
    assert calls == [1, 2, 3]  # the run stopped at the exception
    for k in d:
        np.testing.assert_array_equal(d[k], before[k])
    got = program.run(fj.RunOptions(chunk_rows=100), **d)  # the next run works
    assert_contract(got["c"], reference(d)["c"], np.float64, "c")


def test_progress_exception_of_a_whole_panel_run(program):
    def progress(p):
        raise KeyError("from the callback")

    with pytest.raises(KeyError, match="from the callback"):
        program.run(fj.RunOptions(progress=progress), **data())


def test_inputs_named_like_options():
    p = fj.compile({"o": "ts_mean(progress, 3) + chunk_rows"}, backend="cpu")
    x, y = data()["A"], data()["B"]
    seen = []
    got = p.run(fj.RunOptions(chunk_rows=50, progress=seen.append), progress=x, chunk_rows=y)
    assert_contract(got["o"], R.ts_mean(x, 3) + y, np.float64, "o")
    assert seen[-1].chunks_total == 14
    got2 = p.run({"progress": x}, fj.RunOptions(chunk_rows=50), chunk_rows=y)  # a mapping and options, any order
    got3 = p.run(fj.RunOptions(chunk_rows=50), {"progress": x, "chunk_rows": y})
    np.testing.assert_array_equal(got2["o"], got["o"])
    np.testing.assert_array_equal(got3["o"], got["o"])


def test_options_with_pandas(program):
    pd = pytest.importorskip("pandas")
    d = data()
    idx = pd.date_range("2020-01-01", periods=ROWS)
    frames = {k: pd.DataFrame(v, index=idx, columns=[f"s{j}" for j in range(COLS)]) for k, v in d.items()}
    got = program.run(fj.RunOptions(chunk_rows=128), **frames)
    assert got["c"].index.equals(idx)
    assert_contract(got["c"].to_numpy(), reference(d)["c"], np.float64, "c")


def test_devices_are_ignored_on_the_cpu(program):
    # RunOptions::devices spreads a CUDA run over GPUs; the CPU backend ignores it (docs/runtime.md).
    d = data()
    got = program.run(fj.RunOptions(devices=[0, 0], chunk_rows=100), **d)
    assert_contract(got["c"], reference(d)["c"], np.float64, "c")
    assert fj.RunOptions(devices=(np.int32(1), 0)).devices == (1, 0)
    assert fj.RunOptions(devices=range(2))._core_args()[-1] == [0, 1]


def test_bad_options():
    with pytest.raises(ValueError, match="chunk_rows must be >= 0"):
        fj.RunOptions(chunk_rows=-1)
    with pytest.raises(TypeError, match="max_host_bytes must be an int"):
        fj.RunOptions(max_host_bytes="256M")
    with pytest.raises(TypeError, match="max_device_bytes must be an int"):
        fj.RunOptions(max_device_bytes=True)
    with pytest.raises(TypeError, match="max_host_bytes must be an int"):
        fj.RunOptions(max_host_bytes=1.5)
    with pytest.raises(ValueError, match="below 2\\*\\*63"):
        fj.RunOptions(chunk_cols=1 << 63)
    with pytest.raises(TypeError, match="progress must be None or a callable"):
        fj.RunOptions(progress=3)
    with pytest.raises(TypeError):
        fj.RunOptions(4096)  # keywords only: a bare number says nothing
    with pytest.raises(TypeError, match="devices must be a sequence"):
        fj.RunOptions(devices=0)
    with pytest.raises(TypeError, match="devices must hold ints"):
        fj.RunOptions(devices=["0"])
    with pytest.raises(ValueError, match="ordinals >= 0"):
        fj.RunOptions(devices=[-1])
    assert fj.RunOptions(chunk_rows=np.int64(8)).chunk_rows == 8
    assert repr(fj.RunOptions(chunk_rows=8)) == "factorjit.RunOptions(chunk_rows=8)"
    assert repr(fj.RunOptions(devices=[1])) == "factorjit.RunOptions(devices=(1,))"


def test_bad_run_arguments(program):
    d = data()
    with pytest.raises(TypeError, match="one RunOptions"):
        program.run(fj.RunOptions(), fj.RunOptions(), **d)
    with pytest.raises(TypeError, match="one mapping"):
        program.run({"A": d["A"]}, {"B": d["B"]})
    with pytest.raises(TypeError, match="arrays go by name"):
        program.run(d["A"], B=d["B"])
    o = fj.RunOptions()
    o.chunk_rows = -5  # set after construction: checked at the run, before anything runs
    with pytest.raises(ValueError, match="chunk_rows must be >= 0"):
        program.run(o, **d)
