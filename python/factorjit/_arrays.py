"""Arrays of NumPy, pandas, CuPy and PyTorch as factorjit panels, and the outputs made to match.

A panel is a row-major view: element (t, j) at data[t * ld + j], ld >= cols (runtime/panel.hpp). An array
whose rows are contiguous and evenly spaced (C order, or a slice of columns of a C-order array) is used in
place; any other layout (Fortran order, as pandas keeps most frames; a column step; reversed rows; a
foreign byte order) is copied once into C order. The outputs are new arrays of the inputs' library, dtype
and device (docs/python.md).
"""

import os

import numpy as np

from .errors import InputError, MissingInputError

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


class Batch:
    """One run's inputs as panels, and what the outputs must look like."""

    __slots__ = ("kind", "rows", "cols", "dtype", "ndim", "panels", "keep", "pandas", "device", "stream",
                 "library")

    def __init__(self):
        self.panels = []  # (name, pointer, rows, cols, ld, is_float64, on_device) for _core
        self.keep = []    # arrays the pointers point into (copies included), alive through the run
        self.pandas = None  # the DataFrame or Series whose index (and columns) the outputs take
        self.device = None
        self.stream = None
        self.library = None  # the output library: "numpy", "torch", "cupy"


def _type_error(name, what):
    return TypeError(f"input '{name}': {what}")


def _check_dtype(name, dtype, want):
    """The run's dtype for an input of `dtype` (native byte order), or a TypeError for non-float panels."""
    if dtype.kind == "f" and dtype.itemsize in (4, 8):
        return _FLOATS[dtype.itemsize == 8] if want is None else want
    kind = "integer" if dtype.kind in "iu" else "boolean" if dtype.kind == "b" else str(dtype)
    raise _type_error(name, f"{kind} arrays are not panels: factorjit computes on float32 or float64 "
                            f"(convert with .astype(numpy.float64), or compile with dtype=)")


def _leading_dimension(shape, strides, itemsize):
    """ld of a row-major view with these byte strides, or None when the layout is not one."""
    rows, cols = shape
    s0, s1 = strides
    if cols > 1 and s1 != itemsize:
        return None
    if rows <= 1:
        return cols
    if s0 <= 0 or s0 % itemsize or s0 // itemsize < cols:
        return None
    return s0 // itemsize


def _as_2d(name, shape):
    if len(shape) == 2:
        return shape
    if len(shape) == 1:
        return (shape[0], 1)
    raise ValueError(f"input '{name}': a panel is 2-D (rows = time, columns = instruments) or 1-D "
                     f"(one column), got {len(shape)} dimensions {tuple(shape)}")


def _host(batch, name, a, want):
    """A NumPy array (or what pandas/torch hand over) as a host panel."""
    dtype = _check_dtype(name, a.dtype, want)
    if a.ndim == 1:
        a = a.reshape(-1, 1)
    elif a.ndim != 2:
        _as_2d(name, a.shape)
    ld = None
    if a.dtype == dtype and a.dtype.isnative and a.flags.aligned:
        ld = _leading_dimension(a.shape, a.strides, a.itemsize)
    if ld is None:  # the one copy: C order, native byte order, the run's dtype
        a = np.ascontiguousarray(a, dtype=dtype)
        ld = a.shape[1]
    batch.keep.append(a)
    batch.panels.append((name, a.__array_interface__["data"][0], a.shape[0], a.shape[1], ld,
                         dtype == _FLOATS[1], False))
    return a.shape, dtype


def _pandas_values(name, frame):
    dtypes = set(frame.dtypes) if frame.ndim == 2 else {frame.dtype}
    if len(dtypes) > 1:
        raise _type_error(name, f"the DataFrame's columns mix dtypes {sorted(map(str, dtypes))}; factorjit "
                                f"panels have one (convert with .astype(numpy.float64))")
    return frame.to_numpy(copy=False)


def _describe(name, a, library):
    """(pointer, shape, byte strides, dtype, device ordinal) of a device array. CuPy's and PyTorch's own
    attributes are read directly (cheaper than building the __cuda_array_interface__ dict, which other
    libraries' arrays are read through)."""
    if library == "torch":
        import torch
        dtype = {torch.float32: _FLOATS[0], torch.float64: _FLOATS[1]}.get(a.dtype)
        if dtype is None:
            raise _type_error(name, f"{a.dtype} tensors are not panels: factorjit computes on float32 or "
                                    f"float64 (convert with .double() or .float())")
        return (a.data_ptr(), tuple(a.shape), tuple(st * dtype.itemsize for st in a.stride()), dtype,
                a.device.index)
    if type(a).__module__.partition(".")[0] == "cupy":
        return a.data.ptr, a.shape, a.strides, a.dtype, a.device.id
    cai = a.__cuda_array_interface__
    dtype = np.dtype(cai["typestr"])
    strides = cai.get("strides")  # bytes; None: C order
    if strides is None:
        strides = tuple(int(np.prod(cai["shape"][i + 1:])) * dtype.itemsize for i in range(len(cai["shape"])))
    return cai["data"][0], tuple(cai["shape"]), tuple(strides), dtype, None


