"""The POP tests' profiles (tests/analysis/test_pop.py): ranks recorded
serially with a deterministic clock, whose MPI time is the barrier's wait, and
snapshots of a run whose imbalance grows step by step."""
from __future__ import annotations

import os
from typing import List, Sequence, Tuple

import tinyprof
from tinyprof.format import encoding as _format
from tinyprof.format import output_dir
from tinyprof.format.mpi_section import NONE, Communicator, bucket, encode
from tinyprof.runtime import assemble
from tinyprof.runtime import collect as _collect

Event = tinyprof.Event
Callpath = Tuple[str, ...]
WORLD = "COMM_WORLD"
NRANKS = 4
UNIT = 300_000_000                 # ns: r/3 of it is exact
RUN = "00000000000000cd"


def pop_section(lines: Sequence[Callpath], ranks: range, calls) -> bytes:
    """The mpi section of ranks ``ranks``: ``calls`` is (callpath, rank, op, ns)."""
    comms = [Communicator(WORLD, NRANKS, tuple(range(NRANKS)), NONE)]
    ops = [(rank, lines.index(path), 0, op, bucket(0), 1, 0, ns)
           for path, rank, op, ns in calls if rank in ranks]
    return encode(comms, ops, [])


def growing(rank: int, clock, upto: int) -> List[_collect.LocalEvent]:
    """Steps 0..upto-1 of a run whose imbalance grows: in step k rank r
    computes (1 + k r / 3) units, then waits in a barrier for the slowest."""
    with Event("main"):
        for k in range(upto):
            with Event("step", loop=1):
                with Event("compute"):
                    clock.tick(UNIT + k * rank * UNIT // 3)
                with Event("sync"):
                    clock.tick(k * (NRANKS - 1 - rank) * UNIT // 3)
        return _collect.collect(tinyprof.annotate.impl.root())      # main still open


def barrier_until(upto: int):
    """The cumulative MPI time of each rank's barriers after ``upto`` steps."""
    return [(("main", "step", "sync"), r, "Barrier",
             sum(k * (NRANKS - 1 - r) * UNIT // 3 for k in range(upto))) for r in range(NRANKS)]


def write_snapshot(outdir, k: int, ranks, executions, meta: bytes = b"", mpi: bool = True) -> None:
    lines = [e.path for e in ranks[0]]
    header = _format.Header(name="g", nranks=NRANKS, first_rank=0, rank_count=NRANKS, run=RUN,
                            set_kind="snapshot", set_number=k,
                            created=f"2026-11-26T10:00:0{k}Z")
    data = assemble.build_file(header, ranks, executions, sections=[
        ("mpi", pop_section(lines, range(NRANKS), barrier_until(k)))] * mpi + [("meta", meta)] * bool(meta))
    directory = output_dir.snapshot_dir(str(outdir), k)
    os.makedirs(directory, exist_ok=True)
    assert output_dir.write_file(directory, output_dir.set_file(directory, "g", 0, 1), data) is None
