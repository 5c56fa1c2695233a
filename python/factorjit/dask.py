"""fj.dask.run: a program over Dask arrays, for panels beyond one machine.

Every step of a program is local in time given its halo (the rows before a row that its results need),
and row steps (rank, zscore, ...) need whole rows. So the panels are cut over time only: each block of
rows keeps all its columns, and its task reads the block plus the `halo` rows before it (from the blocks
before it, however many that takes) and computes the block's rows of every output. This is map_overlap with
a depth of (halo, 0) over rows and none over columns, written as one task per block that returns every
output, so a program with several outputs runs once per block, not once per output, and without copying
the block next to its halo (_run_block says how). Results equal the single-machine run within the accuracy contract (docs/operators.md: any tiling
of time gives the same results up to rounding).

The program travels to worker processes pickled (as its formulas and options) and is compiled once per
worker process. Its backend is chosen there: "auto" takes a worker's GPU when it has one (CUDA backend;
host blocks are staged through the device, CuPy blocks are used in place).
"""

from operator import getitem

import dask.array as da
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from ._program import Program, _restore

__all__ = ["run"]


def _run_block(state, threads, names, lead, skip, halo, *blocks):
    """One block's task: blocks[i] lists input i's pieces (the blocks holding the halo rows, then its own);
    lead: the halo rows they hold before the block (fewer than `halo` near the panel's start); skip: the rows
    of the first piece before those. threads: the CPU threads of the run (one by default, so that a worker
    running several tasks at once does not oversubscribe its cores).

    The block's own rows are not copied next to the halo rows: the program runs on the block as it is, which
    gets every output row right but the first `halo` (they would need rows before the block), and again on
    the halo rows plus the block's first `halo` rows, a small copy, for those. A block shorter than the halo
    is run on one copy of everything it needs."""
    outputs, options, dtype = state
    if threads is not None and options[1] != threads:
        options = (options[0], int(threads)) + options[2:]
    program = _restore(outputs, options, dtype)  # compiled once per worker process
    pieces = [[p[0][skip:]] + list(p[1:]) if skip else list(p) for p in blocks]
    own = {name: p[-1] for name, p in zip(names, pieces)}
    rows = next(iter(own.values())).shape[0]

    def joined(head_rows):  # the halo rows and the block's first head_rows, one copy
        return {name: np.concatenate(p[:-1] + [p[-1][:head_rows]], axis=0) for name, p in zip(names, pieces)}

    if lead == 0:
        return program.run(**own)
    if rows < halo:
        return {k: v[lead:] for k, v in program.run(**joined(rows)).items()}
    out = program.run(**own)
    head = program.run(**joined(halo))
    for k, v in out.items():
        v[:halo] = head[k][lead:]
    return out


def _pick(result, name):
    return result[name]


def run(program, inputs=None, /, threads=1, **arrays):
    """Runs `program` over Dask arrays: returns ``{output name: lazy dask array}``. Inputs are keywords, or
    a mapping after the program (for names that are not identifiers, or an input called `threads`).

    Every input is 2-D (rows = time, columns = instruments), all of one shape; they are rechunked to whole
    rows (columns in one chunk) and to the first input's row chunks. NumPy and CuPy blocks both work.
    threads: the CPU threads of each task's run (default 1; None: the program's own setting).
    """
    if not isinstance(program, Program):
        raise TypeError(f"fj.dask.run takes a factorjit Program first, got {type(program).__qualname__}")
    if inputs is not None:
        arrays = {**inputs, **arrays}
    names = program.inputs
    missing = [n for n in names if n not in arrays]
    if missing:
        from .errors import MissingInputError
        raise MissingInputError(f"missing input{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}: "
                                f"the program reads {', '.join(names)}; given: {', '.join(arrays) or 'none'}")
    xs = [da.asarray(arrays[n]) for n in names]
    for n, x in zip(names, xs):
        if x.ndim != 2:
            raise ValueError(f"input '{n}': fj.dask.run takes 2-D arrays (rows = time, columns = instruments), "
                             f"got {x.ndim} dimensions")
        if x.dtype not in (np.float32, np.float64):
            raise TypeError(f"input '{n}': {x.dtype} arrays are not panels: factorjit computes on float32 or float64")
    shapes = {n: x.shape for n, x in zip(names, xs)}
    if len(set(shapes.values())) > 1:
        from .errors import InputError
        raise InputError("inputs of one run must have one shape: "
                         + ", ".join(f"'{n}' {s[0]} x {s[1]}" for n, s in shapes.items()))
    dtype = program.dtype or xs[0].dtype
    if program.dtype is None and len({x.dtype for x in xs}) > 1:
        raise TypeError("inputs of one run must have one dtype: "
                        + ", ".join(f"'{n}' {x.dtype}" for n, x in zip(names, xs)))
    if not names:
        raise ValueError("the program reads no input: there is nothing to chunk over")
    row_chunks = xs[0].chunks[0]
    xs = [x.rechunk((row_chunks, -1)) for x in xs]  # whole rows: row steps need them
    halo = program.halo
    bounds = np.concatenate([[0], np.cumsum(row_chunks)]).astype(int)

    token = tokenize(program._state, threads, halo, *[x.name for x in xs])
    run_name = "factorjit-run-" + token
    # The last min(rows, halo) rows of each block, as tasks of their own: a block's task depends on these
    # small slices of the blocks before it, so a worker fetches only the halo rows from another worker,
    # not whole blocks (as map_overlap's boundary slices do).
    tail_names = [f"factorjit-halo-{k}-{token}" for k in range(len(xs))]
    tail_rows = [min(int(r), halo) for r in row_chunks]
    layer = {}
    for k, x in enumerate(xs):
        for j, r in enumerate(row_chunks):
            if halo and j + 1 < len(row_chunks):
                layer[(tail_names[k], j)] = (getitem, (x.name, j, 0), (slice(int(r) - tail_rows[j], None), slice(None)))
    for i in range(len(row_chunks)):
        start = bounds[i]
        first_row = max(0, start - halo)
        first = int(np.searchsorted(bounds, first_row, side="right") - 1)  # the block holding first_row
        lead = int(start - first_row)
        skip = int(first_row - (bounds[first + 1] - tail_rows[first])) if lead else 0
        pieces = [[(tail_names[k], j) for j in range(first, i)] + [(x.name, i, 0)] for k, x in enumerate(xs)]
        layer[(run_name, i)] = (_run_block, program._state, threads, names, lead, skip, halo, *pieces)
    graph = HighLevelGraph.from_collections(run_name, layer, dependencies=xs)

    meta = da.utils.meta_from_array(xs[0], ndim=2, dtype=dtype)
    result = {}
    for out in program.outputs:
        name = f"factorjit-{out}-{token}"
        picks = {(name, i, 0): (_pick, (run_name, i), out) for i in range(len(row_chunks))}
        g = HighLevelGraph({**graph.layers, name: picks}, {**graph.dependencies, name: {run_name}})
        result[out] = da.Array(g, name, chunks=(row_chunks, (xs[0].shape[1],)), meta=meta)
    return result
