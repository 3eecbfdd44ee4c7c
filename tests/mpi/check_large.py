"""Flush the test workload once per aggregator count and check each profile.

    mpiexec -n P python tests/mpi/check_large.py OUTDIR [A,A,...]

Without a list, every A from 1 to P, then the default (no ``aggregators``),
then a wrong ``is_common`` hint. Rank 0 prints ``ok`` or the differences;
the exit status is 1 on any difference. Run by tests/runtime/test_mpi_large.py at
sizes too big for a pytest process per rank.
"""
from __future__ import annotations

import os
import sys

from _workload import SELFKEYS, all_errors, record, snapshot, verify
from mpi4py import MPI

import tinyprof
from tinyprof.runtime import session


def main() -> int:
    comm = MPI.COMM_WORLD
    size = comm.Get_size()
    outdir = sys.argv[1]
    counts = [int(a) for a in sys.argv[2].split(",")] if len(sys.argv) > 2 else range(1, size + 1)
    record(comm)
    mine = snapshot()
    errors = []
    for naggs in [*counts, None]:
        tinyprof.Profiler("wl", selfkeys=SELFKEYS, outdir=outdir, aggregators=naggs)
        tinyprof.flush()
        errors += [f"A={naggs}: {e}" for e in
                   verify(comm, outdir, mine, naggs or max(1, size // 16))]
    record(comm, wrong_hint=True)
    hint = os.path.join(outdir, "hint")
    tinyprof.Profiler("wl", selfkeys=SELFKEYS, outdir=hint, aggregators=3)
    tinyprof.flush()
    errors += [f"wrong hint: {e}" for e in verify(comm, hint, snapshot(), 3)]
    if session.current().last_flush.sync_path != "full":
        errors.append(f"wrong hint: phase 1 took the {session.current().last_flush.sync_path!r} path")
    errors = all_errors(comm, errors)
    if comm.Get_rank() == 0:
        print("\n".join(errors) or f"ok: {size} ranks, A in {list(counts)} and default")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
