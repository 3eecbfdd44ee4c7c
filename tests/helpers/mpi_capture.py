"""MPI capture in C++ (tests/native/test_mpi_capture.py and the tests that run
its program): random `mpi` sections for the codec drivers, and the exact
traffic of tests/native/mpi_capture.cpp in a profile."""
from __future__ import annotations

import random
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import tinyprof
from tinyprof.format import mpi_section, reader
from tinyprof.format.mpi_section import NONE, Communicator

LIB = Path(tinyprof.__file__).parent / "libtinyprof_mpi.so"

# -- the codec: byte identity with tinyprof.format.mpi_section.encode ------------------

NAME_CHARS = "ABCabcz019_.@"


def random_members(rng: random.Random) -> Tuple[int, ...]:
    """World ranks with runs of step 1, strides, repeats, descents and singles."""
    out: List[int] = []
    for _ in range(rng.randint(1, 5)):
        start, step = rng.randint(0, 40), rng.choice([1, 1, 2, 3, 7, 0, -1])
        out += [max(0, start + step * k) for k in range(rng.randint(1, 5))]
    return tuple(out)


def random_section(rng: random.Random):
    names = {"COMM_WORLD", "COMM_SELF"} | {"".join(rng.choices(NAME_CHARS, k=rng.randint(1, 12)))
                                          for _ in range(rng.randint(0, 8))}
    comms = []
    for name in rng.sample(sorted(names), len(names)):     # unsorted input
        members = () if rng.random() < 0.2 else random_members(rng)
        comms.append(Communicator(name, len(members) or 1, members,
                                  rng.choice([NONE, rng.randint(0, 30)])))
    def comm() -> int:
        return rng.choice([NONE, rng.randrange(len(comms))])
    def line() -> int:
        return rng.choice([NONE, rng.randint(0, 20)])
    big = [0, 1, 2**31, 2**62 + 5]
    ops = {}
    for _ in range(rng.randint(0, 30)):
        key = (rng.randint(0, 5), line(), comm(), rng.choice(["Send", "Isend", "Allreduce", "Waitall",
                                                              "Comm_split", "Bcast", "Z_op"]),
               rng.randint(0, 64))
        ops[key] = (rng.randint(1, 9), rng.choice(big + [rng.randint(0, 10**6)]), rng.choice(big))
    peers = {}
    for _ in range(rng.randint(0, 30)):
        peers[(rng.randint(0, 5), line(), comm(), rng.randint(0, 40))] = (rng.randint(1, 9), rng.choice(big))
    return (comms, [(*k, *v) for k, v in rng.sample(sorted(ops.items(), key=repr), len(ops))],
            [(*k, *v) for k, v in rng.sample(sorted(peers.items()), len(peers))])


def driver_input(comms, ops, peers) -> str:
    def f(v) -> str:
        return "-" if v == NONE else str(v)
    lines = [f"comm {c.name} {c.size} {f(c.created)} {','.join(map(str, c.members)) or '-'}" for c in comms]
    lines += ["op " + " ".join(map(f, r)) for r in ops]
    lines += ["peer " + " ".join(map(f, r)) for r in peers]
    return "".join(line + "\n" for line in lines)


ITERATIONS = 3      # mpi_capture.cpp's kIterations
MAIN, SETUP, HALO, REDUCE = ("main",), ("main", "setup"), ("main", "halo"), ("main", "reduce")
Key = Tuple[object, object, str, int]          # (callpath or None, comm name or None, op, bucket)


def linked(build, source: str) -> Path:
    """``source`` built and linked with libtinyprof_mpi (skips without it)."""
    if not LIB.exists():
        pytest.skip(f"no {LIB} (built by setup.py with the environment's mpicc)")
    return build(source, f"-L{LIB.parent}", "-ltinyprof_mpi", f"-Wl,-rpath,{LIB.parent}")


