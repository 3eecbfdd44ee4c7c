"""The application of the compare gate test (tests/analysis/test_compare.py), under mpiexec:

    python _compare_app.py OUTDIR SLOW

Each of 3 steps: every rank computes 0.2 s and solves 0.2 * SLOW s (sleeps:
wall time, as the profile measures it, so the ratio holds on a loaded
machine), then meets the others in a barrier (``sync``: waits only, in
MPI: recorded with mpi=True, so compare sets them apart; with sites=True, on
a callpath of the line that called Barrier, below ``sync``).
"""
import sys
import time

from mpi4py import MPI

import tinyprof

outdir, slow = sys.argv[1], float(sys.argv[2])
comm = MPI.COMM_WORLD
tinyprof.Profiler("gate", outdir=outdir, mpi=True, sites=True)   # the barrier: time in MPI, at its line
comm.Barrier()                  # outside every event: the ranks start main together
with tinyprof.Event("main"):
    for _ in range(3):
        with tinyprof.Event("compute"):
            time.sleep(0.2)
        with tinyprof.Event("solve"):
            time.sleep(0.2 * slow)
        with tinyprof.Event("sync"):
            comm.Barrier()
tinyprof.flush()
