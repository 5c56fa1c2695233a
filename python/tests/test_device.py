"""CuPy arrays and PyTorch CUDA tensors in and out (GPU machine): outputs of the same library, device and
dtype, equal to the NumPy path (within the accuracy contract: host panels may run through the CUDA backend's
chunk pipeline, whose tiling of time changes the last bits), ordered after the caller's stream. Skips, saying why, without CuPy or
PyTorch, without a GPU, or in a build without the CUDA backend."""

import numpy as np
import pytest

import factorjit as fj
from conftest import assert_contract, panels

FORMULAS = {"c": "correlation(A, B, 10)", "s": "stddev(A, 20) / ts_mean(B, 5)", "z": "zscore(A)"}


@pytest.fixture(scope="module")
def cuda_program():
    try:
        p = fj.compile(FORMULAS, backend="cuda")
    except fj.BackendError as e:
        pytest.skip(f"no CUDA backend here: {str(e).splitlines()[0]}")
    return p


@pytest.fixture(scope="module")
def cpu_program():
    """The CPU backend's program, or None in a build without it (the GPU machine builds FJ_WITH_LLVM=OFF)."""
    try:
        return fj.compile(FORMULAS, backend="cpu")
    except fj.BackendError:
        return None


def _cupy():
    cupy = pytest.importorskip("cupy", reason="CuPy is not installed")
    try:
        if cupy.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("CuPy sees no GPU")
    except cupy.cuda.runtime.CUDARuntimeError as e:
        pytest.skip(f"CuPy sees no GPU: {e}")
    return cupy


def _torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no GPU")
    return torch


def _host(dtype, rows=2000, cols=300):
    return {k: v.astype(dtype) for k, v in panels(rows=rows, cols=cols).items() if k in ("A", "B")}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cupy_in_and_out(cuda_program, cpu_program, dtype):
    cupy = _cupy()
    host = _host(dtype)
    dev = {k: cupy.asarray(v) for k, v in host.items()}
    out = cuda_program.run(**dev)
    staged = cuda_program.run(**host)  # the NumPy path, same program
    cpu = cpu_program.run(**host) if cpu_program else None
    for k in FORMULAS:
        assert isinstance(out[k], cupy.ndarray) and out[k].dtype == dtype and out[k].device.id == dev["A"].device.id
        got = cupy.asnumpy(out[k])
        assert_contract(got, staged[k].astype(np.float64), dtype, f"{k}: device-resident against the NumPy path")
        if cpu is not None:
            assert_contract(got, cpu[k].astype(np.float64), dtype, k)


def test_cupy_layouts(cuda_program):
    cupy = _cupy()
    host = _host(np.float32, cols=400)
    wide = {k: cupy.asarray(v) for k, v in host.items()}
    ref = cuda_program.run(**{k: v[:, 50:350].copy() for k, v in host.items()})
    for what, a, b in (("column slice", wide["A"][:, 50:350], wide["B"][:, 50:350]),
                       ("fortran", cupy.asfortranarray(wide["A"][:, 50:350]), wide["B"][:, 50:350]),
                       ("column step", cupy.repeat(wide["A"][:, 50:350], 2, axis=1)[:, ::2], wide["B"][:, 50:350])):
        out = cuda_program.run(A=a, B=b)
        for k in FORMULAS:
            assert_contract(cupy.asnumpy(out[k]), ref[k].astype(np.float64), np.float32, f"{what}: {k}")


def test_cupy_on_the_callers_stream(cuda_program):
    """Inputs produced by work still queued on a non-default stream: the run must see them finished."""
    cupy = _cupy()
    host = _host(np.float32, rows=20000, cols=1000)
    ref = cuda_program.run(**host)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        a = cupy.asarray(host["A"])
        b = cupy.asarray(host["B"])
        for _ in range(20):  # long queued work that ends with the true values
            a = a * 2.0
            a = a * 0.5
        out = cuda_program.run(A=a, B=b)
        for k in FORMULAS:
            assert_contract(cupy.asnumpy(out[k]), ref[k].astype(np.float64), np.float32, k)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_in_and_out(cuda_program, dtype):
    torch = _torch()
    host = _host(np.dtype(dtype))
    dev = {k: torch.from_numpy(v).cuda() for k, v in host.items()}
    dev["A"].requires_grad_(False)
    out = cuda_program.run(**dev)
    staged = cuda_program.run(**host)
    for k in FORMULAS:
        t = out[k]
        assert isinstance(t, torch.Tensor) and t.is_cuda and t.device == dev["A"].device
        assert t.dtype == getattr(torch, dtype)
        assert_contract(t.cpu().numpy(), staged[k].astype(np.float64), np.dtype(dtype), k)


