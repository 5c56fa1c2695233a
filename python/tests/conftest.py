"""Shared data and checks of the Python tests (python/tests/)."""

import os

import numpy as np
import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "dask: runs a local Dask cluster of worker processes (ctest entry python_dask)")


def panels(rows=300, cols=23, seed=7, nan_share=0.03):
    """Price-like panels with NaN holes: A a random walk around 100, B volumes (log-normal), C in (-1, 1),
    G group ids 0..3 (NaN in a few cells)."""
    rng = np.random.default_rng(seed)
    A = 100 + rng.standard_normal((rows, cols)).cumsum(0)
    B = np.exp(rng.standard_normal((rows, cols)))
    C = rng.uniform(-1, 1, (rows, cols))
    G = rng.integers(0, 4, (rows, cols)).astype(float)
    for x in (A, B, C):
        x[rng.random((rows, cols)) < nan_share] = np.nan
    A[40:60, 3 % cols] = np.nan    # a long hole: windows with fewer values than min_periods
    B[100:130, 5 % cols] = 2.5     # a constant stretch: var exactly 0, corr NaN
    G[rng.random((rows, cols)) < 0.01] = np.nan
    return {"A": A, "B": B, "C": C, "G": G}


def assert_contract(got, ref, dtype, name=""):
    """docs/operators.md's accuracy contract: NaN exactly where the reference has NaN, and per element
    |got - ref| <= tol * max(1, |ref|) (1e-9 for float64, 1e-5 for float32)."""
    got = np.asarray(got, dtype=float)
    assert got.shape == ref.shape, f"{name}: shape {got.shape} != {ref.shape}"
    nan_got, nan_ref = np.isnan(got), np.isnan(ref)
    where = np.argwhere(nan_got != nan_ref)
    assert not len(where), (f"{name}: NaN placement differs at {len(where)} cells, first {tuple(where[0])}: "
                            f"got {got[tuple(where[0])]}, reference {ref[tuple(where[0])]}")
    fin = ~nan_ref
    assert (np.isinf(got[fin]) == np.isinf(ref[fin])).all(), f"{name}: infinities differ"
    tol = 1e-9 if np.dtype(dtype) == np.float64 else 1e-5
    ok = fin & ~np.isinf(ref)
    err = np.abs(got[ok] - ref[ok]) / np.maximum(1, np.abs(ref[ok]))
    assert err.size == 0 or err.max() <= tol, f"{name}: largest error {err.max():.3g} > {tol:g}"


@pytest.fixture(scope="session")
def cli_path():
    path = os.environ.get("FJ_CLI_PATH")
    if not path or not os.path.exists(path):
        pytest.skip("FJ_CLI_PATH does not name the factorjit command (ctest sets it)")
    return path
