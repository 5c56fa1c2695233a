"""fj.compile and fj.Program: named outputs compiled together, run on arrays."""

import functools

import numpy as np

from . import _arrays, _core
from ._run_options import RunOptions

_DTYPES = {None: None, "float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}


def _dtype(dtype):
    if dtype is None:
        return None
    try:
        d = np.dtype(dtype)
    except TypeError:
        d = None
    if d not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"dtype must be None, float32 or float64, got {dtype!r}")
    return d


def _expr(name, value, round_windows):
    if isinstance(value, str):
        return _core.parse(value, round_windows)
    if isinstance(value, _core.Expr):
        return value
    raise TypeError(f"output '{name}': expected formula text or a factorjit expression, got "
                    f"{type(value).__module__}.{type(value).__qualname__}")


class Program:
    """A compiled program: ``run(**arrays)`` computes every output.

    ``inputs``: the panels the outputs read (sorted); ``outputs``: the output names in the order given;
    ``backend``: ``"cpu"`` or ``"cuda"``, chosen at compile time; ``halo``: the rows before a row that its
    results need (what a chunk over time must carry); ``dtype``: the dtype runs compute in (None: the inputs').
    Programs pickle (as their formulas and options), so Dask can send them to worker processes.
    """

    __slots__ = ("_core", "_state", "dtype")

    def __init__(self, core, state, dtype):
        self._core = core
        self._state = state
        self.dtype = dtype

    @property
    def inputs(self):
        return self._core.inputs

    @property
    def outputs(self):
        return self._core.outputs

    @property
    def backend(self):
        return self._core.backend

    @property
    def halo(self):
        return self._core.halo

    def explain(self):
        """Steps, intermediates, halos, the generated kernel IR and the backend's kernels, for humans."""
        return self._core.explain()

    def run(self, *args, **arrays):
        """Computes every output from the named input arrays and returns ``{name: array}``.

        Keywords are always input names. Positional arguments, in any order: a mapping of input names to
        arrays (for names that are not identifiers) and an ``fj.RunOptions`` (memory budgets, forced chunk
        sizes, a progress callable), e.g. ``p.run(fj.RunOptions(chunk_rows=4096), close=close)``. See
        docs/python.md for the array kinds, layouts and dtypes."""
        inputs, options = _run_arguments(args)
        if inputs is not None:
            arrays = {**inputs, **arrays}
        names = self._core.inputs
        batch = _arrays.prepare_inputs(arrays, names, self.dtype)
        outputs = self._core.outputs
        out, panels = _arrays.allocate_outputs(batch, outputs)
        core_options = None if options is None else options._core_args()
        if batch.kind == "device":
            # Enqueued on the caller's current stream (Program::run_async), after the work queued there and
            # before what comes next, as the library's own operations are; no wait for the results.
            self._core.run(batch.panels, panels, _arrays.caller_stream(batch), core_options)
        else:
            self._core.run(batch.panels, panels, None, core_options)
        return _arrays.wrap_outputs(batch, outputs, out)

    def __reduce__(self):
        return (_restore, self._state)

    def __repr__(self):
        return (f"factorjit.Program(outputs={self.outputs}, inputs={self.inputs}, backend='{self.backend}', "
                f"halo={self.halo})")


def _run_arguments(args):
    """(inputs mapping or None, RunOptions or None) from run's positional arguments."""
    inputs = options = None
    for a in args:
        if isinstance(a, RunOptions):
            if options is not None:
                raise TypeError("run takes one RunOptions, got two")
            options = a
        elif hasattr(a, "keys") and hasattr(a, "__getitem__"):
            if inputs is not None:
                raise TypeError("run takes one mapping of inputs (and keywords), got two")
            inputs = a
        else:
            raise TypeError(f"run's positional arguments are a mapping of inputs and a factorjit.RunOptions, got "
                            f"{type(a).__module__}.{type(a).__qualname__} (arrays go by name: run(close=...))")
    return inputs, options


@functools.lru_cache(maxsize=64)
def _restore(outputs, options, dtype):
    """A pickled program, compiled again once per process (Dask sends it with every task)."""
    return _compile(outputs, options, dtype)


def _compile(outputs, options, dtype):
    backend, threads, tile_rows, block_cols, exact_sums, fma, materialize = options
    exprs = [(name, _core.parse(text)) for name, text in outputs]
    core = _core.compile(exprs, backend, threads, tile_rows, block_cols, exact_sums, fma,
                         [_core.parse(t) for t in materialize])
    return Program(core, (outputs, options, dtype), None if dtype is None else np.dtype(dtype))


def compile(outputs, backend="auto", dtype=None, *, threads=0, tile_rows=0, block_cols=0, exact_sums=False,
            fma_contraction=False, materialize=(), round_windows=False):
    """Compiles named outputs, ``{"name": "formula text" or expression, ...}``, into one program.

    backend: ``"auto"`` (CUDA when a GPU is usable, else the CPU), ``"cpu"`` or ``"cuda"``.
    dtype: None (runs compute in their inputs' dtype, float32 or float64) or float32/float64 (inputs of the
    other float dtype are converted, with a copy). The keywords are fj::CompileOptions' fields; round_windows
    is fj::ParseOptions' (fractional window lengths in formula text round instead of flooring).
    """
    if hasattr(outputs, "items"):
        outputs = list(outputs.items())
    elif isinstance(outputs, (str, _core.Expr)) or not hasattr(outputs, "__iter__"):
        raise TypeError("compile takes a dict of named outputs, e.g. {'c': 'corr(close, volume, 10)'}")
    else:
        outputs = list(outputs)
    for item in outputs:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError("compile takes a dict of named outputs, e.g. {'c': 'corr(close, volume, 10)'}")
    if backend not in ("auto", "cpu", "cuda"):
        raise ValueError(f"backend must be 'auto', 'cpu' or 'cuda', got {backend!r}")
    d = _dtype(dtype)
    # Expressions are kept as formula text (Expr.str() parses back to the same node): the program's state
    # for pickling, and the one source of the compiled expressions, so a restored program is the same one.
    texts = tuple((name, str(_expr(name, value, round_windows))) for name, value in outputs)
    mats = tuple(str(_expr("materialize", m, round_windows)) for m in materialize)
    options = (backend, int(threads), int(tile_rows), int(block_cols), bool(exact_sums), bool(fma_contraction), mats)
    return _compile(texts, options, None if d is None else d.name)
