"""Trace mode in C++: the header's block encoder against the Python
reference on random rows, and a real traced MPI program with known
imbalance, read back and analysed by the Python side (docs/trace.md)."""
from __future__ import annotations

import random
import subprocess

import numpy as np
import pytest
from helpers import trace_checks
from helpers.mpi_capture import LIB
from helpers.native import run

import tinyprof
from tinyprof.format.trace_section import NONE, encode, make_block

OPS = ["Send", "Recv", "Allreduce", "Waitall", "Bcast"]


def random_block(rng: random.Random):
    tids = rng.sample([7, 9, 11, 40000, 123456], rng.randint(1, 3))
    times = [0, 1, 5, 2**40, 2**62]

    def t() -> int:
        return rng.choice(times + [rng.randint(0, 100)])     # ties on purpose
    events = [(rng.choice(tids), rng.randint(0, 9), t(), rng.choice([0, 1, 3, 2**33]))
              for _ in range(rng.randint(0, 25))]
    ncomms = rng.randint(1, 4)
    comms = rng.sample(["COMM_WORLD", "COMM_WORLD.dup1", "comm4@2", "COMM_SELF", "X.split3@1"],
                       ncomms)
    calls = [(rng.choice(tids), rng.choice([NONE, rng.randint(0, 9)]), t(), rng.choice([0, 2, 9]),
              rng.choice([NONE, rng.randrange(ncomms)]), rng.choice([0, 8, 2**40]),
              rng.choice([NONE, rng.randint(0, 7)])) for _ in range(rng.randint(0, 15))]
    ops = [rng.choice(OPS) for _ in calls]
    eps = [(rng.randrange(len(calls)), rng.randint(0, 1), rng.randint(0, 7), rng.randint(0, 2**31),
            rng.choice([0, 8, 2**33]), rng.randrange(ncomms))
           for _ in range(rng.randint(0, 10) if calls else 0)]
    clock = (rng.randint(0, 2**50), rng.randint(-10**9, 10**9), rng.randint(0, 2**50),
             rng.randint(-10**9, 10**9), rng.randint(0, 10**6))
    return rng.randint(0, 100), clock, events, calls, ops, eps, comms, (rng.randint(0, 5),
                                                                       rng.randint(0, 5))


def driver_input(rank, clock, events, calls, ops, eps, comms, dropped) -> str:
    def f(v) -> str:
        return "-" if v == NONE else str(v)
    lines = [f"rank {rank} {' '.join(map(str, clock))} {dropped[0]} {dropped[1]}"]
    lines += [f"comm {c}" for c in comms]
    lines += ["ev " + " ".join(map(str, e)) for e in events]
    lines += [f"call {c[0]} {f(c[1])} {c[2]} {c[3]} {op} {f(c[4])} {c[5]} {f(c[6])}"
              for c, op in zip(calls, ops)]
    lines += ["ep " + " ".join(map(str, e)) for e in eps]
    return "".join(line + "\n" for line in lines)


def test_block_encoder_matches_the_python_codec(build):
    exe = build("tests/native/trace_encode.cpp")
    rng = random.Random(13)
    for case in range(40):
        rank, clock, events, calls, ops, eps, comms, dropped = random_block(rng)
        expected = encode([make_block(rank, clock, np.array(events, np.int64).reshape(-1, 4),
                                      np.array(calls, np.int64).reshape(-1, 7), ops,
                                      np.array(eps, np.int64).reshape(-1, 6), comms, dropped)])
        got = subprocess.run([str(exe)], input=driver_input(rank, clock, events, calls, ops, eps,
                                                            comms, dropped).encode(),
                             capture_output=True, check=True, timeout=30).stdout
        assert got == expected, f"case {case}"


@pytest.fixture(scope="module")
def traced(build, tmp_path_factory):
    """The traced program on 3 ranks with libtinyprof_mpi preloaded."""
    out = tmp_path_factory.mktemp("cxx-trace") / "prof"
    run(["env", f"LD_PRELOAD={LIB}", build("tests/native/traced.cpp"), out], nranks=3,
        TINYPROF_TRACE="1", TINYPROF_MPI="1")
    return tinyprof.read(str(out))


def test_cxx_trace_reads_back_with_calls_and_messages(traced):
    trace = traced.trace
    ops = np.array(trace.ops)[trace.calls["op"]]
    for rank in range(3):
        mine = trace.calls["rank"] == rank
        assert list(ops[mine]) == ["Allreduce"] * 3 + (["Recv"] if rank else []) + \
            (["Send"] if rank < 2 else [])
        events = trace.ev["rank"] == rank
        assert np.sum(events) == 1 + 3 * 2 + 1 + (rank > 0) + (rank < 2)
    msgs = sorted(zip(trace.msgs["src"].tolist(), trace.msgs["dst"].tolist(),
                      trace.msgs["tag"].tolist()))
    assert msgs == [(0, 1, 7), (1, 2, 7)]
    # every call inside an occurrence of the event it names, on its rank
    for i in range(len(ops)):
        r, p = trace.calls["rank"][i], trace.calls["path"][i]
        inside = (trace.ev["rank"] == r) & (trace.ev["path"] == p) & \
            (trace.ev["start"] <= trace.calls["start"][i]) & (trace.ev["end"] >= trace.calls["end"][i])
        assert inside.any()


def test_cxx_trace_critical_path_and_wait_states(traced):
    """Checked against the run's own records, whatever the load: the waits
    are what the records say, the path crosses at each Allreduce to the rank
    that arrived last, and visits the token's work in rank order."""
    assert trace_checks.check(traced) == []
    assert trace_checks.ranks_on_path(traced, ("main", "solve")) == \
        trace_checks.last_arrivals(traced.trace)
    work = trace_checks.ranks_on_path(traced, ("main", "work"))
    assert work and work == sorted(set(work))
