"""The application of tests/test_ucx.py, run under mpiexec.

    python _ucx_app.py OUTDIR UCX

Rank 0 sends rank 1, in region ``small``, 10 messages of 64 bytes (eager
under any UCX configuration); in ``large``, 3 of 800,000 bytes (rendezvous);
in ``post``, one more large one with Isend/Irecv, whose requests complete in
``wait``; in ``sync``, 2 Ssend of 64 bytes. Other ranks only take part in a
final barrier. UCX: ``1`` Profiler(ucx=True), ``0`` mpi=True only.
"""
import sys

import numpy as np
from mpi4py import MPI

import tinyprof

outdir, ucx = sys.argv[1], sys.argv[2] == "1"
tinyprof.Profiler("ucx", outdir=outdir, mpi=True, ucx=ucx)
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
small, large = np.ones(8), np.ones(100_000)
with tinyprof.Event("small"):
    for _ in range(10):
        if rank == 0:
            comm.Send(small, 1)
        elif rank == 1:
            comm.Recv(small, 0)
with tinyprof.Event("large"):
    for _ in range(3):
        if rank == 0:
            comm.Send(large, 1)
        elif rank == 1:
            comm.Recv(large, 0)
req = None
with tinyprof.Event("post"):
    if rank == 0:
        req = comm.Isend(large, 1)
    elif rank == 1:
        req = comm.Irecv(large, 0)
with tinyprof.Event("wait"):
    if req is not None:
        req.Wait()
with tinyprof.Event("sync"):
    for _ in range(2):
        if rank == 0:
            comm.Ssend(small, 1)
        elif rank == 1:
            comm.Recv(small, 0)
comm.Barrier()
