"""The cost of MPI capture (``Profiler(mpi=True)``, docs/mpi.md).

    .venv/bin/python benchmarks/mpi.py [--repeats 5] [--calls 100000] [--steps 2000]

1. Per MPI call: worker processes, capture off (``mpi=False``) and on,
   launched interleaved, one mpiexec each, time ``--calls`` small calls from
   mpi4py: ``Allreduce`` of one double and ``Sendrecv`` of 8 bytes, on
   COMM_SELF at 1 rank and on COMM_WORLD at 2 ranks (neighbour exchange).
   A worker's figure is the best of 5 batches (ns per call); the table gives
   the median over ``--repeats`` workers of each mode, and on - off.
2. Event enter+exit (``with Event("x"): pass``, nested in an open event),
   in the same workers: capture adds no work to events, so on - off is noise.
3. The demo (tinyprof/demo.py, ``--steps``) on 4 ranks with
   ``TINYPROF_MPI=0`` and ``=1``, interleaved; its own time figure (Profiler()
   to the end of the flush, slowest rank), median over ``--repeats``.

Prints Markdown tables (docs/performance.md, "MPI capture").
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from continuous import MPIEXEC, run_demo      # noqa: E402

BATCHES = 5


def worker(mode: str, calls: int) -> None:
    """Time the calls on this rank; rank 0 prints one JSON line."""
    import numpy as np
    from mpi4py import MPI

    import tinyprof
    comm = MPI.COMM_WORLD
    tinyprof.Profiler("bench", outdir=tempfile.mkdtemp(), mpi=mode == "on")
    over = MPI.COMM_SELF if comm.Get_size() == 1 else comm
    right, left = (over.Get_rank() + 1) % over.Get_size(), (over.Get_rank() - 1) % over.Get_size()
    x, y = np.ones(1), np.ones(1)

    def allreduce():
        for _ in range(calls):
            over.Allreduce(x, y)

    def sendrecv():
        for _ in range(calls):
            over.Sendrecv(x, dest=right, recvbuf=y, source=left)

    def events():
        ev = tinyprof.Event("x")
        for _ in range(calls):
            with ev:
                pass

    out: Dict[str, float] = {}
    with tinyprof.Event("bench"):
        for name, fn in (("Allreduce", allreduce), ("Sendrecv", sendrecv), ("Event", events)):
            best = float("inf")
            for _ in range(BATCHES):
                comm.Barrier()
                t = time.perf_counter_ns()
                fn()
                best = min(best, (time.perf_counter_ns() - t) / calls)
            out[name] = best
    if comm.Get_rank() == 0:
        print(json.dumps(out), flush=True)


def run_worker(ranks: int, mode: str, calls: int) -> Dict[str, float]:
    proc = subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, os.path.abspath(__file__),
                           "--worker", mode, "--calls", str(calls)],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise SystemExit(f"worker failed:\n{proc.stdout}{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def per_call(repeats: int, calls: int) -> None:
    print("| ranks | call | off (ns) | on (ns) | added (ns) |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for ranks in (1, 2):
        runs: Dict[str, List[Dict[str, float]]] = {"off": [], "on": []}
        for _ in range(repeats):
            for mode in runs:
                runs[mode].append(run_worker(ranks, mode, calls))
        for name in ("Allreduce", "Sendrecv", "Event"):
            off = statistics.median(r[name] for r in runs["off"])
            on = statistics.median(r[name] for r in runs["on"])
            label = "Event enter+exit" if name == "Event" else name
            print(f"| {ranks} | {label} | {off:.0f} | {on:.0f} | {on - off:+.0f} |")


def demo(repeats: int, steps: int) -> None:
    times: Dict[str, List[float]] = {"0": [], "1": []}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            for flag in times:
                env = {"TINYPROF_MPI": flag}
                times[flag].append(run_demo(4, steps, 0, env, os.path.join(tmp, flag))[0])
    off, on = statistics.median(times["0"]), statistics.median(times["1"])
    print("\n| demo, 4 ranks | capture off (s) | capture on (s) | on / off |")
    print("| --- | ---: | ---: | ---: |")
    print(f"| {steps} steps, median of {repeats} | {off:.3f} | {on:.3f} | {on / off:.3f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--calls", type=int, default=100_000)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--worker", choices=["on", "off"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.worker, args.calls)
        return
    per_call(args.repeats, args.calls)
    demo(args.repeats, args.steps)


if __name__ == "__main__":
    main()
