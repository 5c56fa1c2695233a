#!/usr/bin/env python3
"""Benchmarks of the Python module (bench/RESULTS.md, "Python module"):

  overhead  what a call through Python adds per run over Program::run called from C++ on the same panels
            (a C++ loop inside the module, _time_run): small panels, so the run itself is short.
            --device cpu (NumPy, CPU backend), cupy or torch (device-resident panels, CUDA backend).
  cupy-g1   the G1 case of bench_gpu (corr w=20, 50,000 x 50,000 float32; --rows/--cols 20000 for its --quick
            size) with CuPy arrays in and out: median time of p.run(A=a, B=b) and a wait for CuPy's stream, to
            set against bench_gpu's G1 figure.
  dask      fj.dask.run on a local cluster of 2 worker processes (1 thread each) against one process running
            the same program on 2 threads, 50,000 x 2,000 float32 by default; inputs already in memory on
            both sides (persisted on the workers), results left there.

    PYTHONPATH=build/python python3 bench/bench_python.py overhead [--device cpu|cupy|torch]
    PYTHONPATH=build/python python3 bench/bench_python.py cupy-g1
    PYTHONPATH=build/python python3 bench/bench_python.py dask [--rows 50000 --cols 2000 --chunk 5000]
"""

import argparse
import statistics
import time

import numpy as np

import factorjit as fj


