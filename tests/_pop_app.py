"""The application of the POP tests (tests/analysis/test_pop.py), under mpiexec:

    python _pop_app.py OUTDIR MODE UNIT

Rank r of P computes (1 + r/(P-1)) UNIT seconds (a sleep: wall time, as
the profile measures it), then meets the others in a barrier. MODE
``balance``: once, in ``main<compute`` then ``main<sync``. MODE ``growing``:
4 steps ``main<step``; in step k rank r computes (1 + k r/(P-1)) UNIT, and
every rank takes a snapshot after each step (kept: keep="all"), so the
imbalance grows from one snapshot interval to the next. Traced
(trace=True): MODE ``pipeline``: a token goes from rank 0 to P-1, each
rank computing UNIT seconds with it (pure serialization); MODE
``transfer``: every rank computes UNIT seconds, then sends 16 MB to its
right neighbour and receives as much from its left one, 8 times (pure transfer).
MODE ``one``: rank P-1 alone computes 3 UNIT in ``main<source`` while the
others wait for it in ``main<sync`` (a barrier): the run's whole imbalance.
"""
import sys
import time

import numpy as np
from mpi4py import MPI

import tinyprof

outdir, mode, unit = sys.argv[1], sys.argv[2], float(sys.argv[3])
comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
prof = tinyprof.Profiler("pop", frequency=3600, outdir=outdir, mpi=True, keep="all",
                         trace=mode in ("pipeline", "transfer"))
share = rank / (size - 1) if size > 1 else 0.0


def compute_then_sync(units: float) -> None:
    with tinyprof.Event("compute"):
        time.sleep(unit * units)
    with tinyprof.Event("sync"):
        comm.Barrier()


out, got = (np.ones(2 << 20), np.empty(2 << 20)) if mode == "transfer" else (None, None)  # 16 MB
comm.Barrier()                  # outside every event: the ranks start main together
with tinyprof.Event("main"):
    if mode == "balance":
        compute_then_sync(1 + share)
    elif mode == "pipeline":
        token = np.zeros(1)
        if rank:
            comm.Recv(token, source=rank - 1)
        with tinyprof.Event("compute"):
            time.sleep(unit)
        if rank < size - 1:
            comm.Send(token, dest=rank + 1)
    elif mode == "transfer":
        got[:] = 0              # touched: no page faults in the exchange
        with tinyprof.Event("compute"):
            time.sleep(unit)
        with tinyprof.Event("exchange"):
            for _ in range(8):
                comm.Sendrecv(out, dest=(rank + 1) % size, recvbuf=got, source=(rank - 1) % size)
    elif mode == "one":
        if rank == size - 1:
            with tinyprof.Event("source"):
                time.sleep(3 * unit)
        with tinyprof.Event("sync"):
            comm.Barrier()
    else:
        for k in range(4):
            with tinyprof.Event("step", loop=1):
                compute_then_sync(1 + k * share)
            if not prof.snapshot(timeout=120):
                print(f"rank {rank}: snapshot {k + 1} did not end", flush=True)
                sys.exit(3)
tinyprof.flush()