def _device(batch, name, a, library, want):
    """A CuPy array or a PyTorch CUDA tensor (anything with __cuda_array_interface__) as a device panel."""
    ptr, shape, strides, dtype, device = _describe(name, a, library)
    run_dtype = _check_dtype(name, dtype, want)
    if len(shape) == 1:
        strides = (strides[0], dtype.itemsize)
    shape = _as_2d(name, shape)
    ld = _leading_dimension(shape, strides, dtype.itemsize)
    if ld is None or dtype != run_dtype or ptr % dtype.itemsize:
        # The one copy, on the device, by the array's own library.
        if library == "torch":
            import torch
            a = a.detach().to(dtype=torch.float64 if run_dtype == _FLOATS[1] else torch.float32).contiguous()
        else:
            import cupy
            a = cupy.ascontiguousarray(a, dtype=run_dtype)
        ptr, ld = (a.data_ptr() if library == "torch" else a.data.ptr), shape[1]
    batch.keep.append(a)
    batch.panels.append((name, ptr, shape[0], shape[1], ld, run_dtype == _FLOATS[1], True))
    return shape, run_dtype, device


def _kind(a):
    """'numpy', 'pandas', 'torch' (CPU), 'torch_cuda', 'cuda' (CuPy or another __cuda_array_interface__)."""
    t = type(a)
    if t is np.ndarray:
        return "numpy"
    module = t.__module__.partition(".")[0]
    if module == "pandas" and hasattr(a, "to_numpy") and hasattr(a, "index"):
        return "pandas"
    if module == "torch" and hasattr(a, "is_cuda"):
        return "torch_cuda" if a.is_cuda else "torch"
    if isinstance(a, np.ndarray):
        return "numpy"
    if hasattr(a, "__cuda_array_interface__"):
        return "cuda"
    return None


def prepare_inputs(arrays, names, want):
    """The program's inputs (names) from the caller's arrays; want: the run's dtype, or None for theirs."""
    missing = [n for n in names if n not in arrays]
    if missing:
        raise MissingInputError(f"missing input{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}: "
                                f"the program reads {', '.join(names)}; given: {', '.join(arrays) or 'none'}")
    batch = Batch()
    shapes, dtypes, kinds, ndims, frames = {}, {}, set(), set(), []
    for name in names:
        a = arrays[name]
        kind = _kind(a)
        if kind is None:
            raise _type_error(name, f"expected a NumPy array, a pandas DataFrame or Series, a CuPy array or a "
                                    f"PyTorch tensor, got {type(a).__module__}.{type(a).__qualname__}")
        kinds.add(kind)
        ndims.add(a.ndim)
        if kind in ("torch_cuda", "cuda"):
            shape, dtype, device = _device(batch, name, a, "torch" if kind == "torch_cuda" else "cupy", want)
            if batch.device is None:
                batch.device, batch.library = device, ("torch" if kind == "torch_cuda" else "cupy")
            elif device != batch.device:
                raise ValueError(f"input '{name}' is on CUDA device {device}, others on device {batch.device}")
            batch.keep.append(a)
        else:
            if kind == "pandas":
                if batch.pandas is None or (a.ndim == 2 and batch.pandas.ndim == 1):
                    batch.pandas = a  # the outputs' labels: the first DataFrame, else the first Series
                frames.append((name, a))
                host = _pandas_values(name, a)
            elif kind == "torch":
                host = a.detach().numpy()
            else:
                host = a
            shape, dtype = _host(batch, name, host, want)
        shapes[name] = tuple(shape)
        dtypes[name] = dtype
    for name, frame in frames:
        _same_labels(name, frame, batch.pandas)
    if len(set(shapes.values())) > 1:
        raise InputError("inputs of one run must have one shape (rows = time, columns = instruments): "
                         + ", ".join(f"'{n}' {s[0]} x {s[1]}" for n, s in shapes.items()))
    if len(set(dtypes.values())) > 1:
        raise TypeError("inputs of one run must have one dtype: "
                        + ", ".join(f"'{n}' {d}" for n, d in dtypes.items())
                        + " (convert them, or compile with dtype= to have them converted)")
    device_kinds = kinds & {"torch_cuda", "cuda"}
    if device_kinds and kinds - device_kinds:
        raise TypeError("inputs mix device arrays (CuPy, PyTorch CUDA) with host arrays (NumPy, pandas, "
                        "PyTorch CPU): move them to one side")
    if names:
        batch.rows, batch.cols = next(iter(shapes.values()))
        batch.dtype = next(iter(dtypes.values()))
    else:
        batch.rows = batch.cols = 0
        batch.dtype = want or _FLOATS[1]
    batch.ndim = 1 if ndims == {1} else 2
    if device_kinds:
        batch.kind = "device"
        _check_cuda_device(batch.device)
    else:
        batch.kind = "host"
        batch.library = "pandas" if batch.pandas is not None else "torch" if kinds == {"torch"} else "numpy"
    return batch


