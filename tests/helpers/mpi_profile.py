"""The MPI converters' profile (tests/converters/test_mpi_convert.py): three
ranks recorded through the annotation API with a deterministic clock, written
as two files (ranks 0-1, rank 2; rank 2 never enters ``halo``), each with an
``mpi`` section encoded by the codec from the rows of :data:`CALLS`."""
from __future__ import annotations

from typing import List, Optional, Tuple

import tinyprof
from helpers.profiles import record_ranks, write_profile
from tinyprof import annotate
from tinyprof.format.mpi_section import NONE, Communicator, bucket, encode
from tinyprof.runtime import collect as _collect

impl = annotate.impl
Event = tinyprof.Event
Callpath = Tuple[str, ...]
MPI_NRANKS = 3
MAIN, HALO, SOLVE, REDUCE = ("main",), ("main", "halo"), ("main", "solve"), ("main", "solve", "reduce")
WORLD, SPLIT, SELF = "COMM_WORLD", "COMM_WORLD.split1@0", "COMM_SELF"


# (callpath, rank, comm, op, bytes per call, calls, time in ns)
CALLS = [
    ((), 0, WORLD, "Barrier", 0, 1, 500),
    ((), 1, WORLD, "Barrier", 0, 1, 700),
    ((), 2, WORLD, "Barrier", 0, 1, 900),
    (MAIN, 0, WORLD, "Comm_split", 0, 1, 2000),
    (MAIN, 1, WORLD, "Comm_split", 0, 1, 2100),
    (MAIN, 2, WORLD, "Comm_split", 0, 1, 2200),
    (HALO, 0, WORLD, "Sendrecv", 1024, 4, 40000),
    (HALO, 1, WORLD, "Sendrecv", 1500, 4, 50000),
    (HALO, 0, WORLD, "Isend", 100, 2, 600),
    (HALO, 0, "", "Waitall", 0, 2, 9000),
    (HALO, 1, "", "Waitall", 0, 3, 8000),
    (SOLVE, 0, SPLIT, "Bcast", 2048, 1, 3000),
    (SOLVE, 1, SPLIT, "Bcast", 2048, 1, 3500),
    (SOLVE, 2, SELF, "Bcast", 4, 1, 100),
    (REDUCE, 0, WORLD, "Allreduce", 8, 10, 30000),
    (REDUCE, 1, WORLD, "Allreduce", 8, 10, 31000),
    (REDUCE, 2, WORLD, "Allreduce", 8, 10, 32000),
    (REDUCE, 2, WORLD, "Allreduce", 16, 5, 16000),
]


# (comm, size, members, creating callpath or None)
COMMS = [(WORLD, 3, (0, 1, 2), None), (SELF, 1, (), None), (SPLIT, 2, (0, 1), MAIN),
         ("COMM_WORLD.split1@2", 1, (2,), MAIN)]


def _record_rank(rank: int, clock) -> List[_collect.LocalEvent]:
    with Event("main"):
        clock.tick(100)
        if rank < 2:
            with Event("halo"):
                clock.tick(10)
        with Event("solve"):
            with Event("reduce"):
                clock.tick(20)
    return _collect.collect(impl.root())


def _section(lines: List[Callpath], ranks: range) -> bytes:
    """The mpi section of the file holding ``ranks`` whose event lines are ``lines``."""
    def line(path: Callpath) -> int:
        return lines.index(path) if path else NONE
    comms = [Communicator(name, size, members, NONE if made is None else line(made))
             for name, size, members, made in COMMS if rank_knows(name, ranks)]
    index = {c.name: i for i, c in enumerate(comms)}
    index[""] = NONE
    ops = [(rank, line(path), index[comm], op, bucket(size), calls, calls * size, t)
           for path, rank, comm, op, size, calls, t in CALLS if rank in ranks]
    peers = [(0, line(HALO), index[WORLD], 1, 4, 4096), (0, line(HALO), index[WORLD], 2, 2, 200),
             (1, line(HALO), index[WORLD], 0, 4, 6000)] if 0 in ranks else []
    return encode(comms, ops, peers)


def rank_knows(comm: str, ranks: range) -> bool:
    members = next(m for name, _, m, _ in COMMS if name == comm)
    return not members or any(r in members for r in ranks)


def make_mpi_profile(outdir, clock, name: str = "mpiconv", mpi: bool = True,
                 section: Optional[bytes] = None) -> str:
    """Record the ranks serially; write them as two files, with mpi sections if ``mpi``
    (``section``: the payload of the first file's instead)."""
    prof = tinyprof.Profiler(name, outdir=outdir)
    ranks, executions = record_ranks(MPI_NRANKS, _record_rank, clock)

    def sections(index: int, lo: int, hi: int):
        lines = [e.path for e in ranks[lo]]        # the lowest rank of each file has all its lines
        payload = section if section is not None and index == 0 else _section(lines, range(lo, hi))
        return [("mpi", payload)] if mpi else []
    return write_profile(outdir, name, prof.metrics, ranks, executions, [(0, 2), (2, 3)], sections)