def median_time(f, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def panel_tuples(arrays, device):
    """The (name, pointer, rows, cols, ld, f64, device) tuples _core takes, for C-order arrays."""
    out = []
    for name, a in arrays.items():
        if device == "torch":
            ptr = a.data_ptr()
        elif device == "cupy":
            ptr = a.data.ptr
        else:
            ptr = a.__array_interface__["data"][0]
        out.append((name, ptr, a.shape[0], a.shape[1], a.shape[1], str(a.dtype).endswith("float64"), device != "cpu"))
    return out


def overhead(args):
    rows, cols = args.rows, args.cols
    rng = np.random.default_rng(0)
    host = {"A": rng.standard_normal((rows, cols)).astype(np.float32),
            "B": rng.standard_normal((rows, cols)).astype(np.float32)}
    backend = "cpu" if args.device == "cpu" else "cuda"
    p = fj.compile({"c": "correlation(A, B, 20)"}, backend=backend, threads=1)
    # Device panels: the Python call enqueues on the caller's stream (Program::run_async) and returns; it is
    # timed with a synchronisation of that stream after each call, so that both sides finish the work per
    # call, as Program::run (which waits for its own stream) does in the C++ loop. The enqueue alone is printed too.
    if args.device == "cupy":
        import cupy
        arrays = {k: cupy.asarray(v) for k, v in host.items()}
        outputs = {"c": cupy.empty((rows, cols), np.float32)}
        sync = lambda: cupy.cuda.get_current_stream().synchronize()  # noqa: E731
    elif args.device == "torch":
        import torch
        arrays = {k: torch.from_numpy(v).cuda() for k, v in host.items()}
        outputs = {"c": torch.empty((rows, cols), dtype=torch.float32, device="cuda")}
        sync = lambda: torch.cuda.current_stream().synchronize()  # noqa: E731
    else:
        arrays, outputs, sync = host, {"c": np.empty((rows, cols), np.float32)}, lambda: None
    p.run(**arrays)
    sync()

    def python_call():
        p.run(**arrays)
        sync()

    ins, outs = panel_tuples(arrays, args.device), panel_tuples(outputs, args.device)
    rounds = []
    for _ in range(args.rounds):  # interleaved, so that drifts of the machine hit both alike
        cxx = statistics.median(p._core._time_run(ins, outs, args.repeat))
        py, _ = median_time(python_call, args.repeat)
        t0 = time.perf_counter()
        for _ in range(args.repeat):
            p.run(**arrays)
        enqueue = (time.perf_counter() - t0) / args.repeat
        sync()
        rounds.append((py, cxx, enqueue))
    py = statistics.median(r[0] for r in rounds)
    cxx = statistics.median(r[1] for r in rounds)
    enqueue = statistics.median(r[2] for r in rounds)
    print(f"overhead ({args.device}, {rows} x {cols} float32, corr w=20, {args.rounds} rounds of {args.repeat}): "
          f"Python run {py * 1e6:.1f} us, C++ Program::run {cxx * 1e6:.1f} us, added {(py - cxx) * 1e6:.1f} us"
          + (f"; the Python call alone, back to back without waiting: {enqueue * 1e6:.1f} us"
             if args.device != "cpu" else ""))


def cupy_g1(args):
    import cupy
    rows, cols = args.rows or 50000, args.cols or 50000  # bench_gpu's G1 (its --quick: 20,000 x 20,000)
    rng = cupy.random.default_rng(0)
    a = rng.standard_normal((rows, cols), dtype=cupy.float32).cumsum(axis=0)
    b = rng.standard_normal((rows, cols), dtype=cupy.float32)
    p = fj.compile({"c": "correlation(A, B, 20)"}, backend="cuda")
    stream = cupy.cuda.get_current_stream()

    def call():  # the run is enqueued on CuPy's stream: wait for it, as bench_gpu's timing of G1 does
        p.run(A=a, B=b)
        stream.synchronize()

    call()
    med, times = median_time(call, args.repeat)
    print(f"cupy-g1 (corr w=20, {rows} x {cols} float32, CuPy in and out): median {med * 1e3:.3f} ms, "
          f"min {min(times) * 1e3:.3f} ms over {args.repeat} runs")


def dask_vs_one_process(args):
    """The two sides alternate, run by run, so that the machine's drifts (other users' load) hit both alike."""
    import dask.array as da
    import distributed
    rows, cols, chunk = args.rows, args.cols, args.chunk
    formulas = {"c": "correlation(A, B, 20)"}
    rng = np.random.default_rng(0)
    A = rng.standard_normal((rows, cols), dtype=np.float32)
    B = rng.standard_normal((rows, cols), dtype=np.float32)
    p2 = fj.compile(formulas, backend="cpu", threads=2)  # one process, 2 threads
    p2.run(A=A[:1000], B=B[:1000])
    # 2 worker processes of 1 thread; each task runs the program on 1 thread.
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=40)
    client = distributed.Client(cluster)
    try:
        # The inputs in the workers' memory before timing, block i of A and of B on the same worker (sliced out
        # of one stacked block), as a loader reading both from storage per block would place them; placed
        # independently, half of the blocks' tasks would first fetch a 20 MB block from the other worker.
        ab = da.from_array(np.stack([A, B]), chunks=(2, chunk, cols))
        a, b = client.persist([ab[0], ab[1]])
        distributed.wait([a, b])
        del ab
        where = {str(k): v for k, v in client.who_has([a, b]).items()}  # keys as strings in some versions
        colocated = sum(where[str((a.name, i, 0))] == where[str((b.name, i, 0))] for i in range(len(a.chunks[0])))
        print(f"  blocks of A and B on the same worker: {colocated} of {len(a.chunks[0])}")
        p1 = fj.compile(formulas, backend="cpu")

        def scheduler_tasks():
            return client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))

        baseline = scheduler_tasks()

        def cpu_seconds():  # CPU time of the worker processes, the scheduler and this client process
            workers = sum(client.run(time.process_time).values())
            return workers + client.run_on_scheduler(time.process_time) + time.process_time()

        def dask_run():
            c0 = cpu_seconds()
            t0 = time.perf_counter()
            out = client.persist(list(fj.dask.run(p1, A=a, B=b).values()))
            distributed.wait(out)
            elapsed = time.perf_counter() - t0
            dsk_cpu.append(cpu_seconds() - c0)
            # The same graph has the same keys: the next run must not find these results still held.
            client.cancel(out)
            del out
            while scheduler_tasks() > baseline:
                time.sleep(0.01)
            return elapsed

        dsk_cpu, one_cpu = [], []
        dask_run()  # compiles on the workers
        dsk_cpu.clear()
        one_times, dsk_times = [], []
        for _ in range(args.repeat):
            c0 = time.process_time()
            one_times.append(median_time(lambda: p2.run(A=A, B=B), 1)[0])
            one_cpu.append(time.process_time() - c0)
            dsk_times.append(dask_run())
    finally:
        client.close()
        cluster.close()
    one, dsk = statistics.median(one_times), statistics.median(dsk_times)
    print(f"dask ({rows} x {cols} float32, corr w=20, blocks of {chunk} rows, {args.repeat} alternating runs): "
          f"2 worker processes median {dsk:.3f} s (min {min(dsk_times):.3f}), one process on 2 threads median "
          f"{one:.3f} s (min {min(one_times):.3f}): {dsk / one:.2f} x (mins: {min(dsk_times) / min(one_times):.2f} x)")
    # CPU seconds do not depend on how much of the cores other work leaves: they say whether Dask does more work.
    print(f"  CPU seconds a run: Dask {statistics.median(dsk_cpu):.3f} (workers, scheduler, client), "
          f"one process {statistics.median(one_cpu):.3f}")
    print("  runs, dask:", " ".join(f"{t:.3f}" for t in dsk_times))
    print("  runs, one process:", " ".join(f"{t:.3f}" for t in one_times))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["overhead", "cupy-g1", "dask"])
    ap.add_argument("--device", choices=["cpu", "cupy", "torch"], default="cpu")
    ap.add_argument("--rows", type=int)
    ap.add_argument("--cols", type=int)
    ap.add_argument("--chunk", type=int, default=5000)
    ap.add_argument("--repeat", type=int)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if args.what == "overhead":
        args.rows, args.cols, args.repeat = args.rows or 64, args.cols or 64, args.repeat or 200
        overhead(args)
    elif args.what == "cupy-g1":
        args.repeat = args.repeat or 20
        cupy_g1(args)
    else:
        args.rows, args.cols, args.repeat = args.rows or 50000, args.cols or 2000, args.repeat or 9
        dask_vs_one_process(args)


if __name__ == "__main__":
    main()
