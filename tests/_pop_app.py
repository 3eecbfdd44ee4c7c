"""The application of the POP tests (tests/analysis/test_pop.py), under mpiexec:

    python _pop_app.py OUTDIR MODE UNIT

Rank r of P computes (1 + r/(P-1)) UNIT seconds (a sleep: wall time, as
the profile measures it), then meets the others in a barrier. MODE
``balance``: once, in ``main<compute`` then ``main<sync``. MODE ``growing``:
4 steps ``main<step``; in step k rank r computes (1 + k r/(P-1)) UNIT, and
every rank takes a snapshot after each step (kept: keep="all"), so the
imbalance grows from one snapshot interval to the next.
"""
import sys
import time

from mpi4py import MPI

import tinyprof

outdir, mode, unit = sys.argv[1], sys.argv[2], float(sys.argv[3])
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
prof = tinyprof.Profiler("pop", frequency=3600, outdir=outdir, mpi=True, keep="all")
share = rank / (size - 1) if size > 1 else 0.0


def compute_then_sync(units: float) -> None:
    with tinyprof.Event("compute"):
        time.sleep(unit * units)
    with tinyprof.Event("sync"):
        comm.Barrier()


with tinyprof.Event("main"):
    if mode == "balance":
        compute_then_sync(1 + share)
    else:
        for k in range(4):
            with tinyprof.Event("step", loop=1):
                compute_then_sync(1 + k * share)
            if not prof.snapshot(timeout=120):
                print(f"rank {rank}: snapshot {k + 1} did not end", flush=True)
                sys.exit(3)
tinyprof.flush()