def expected(nranks: int, rank: int):
    """mpi_capture.cpp's communicators, op rows and peer rows on `rank`, by names."""
    half = list(range(rank % 2, nranks, 2))
    half_name = "COMM_WORLD.split1" + (f"@{half[0]}" if len(half) < nranks else "")
    comms = {"COMM_WORLD": list(range(nranks)), "COMM_SELF": [], half_name: half,
             half_name + ".dup1": half, "COMM_WORLD.dup2": list(range(nranks))}
    n = 2 * ITERATIONS
    b = mpi_section.bucket
    ops: Dict[Key, Tuple[int, int]] = {
        (SETUP, "COMM_WORLD", "Comm_split", 0): (1, 0),
        (SETUP, half_name, "Comm_dup", 0): (1, 0),
        (SETUP, "COMM_WORLD", "Comm_dup", 0): (1, 0),
        (HALO, "COMM_WORLD", "Sendrecv", b(128)): (n, n * 128),
        (HALO, half_name + ".dup1", "Isend", b(20)): (n, n * 20),
        (HALO, half_name + ".dup1", "Irecv", b(20)): (n, n * 20),
        (HALO, None, "Waitall", 0): (n, 0),
        (REDUCE, half_name, "Allreduce", b(8)): (n, n * 8),
        (REDUCE, "COMM_WORLD", "Bcast", b(12)): (ITERATIONS, ITERATIONS * 12),
        (REDUCE, "COMM_WORLD.dup2", "Bcast", b(12)): (ITERATIONS, ITERATIONS * 12),
        (None, "COMM_WORLD", "Barrier", 0): (1, 0),
    }
    right = half[(half.index(rank) + 1) % len(half)]
    peers = {(HALO, "COMM_WORLD", (rank + 1) % nranks): (n, n * 128),
             (HALO, half_name + ".dup1", right): (n, n * 20)}
    return comms, ops, peers


def read_section(outdir: Path):
    """Every file's parsed section with line indices replaced by callpaths."""
    files = sorted(outdir.glob("mpicap.*.tp"))
    assert files
    out = []
    for path in files:
        parsed = reader.parse_file(str(path))
        h = parsed.header
        section = mpi_section.parse(parsed.sections["mpi"], str(path), 1, len(parsed.lines),
                                    h.first_rank, h.rank_count, h.nranks)
        paths = list(parsed.events)
        out.append((h, section, lambda line, paths=paths: None if line == NONE else paths[line]))
    return out


def check_run(outdir: Path, nranks: int, aggregators: int) -> None:
    """Exact communicators, op rows and peer rows of mpi_capture.cpp's profile."""
    files = read_section(outdir)
    assert len(files) == aggregators
    described: Dict[str, Communicator] = {}
    for h, section, callpath in files:
        ranks = range(h.first_rank, h.first_rank + h.rank_count)
        known = {}
        for r in ranks:
            known.update(expected(nranks, r)[0])
        # every communicator the file's ranks made, named alike everywhere; no private one
        assert sorted(c.name for c in section.comms) == sorted(known)
        for c in section.comms:
            members = known[c.name]
            assert (c.size, list(c.members)) == (max(1, len(members)), members), c
            made_here = c.name not in ("COMM_WORLD", "COMM_SELF")
            assert callpath(c.created) == (SETUP if made_here else None), c
            assert described.setdefault(c.name, c) == c        # alike in every file
        names = [c.name for c in section.comms]
        comm = lambda i: None if i == NONE else names[i]
        ops = {}
        for r, line, c, op, bucket, calls, nbytes, _time in section.ops:
            ops[(r, callpath(line), comm(c), op, bucket)] = (calls, nbytes)
        peers = {(r, callpath(line), comm(c), peer): (m, nbytes)
                 for r, line, c, peer, m, nbytes in section.peers}
        want_ops, want_peers = {}, {}
        for r in ranks:
            _, o, p = expected(nranks, r)
            want_ops.update({(r, *k): v for k, v in o.items()})
            want_peers.update({(r, *k): v for k, v in p.items()})
        # exact: the header's Bcast, Allreduce, Allgather, Split and Gather are absent
        assert ops == want_ops
        assert peers == want_peers
