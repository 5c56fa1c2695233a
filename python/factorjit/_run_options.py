"""fj.RunOptions: how one run may use memory and report progress (C++ ``fj::RunOptions``).

``Program.run`` takes the arrays as keywords named after the program's inputs, so options cannot be keywords
there as well: an input named ``progress`` or ``chunk_rows`` would collide with them. They travel as one
object passed positionally instead: ``p.run(fj.RunOptions(max_host_bytes=256 << 20), close=close)``.
"""

import numbers

from . import _core

RunProgress = _core.RunProgress


def _size(name, value):
    # bool is an Integral too, and True bytes is a mistake rather than a size.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"RunOptions: {name} must be an int (0: the default), got {type(value).__qualname__}")
    if value < 0:
        raise ValueError(f"RunOptions: {name} must be >= 0 (0: the default), got {value}")
    if value >= 1 << 63:
        raise ValueError(f"RunOptions: {name} must be below 2**63, got {value}")
    return int(value)


def _devices(value):
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"RunOptions: devices must be a sequence of CUDA device ordinals, got {type(value).__qualname__}")
    out = []
    for d in value:
        if isinstance(d, bool) or not isinstance(d, numbers.Integral):
            raise TypeError(f"RunOptions: devices must hold ints (CUDA device ordinals), got {type(d).__qualname__}")
        if not 0 <= d < 1 << 31:
            raise ValueError(f"RunOptions: devices must hold ordinals >= 0, got {d}")
        out.append(int(d))
    return out


class RunOptions:
    """Options of one ``Program.run``, passed positionally: ``p.run(fj.RunOptions(...), **arrays)``.

    max_device_bytes: device memory a CUDA run may take (0: what is free when the run starts).
    max_host_bytes: host memory a run may take for its own buffers, intermediates and staging (0: unlimited);
        on the CPU a budget makes the run go in chunks over time.
    chunk_rows, chunk_cols: force the chunking, rows of output per chunk over time or columns per chunk over
        columns (programs without row steps only); 0: chosen by the chunk planner.
    devices: CUDA device ordinals a run of host arrays spreads its chunks over time across (each with its own
        streams, staging and max_device_bytes); empty: the program's one device. The CPU backend ignores it.
    progress: None or a callable taking one ``fj.RunProgress`` (rows_done, rows_total, chunks_done,
        chunks_total, bytes_in, bytes_out, elapsed_s), called after each chunk and at least once at the end,
        never concurrently for one run. An exception it raises stops the run and is raised by ``run`` as it is
        (the inputs are untouched, the outputs are not returned).

    Results equal those of a run without options within the accuracy contract (docs/runtime.md).
    """

    __slots__ = ("max_device_bytes", "max_host_bytes", "chunk_rows", "chunk_cols", "progress", "devices")

    def __init__(self, *, max_device_bytes=0, max_host_bytes=0, chunk_rows=0, chunk_cols=0, progress=None,
                 devices=()):
        self.max_device_bytes = max_device_bytes
        self.max_host_bytes = max_host_bytes
        self.chunk_rows = chunk_rows
        self.chunk_cols = chunk_cols
        self.progress = progress
        self.devices = tuple(_devices(devices))
        self._core_args()  # bad values fail here, where the caller wrote them

    def _core_args(self):
        """What _core's run takes, checked (the fields may have been set after construction): the fields in
        the order of C++ ``fj::RunOptions``."""
        if self.progress is not None and not callable(self.progress):
            raise TypeError(f"RunOptions: progress must be None or a callable taking a RunProgress, got "
                            f"{type(self.progress).__qualname__}")
        return (_size("max_device_bytes", self.max_device_bytes), _size("max_host_bytes", self.max_host_bytes),
                _size("chunk_rows", self.chunk_rows), _size("chunk_cols", self.chunk_cols), self.progress,
                _devices(self.devices))

    def __repr__(self):
        def is_default(k, v):
            return v is None or (k == "devices" and len(v) == 0) or (k != "devices" and k != "progress" and v == 0)
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__ if not is_default(k, getattr(self, k)))
        return f"factorjit.RunOptions({fields})"
