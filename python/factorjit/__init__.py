"""factorjit: fused JIT kernels for quant factor expressions, from Python.

    import factorjit as fj
    p = fj.compile({"c": "correlation(close, volume, 10)", "z": "zscore(close)"})
    out = p.run(close=close, volume=volume)      # NumPy, pandas, CuPy or PyTorch arrays
    out = p.run(fj.RunOptions(max_host_bytes=256 << 20, progress=print), close=close, volume=volume)
    print(p.explain())

Expressions can also be built here: ``fj.corr(fj.window(fj.input("close"), 10), fj.window(v, 10))``.
``fj.dask.run(program, **dask_arrays)`` runs a program over Dask arrays (docs/python.md).
"""

from . import errors
from ._core import (Expr, Window, abs, argmax, argmin, constant, corr, count, cov, decay_linear, delay, delta,
                    demean, ema, exp, fmax, fmin, group_neutralize, group_rank, group_zscore, input, kurt, log, max,
                    mean, median, min, parse, pow, product, quantile, rank, resid, rsquare, scale, sign, signedpower,
                    skew, slope, sqrt, std, stddev, sum, ts_rank, var, where, window, zscore)
from . import _core
from ._program import Program, compile
from ._run_options import RunOptions, RunProgress
from .errors import BackendError, Error, ExprError, InputError, MissingInputError, ParseError, RunError

_core._register_errors(Error, ExprError, ParseError, InputError, BackendError, RunError)

__all__ = ["Program", "compile", "RunOptions", "RunProgress", "Expr", "Window", "Error", "ExprError", "ParseError", "InputError",
           "MissingInputError", "BackendError", "RunError", "input", "constant", "parse", "window", "abs", "sign", "sqrt",
           "exp", "log", "pow", "signedpower", "fmin", "fmax", "min", "max", "where", "delay", "delta", "sum",
           "mean", "count", "var", "std", "stddev", "argmin", "argmax", "ts_rank", "product", "decay_linear", "skew",
           "kurt", "median", "quantile", "slope", "rsquare", "resid", "ema",
           "corr", "cov", "rank", "zscore", "demean", "scale", "group_neutralize", "group_rank", "group_zscore"]


def __getattr__(name):
    # fj.dask is imported on first use: importing factorjit does not need Dask.
    if name == "dask":
        import importlib
        return importlib.import_module(".dask", __name__)
    raise AttributeError(f"module 'factorjit' has no attribute '{name}'")
