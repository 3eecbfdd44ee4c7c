"""The cost of MPI capture (``Profiler(mpi=True)``, docs/mpi.md).

    .venv/bin/python benchmarks/mpi.py [--repeats 5] [--blocks 200] [--calls 2000] [--steps 2000]

1. Per MPI call: a worker (mpiexec, 1 rank on COMM_SELF, then 2 ranks on
   COMM_WORLD, a neighbour exchange) starts ``Profiler(mpi=True)`` and times
   ``--blocks`` pairs of blocks of ``--calls`` small calls from mpi4py,
   recording off, on, then on with trace mode (``tinyprof_mpi_trace``, the
   trace emptied before each block), side by side in one process:
   ``Allreduce`` of one double and ``Sendrecv`` of 8 bytes. A triple gives
   on - off and traced - on per call; the table gives the medians. "Off" has the
   library in mpi4py's path with recording off (its wrappers then cost one
   branch: ~3 ns in a C program, see docs/performance.md).
2. Event enter+exit (``with Event("x"): pass``), nested in an open event,
   the same way: capture adds no work to events, so on - off is noise.
3. The demo (tinyprof/demo.py, ``--steps``) on 4 ranks with
   ``TINYPROF_MPI=0`` and ``=1``, interleaved, ``--repeats`` runs each: its
   own time figure (Profiler() to the end of the flush, slowest rank), median.

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

CASES = ("Allreduce", "Sendrecv", "Event")


def worker(blocks: int, calls: int) -> None:
    """Time the cases on this rank, recording off, on and traced by turns;
    rank 0 prints one JSON line: per case, (median off ns/call, median of
    on - off, median of traced - on)."""
    import numpy as np
    from mpi4py import MPI

    import tinyprof
    comm = MPI.COMM_WORLD
    lib = tinyprof.Profiler("bench", outdir=tempfile.mkdtemp(), mpi=True).session.capture.lib
    over = MPI.COMM_SELF if comm.Get_size() == 1 else comm
    right, left = (over.Get_rank() + 1) % over.Get_size(), (over.Get_rank() - 1) % over.Get_size()
    x, y = np.ones(1), np.ones(1)
    ev = tinyprof.Event("x")

    def block(case: str) -> float:
        t = time.perf_counter_ns()
        if case == "Allreduce":
            for _ in range(calls):
                over.Allreduce(x, y)
        elif case == "Sendrecv":
            for _ in range(calls):
                over.Sendrecv(x, dest=right, recvbuf=y, source=left)
        else:
            for _ in range(calls):
                with ev:
                    pass
        return (time.perf_counter_ns() - t) / calls

    out: Dict[str, List[float]] = {}
    with tinyprof.Event("bench"):
        for case in CASES:
            offs, diffs, traced = [], [], []
            for _ in range(blocks):
                lib.tinyprof_mpi_enable(0)
                off = block(case)
                lib.tinyprof_mpi_enable(1)
                on = block(case)
                lib.tinyprof_mpi_reset()
                lib.tinyprof_mpi_trace(calls)
                traced.append(block(case) - on)
                lib.tinyprof_mpi_trace(0)
                diffs.append(on - off)
                offs.append(off)
            out[case] = [statistics.median(offs), statistics.median(diffs),
                         statistics.median(traced)]
    lib.tinyprof_mpi_enable(0)
    if comm.Get_rank() == 0:
        print(json.dumps(out), flush=True)


def per_call(blocks: int, calls: int) -> None:
    print("| ranks | call | off (ns) | added by recording (ns) | added by trace mode (ns) |")
    print("| ---: | --- | ---: | ---: | ---: |")
    for ranks in (1, 2):
        proc = subprocess.run([MPIEXEC, "-n", str(ranks), sys.executable, os.path.abspath(__file__),
                               "--worker", "--blocks", str(blocks), "--calls", str(calls)],
                              capture_output=True, text=True, timeout=1200)
        if proc.returncode:
            raise SystemExit(f"worker failed:\n{proc.stdout}{proc.stderr}")
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        for case in CASES:
            off, added, traced = got[case]
            label = "Event enter+exit" if case == "Event" else case
            print(f"| {ranks} | {label} | {off:.0f} | {added:+.1f} | {traced:+.1f} |")


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
    p.add_argument("--blocks", type=int, default=200)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--no-demo", action="store_true", help="per-call figures only")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        worker(args.blocks, args.calls)
        return
    per_call(args.blocks, args.calls)
    if not args.no_demo:
        demo(args.repeats, args.steps)


if __name__ == "__main__":
    main()
