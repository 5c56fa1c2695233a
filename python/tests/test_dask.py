"""fj.dask.run against the single-machine run: a local cluster of two worker processes, blocks shorter and
longer than the halo, chunked columns (rechunked to whole rows), row steps, several outputs."""

import numpy as np
import pytest

pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")

import dask  # noqa: E402
import dask.array as da  # noqa: E402

import factorjit as fj  # noqa: E402
from conftest import assert_contract, panels  # noqa: E402

pytestmark = pytest.mark.dask

FORMULAS = {
    "c": "correlation(A, B, 10)",
    "n": "ts_mean(stddev(A, 5), 10) + delay(ts_sum(B, 3), 2)",  # halo 4 + 9 = 13, or 2 + 2
    "r": "ts_mean(rank(A), 4) * zscore(B)",                     # row steps inside a chain
}


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=40)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


@pytest.fixture(scope="module")
def program():
    return fj.compile(FORMULAS, backend="cpu")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
# Blocks shorter than the halo (13), exactly the halo, longer; columns chunked (rechunked to whole rows).
@pytest.mark.parametrize("chunks", [(7, 5), ((13, 13, 13, 100, 161), (31,)), (50, 31), (64, -1), (400, 8)])
def test_cluster_equals_single_machine(client, program, dtype, chunks):
    data = {k: v.astype(dtype) for k, v in panels(rows=300, cols=31).items()}
    single = program.run(A=data["A"], B=data["B"])
    lazy = fj.dask.run(program, A=da.from_array(data["A"], chunks=chunks), B=da.from_array(data["B"], chunks=chunks))
    assert set(lazy) == set(FORMULAS)
    for k, arr in lazy.items():
        assert isinstance(arr, da.Array) and arr.dtype == dtype and arr.shape == (300, 31)
        assert arr.chunks[1] == (31,)  # whole rows in every block
    got = client.compute(lazy, sync=True)  # every output from one graph: the program runs once per block
    for k in FORMULAS:
        assert_contract(got[k], single[k].astype(np.float64), dtype, f"{k} chunks {chunks}")


def test_threaded_scheduler_and_one_task_per_block(program):
    data = panels(rows=120, cols=9)
    lazy = fj.dask.run(program, A=da.from_array(data["A"], chunks=(30, 9)), B=da.from_array(data["B"], chunks=(30, 9)))
    graph = dict(lazy["c"].__dask_graph__())
    runs = [k for k in graph if isinstance(k, tuple) and str(k[0]).startswith("factorjit-run-")]
    assert len(runs) == 4
    with dask.config.set(scheduler="threads"):
        got = dask.compute(lazy)[0]
    single = program.run(A=data["A"], B=data["B"])
    for k in FORMULAS:
        assert_contract(got[k], single[k], np.float64, k)


def test_recursive_operators_read_every_earlier_row():
    """ema is recursive: its halo is unbounded (every pass starts at row 0), so each block reads all rows
    before it; the results still equal the single-machine run."""
    p = fj.compile({"e": "ema(A, 10) + ts_mean(A, 5)"}, backend="cpu")
    assert p.halo >= 1 << 20
    data = panels(rows=150, cols=6)
    single = p.run(A=data["A"])["e"]
    got = fj.dask.run(p, A=da.from_array(data["A"], chunks=(40, 6)))["e"].compute(scheduler="threads")
    assert_contract(got, single, np.float64, "ema")


def test_inputs_as_a_mapping():
    p = fj.compile({"s": "ts_sum(threads, 3)"}, backend="cpu")
    x = np.arange(40.0).reshape(20, 2)
    got = fj.dask.run(p, {"threads": da.from_array(x, chunks=(6, 2))})["s"].compute(scheduler="sync")
    assert np.allclose(got[2:], x[:-2] + x[1:-1] + x[2:]) and np.isnan(got[:2]).all()


def test_errors(program):
    A = da.zeros((10, 4), chunks=5)
    with pytest.raises(KeyError, match="missing input 'B'"):
        fj.dask.run(program, A=A)
    with pytest.raises(fj.InputError, match="one shape"):
        fj.dask.run(program, A=A, B=da.zeros((10, 5), chunks=5))
    with pytest.raises(TypeError, match="int64"):
        fj.dask.run(program, A=A, B=da.zeros((10, 4), chunks=5, dtype=np.int64))
    with pytest.raises(TypeError, match="Program"):
        fj.dask.run("ts_mean(A, 5)", A=A)
    with pytest.raises(ValueError, match="2-D"):
        fj.dask.run(program, A=da.zeros(10, chunks=5), B=da.zeros(10, chunks=5))
