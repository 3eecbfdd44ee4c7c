"""Exact MPI counts under whatever MPI mpi4py runs: ``mpiexec -n N python
tests/mpi/exact_counts.py OUTDIR`` (``make test-other-mpis``; at least 2 ranks).

Sendrecv, Allreduce and Bcast with known counts and sizes, recorded with
``Profiler(mpi=True)`` and read back: every rank's calls and bytes and the
point-to-point matrix must be exactly what the script did. Rank 0 prints one
line (the MPI, what was checked); the exit status is 1 on any difference,
or when capture did not start.
"""
from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import tinyprof

SENDRECV, ALLREDUCE, BCAST = (5, 100, np.float64), (3, 4, np.float64), (2, 16, np.int32)


def main(outdir: str) -> int:
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    prof = tinyprof.Profiler("counts", outdir=outdir, mpi=True)
    started = prof.session.capture is not None
    with tinyprof.Event("main"):
        calls, n, dtype = SENDRECV
        out = np.empty(n, dtype)
        for _ in range(calls):
            world.Sendrecv(np.full(n, rank, dtype), dest=(rank + 1) % size, recvbuf=out, source=(rank - 1) % size)
        calls, n, dtype = ALLREDUCE
        for _ in range(calls):
            world.Allreduce(MPI.IN_PLACE, np.ones(n, dtype))
        calls, n, dtype = BCAST
        for _ in range(calls):
            world.Bcast(np.zeros(n, dtype), root=0)
    tinyprof.flush()
    if rank != 0:
        return 0
    profile = tinyprof.read(outdir)
    rows = {(r.rank, r.op): (r.calls, r.bytes) for r in profile.mpi.itertuples()
            if r.callpath == ("main",) and r.comm == "COMM_WORLD"}
    want = {(r, op): (calls, calls * n * np.dtype(dtype).itemsize) for r in range(size)
            for op, (calls, n, dtype) in (("Sendrecv", SENDRECV), ("Allreduce", ALLREDUCE), ("Bcast", BCAST))}
    errors = [] if started else ["MPI capture did not start"]
    errors += [f"rank {r} {op}: (calls, bytes) {rows.get((r, op))}, expected {w}"
               for (r, op), w in want.items() if rows.get((r, op)) != w]
    matrix = profile.comm_matrix(callpath=("main",))
    expected = np.zeros((size, size), np.int64)
    for r in range(size):
        expected[r, (r + 1) % size] += want[(r, "Sendrecv")][1]
    if not (matrix == expected).all():
        errors.append(f"matrix {matrix.tolist()}, expected {expected.tolist()}")
    vendor = " ".join(MPI.Get_library_version().split("\n")[0].split(",")[0].split())
    checked = ", ".join(f"{op} {want[(0, op)][0]} calls {want[(0, op)][1]} B" for op in ("Sendrecv", "Allreduce", "Bcast"))
    print(f"{vendor}, {size} ranks: {'EXACT' if not errors else 'WRONG'}: per rank {checked}, and the matrix")
    for e in errors:
        print(f"  {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
