"""The application of tests/runtime/test_ucx.py, run under mpiexec.

    python _ucx_app.py OUTDIR UCX [SNAPSHOTS]

Rank 0 sends rank 1, in region ``small``, 10 messages of 64 bytes (eager
under any UCX configuration); in ``large``, 3 of 800,000 bytes (rendezvous);
in ``post``, one more large one with Isend/Irecv, whose requests complete in
``wait``; in ``rma``, on a window all ranks allocate and free there, rank 0
puts 64 and 800,000 bytes into rank 1's memory and gets 64 back; in
``sync``, 2 Ssend of 64 bytes. Other ranks only take part in the window's
collectives and a final barrier. UCX: ``1`` Profiler(ucx=True), ``0`` mpi=True only.
SNAPSHOTS ``1``: every rank takes a snapshot (keep all) after ``large`` and
one before the barrier (no periodic one).
"""
import sys

import numpy as np
from mpi4py import MPI

import tinyprof

outdir, ucx, snapshots = sys.argv[1], sys.argv[2] == "1", sys.argv[3:] == ["1"]
prof = tinyprof.Profiler("ucx", 3600 if snapshots else 0, outdir=outdir, mpi=True, ucx=ucx,
                         keep="all")
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
small, large = np.ones(8), np.ones(100_000)


def exchange(region, buf, times, send=comm.Send):
    with tinyprof.Event(region):
        for _ in range(times):
            if rank == 0:
                send(buf, 1)
            elif rank == 1:
                comm.Recv(buf, 0)


exchange("small", small, 10)
exchange("large", large, 3)
if snapshots and not prof.snapshot(timeout=60):
    sys.exit("snapshot 1 did not complete")
req = None
with tinyprof.Event("post"):
    if rank == 0:
        req = comm.Isend(large, 1)
    elif rank == 1:
        req = comm.Irecv(large, 0)
with tinyprof.Event("wait"):
    if req is not None:
        req.Wait()
with tinyprof.Event("rma"):
    win = MPI.Win.Allocate(large.nbytes, comm=comm)
    win.Fence()
    if rank == 0:
        win.Put(small, 1)
        win.Put(large, 1)
    win.Fence()
    if rank == 0:
        win.Get(small, 1)
    win.Fence()
    win.Free()
exchange("sync", small, 2, comm.Ssend)
if snapshots and not prof.snapshot(timeout=60):
    sys.exit("snapshot 2 did not complete")
comm.Barrier()