def test_torch_on_the_callers_stream_and_transposed_input(cuda_program):
    torch = _torch()
    host = _host(np.float32, rows=20000, cols=1000)
    ref = cuda_program.run(**host)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        a = torch.from_numpy(host["A"]).cuda(non_blocking=False)
        b = torch.from_numpy(np.ascontiguousarray(host["B"].T)).cuda().t()  # column-major: copied once
        for _ in range(20):
            a = a * 2.0
            a = a * 0.5
        out = cuda_program.run(A=a, B=b)
        for k in FORMULAS:
            assert_contract(out[k].cpu().numpy(), ref[k].astype(np.float64), np.float32, k)


def test_device_errors(cuda_program, cpu_program):
    cupy = _cupy()
    host = _host(np.float32, rows=50, cols=10)
    a = cupy.asarray(host["A"])
    with pytest.raises(TypeError, match="mix device arrays"):
        cuda_program.run(A=a, B=host["B"])
    with pytest.raises(TypeError, match="input 'B'"):
        cuda_program.run(A=a, B=cupy.asarray(host["B"]).astype(cupy.int32))
    if cpu_program is not None:
        with pytest.raises(fj.Error):
            cpu_program.run(A=a, B=cupy.asarray(host["B"]))  # device panels on the CPU backend


def _reference(host):
    import reference as R
    a, b = host["A"].astype(np.float64), host["B"].astype(np.float64)
    return {"c": R.ts_corr(a, b, 10), "s": R.ts_std(a, 20) / R.ts_mean(b, 5), "z": R.zscore(a)}


class _Stop(Exception):
    pass


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_run_options_through_the_cuda_pipeline(cuda_program, dtype):
    """NumPy panels in forced chunks over time through the CUDA pipeline, whose progress calls come from its
    worker thread (the GIL taken there); then a progress exception from that thread, out of run as it is."""
    host = _host(dtype)
    ref = _reference(host)
    seen = []
    got = cuda_program.run(fj.RunOptions(chunk_rows=300, max_device_bytes=256 << 20, progress=seen.append), **host)
    for k in FORMULAS:
        assert_contract(got[k], ref[k], dtype, k)
    assert seen[-1].chunks_total >= 2 and seen[-1].chunks_done == seen[-1].chunks_total and seen[-1].rows_done == 2000
    assert seen[-1].bytes_out == 3 * 2000 * 300 * np.dtype(dtype).itemsize
    before = {k: v.copy() for k, v in host.items()}
    stop = _Stop("from the progress callable")

    def progress(p):
        if p.chunks_done == 2:
            raise stop

    with pytest.raises(_Stop) as e:
        cuda_program.run(fj.RunOptions(chunk_rows=300, progress=progress), **host)
    assert e.value is stop
    for k in host:
        np.testing.assert_array_equal(host[k], before[k])
    again = cuda_program.run(fj.RunOptions(chunk_rows=300), **host)
    for k in FORMULAS:
        assert_contract(again[k], ref[k], dtype, f"{k} after the stopped run")


def test_run_options_with_cupy(cuda_program):
    """Device arrays: the run is enqueued on CuPy's stream (run_async); the progress callable hears of it once."""
    cupy = _cupy()
    host = _host(np.float32)
    seen = []
    out = cuda_program.run(fj.RunOptions(progress=seen.append), **{k: cupy.asarray(v) for k, v in host.items()})
    assert len(seen) == 1 and seen[0].rows_total == 2000
    ref = _reference(host)
    for k in FORMULAS:
        assert_contract(cupy.asnumpy(out[k]), ref[k], np.float32, k)