def _same_labels(name, frame, first):
    if frame is first:
        return
    if frame.ndim == 2 and first.ndim == 2 and not frame.columns.equals(first.columns):
        raise InputError(f"input '{name}': its columns differ from those of the other DataFrames; align them "
                         f"first (e.g. df.reindex(columns=...))")
    if not frame.index.equals(first.index):
        raise InputError(f"input '{name}': its index differs from that of the other inputs; align them first "
                         f"(e.g. df.reindex(index=...))")


def _check_cuda_device(device):
    want = int(os.environ.get("FJ_CUDA_DEVICE", "0") or 0)
    if device is not None and device != want:
        raise ValueError(f"the inputs are on CUDA device {device}; factorjit's CUDA backend uses device {want} "
                         f"(set FJ_CUDA_DEVICE={device} before the first run)")


def allocate_outputs(batch, names):
    """New arrays for the outputs, and their panels."""
    shape = (batch.rows, batch.cols)
    f64 = batch.dtype == _FLOATS[1]
    out, panels = [], []
    if batch.kind == "host":
        for name in names:
            a = np.empty(shape, batch.dtype)
            out.append(a)
            panels.append((name, a.__array_interface__["data"][0], shape[0], shape[1], shape[1], f64, False))
        return out, panels
    if batch.library == "torch":
        import torch
        dt = torch.float64 if f64 else torch.float32
        dev = torch.device("cuda", batch.device)
        for name in names:
            a = torch.empty(shape, dtype=dt, device=dev)
            out.append(a)
            panels.append((name, a.data_ptr(), shape[0], shape[1], shape[1], f64, True))
    else:
        import cupy
        with _cupy_device(cupy, batch.device):
            for name in names:
                a = cupy.empty(shape, batch.dtype)
                out.append(a)
                panels.append((name, a.data.ptr, shape[0], shape[1], shape[1], f64, True))
    return out, panels


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


_NOTHING = _Nothing()


def _cupy_device(cupy, device):
    """CuPy's device context for `device`, or nothing when it is current already (the usual case: entering
    one costs microseconds a run)."""
    if device is None or cupy.cuda.runtime.getDevice() == device:
        return _NOTHING
    return cupy.cuda.Device(device)


def caller_stream(batch):
    """The device library's current stream as a CUstream handle (0: the legacy default stream)."""
    if batch.library == "torch":
        import torch
        return torch.cuda.current_stream(batch.device).cuda_stream
    import cupy
    with _cupy_device(cupy, batch.device):
        return cupy.cuda.get_current_stream().ptr


def wrap_outputs(batch, names, arrays):
    """The result dict: arrays of the inputs' kind (1-D when every input was 1-D)."""
    if batch.ndim == 1:
        arrays = [a.reshape(-1) for a in arrays]
    if batch.kind == "host":
        if batch.library == "pandas":
            import pandas as pd
            p = batch.pandas
            if batch.ndim == 1 or p.ndim == 1:
                if batch.ndim == 2:  # Series among 2-D inputs: the index only
                    return {n: pd.DataFrame(a, index=p.index, copy=False) for n, a in zip(names, arrays)}
                return {n: pd.Series(a, index=p.index, copy=False) for n, a in zip(names, arrays)}
            return {n: pd.DataFrame(a, index=p.index, columns=p.columns, copy=False) for n, a in zip(names, arrays)}
        if batch.library == "torch":
            import torch
            return {n: torch.from_numpy(a) for n, a in zip(names, arrays)}
    return dict(zip(names, arrays))
