"""The C reader of an mpi section's ops and peers rows (``_parse.mpi_rows``)
against the pure-Python reference (``mpi_section._reference_rows``): the same
payloads accepted, the same rows read.

- random canonical sections from the writer, rows of every kind;
- mutated copies of them, byte by byte;
- ops rows from the corners of the rules: numbers at 2**63, buckets 0 and 64,
  leading zeros, 64-letter operation names, completion calls, equal keys;
- random row text from the grammar's alphabet (hypothesis).
"""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_mpisection import corrupted

from tinyprof.errors import FormatError
from tinyprof.format import mpi_section
from tinyprof.format.mpi_section import NONE, Communicator, bucket, encode
from tinyprof.format.reader import _parse

pytestmark = pytest.mark.skipif(_parse is None, reason="tinyprof.format._parse not built")
NLINES, FIRST, COUNT, NRANKS = 12, 4, 3, 16
OPS = ["Allreduce", "Barrier", "Bcast", "Isend", "Irecv", "Send", "Recv", "Waitall", "Test", "Wait_x"]


def outcome(payload: bytes, parser: str):
    try:
        return "ok", mpi_section.parse(payload, "f.tp", 1, NLINES, FIRST, COUNT, NRANKS, parser)
    except FormatError:
        return "error", None


def same(payload: bytes) -> str:
    c, python = outcome(payload, "c"), outcome(payload, "python")
    assert c[0] == python[0], f"C says {c[0]}, Python says {python[0]} for {payload!r}"
    assert c[1] == python[1], f"C and Python read different rows of {payload!r}"
    return c[0]


def random_section(rng: random.Random) -> bytes:
    comms = [Communicator("COMM_WORLD", NRANKS, tuple(range(NRANKS)), NONE),
             Communicator("COMM_SELF", 1, (), NONE)][:rng.randint(0, 2)]
    ops, peers = {}, {}
    for _ in range(rng.randint(0, 40)):
        rank, line = FIRST + rng.randrange(COUNT), rng.choice([NONE, *range(NLINES)])
        op = rng.choice(OPS)
        comm = NONE if op.startswith(("Wait", "Test")) or not comms else rng.choice([NONE, *range(len(comms))])
        size, calls = rng.choice([0, 1, 7, 4096, 2**40, 2**62 - 1]), rng.choice([1, 3, 1000])
        if calls * size < 2**63:        # bytes fit the file's naturals, and so the size's bucket
            ops[(rank, line, comm, op, bucket(size))] = (calls, calls * size, rng.choice([0, 5, 2**63 - 1]))
        peers[(rank, line, comm, rng.randrange(NRANKS))] = (rng.randint(1, 9), rng.choice([0, 100, 2**63 - 1]))
    return encode(comms, [(*key, *value) for key, value in ops.items()],
                  [(*key, *value) for key, value in peers.items()])


def test_random_sections_read_the_same_in_c():
    rng = random.Random(7)
    for _ in range(300):
        payload = random_section(rng)
        assert same(payload) == "ok"
        start = payload.index(b"ops ")
        assert _parse.mpi_rows(payload, start, 2, NLINES, FIRST, COUNT, NRANKS) is not None


def test_mutated_sections_are_judged_the_same():
    rng = random.Random(11)
    corpus = [random_section(rng) for _ in range(40)]
    seen = {"ok": 0, "error": 0}
    for _ in range(3000):
        seen[same(corrupted(rng, rng.choice(corpus), 3))] += 1
    assert seen["ok"] > 50 and seen["error"] > 1000, seen       # both outcomes exercised


CORNERS = [
    "4|||Waitall|0|2|0|55", "4|0||Send|64|1|9223372036854775807|0", "4|0||Send|64|1|9223372036854775808|0",
    "4|0||Send|63|1|4611686018427387904|0", "4|0||Send|63|2|9223372036854775807|0",
    "4|0||Send|63|1|4611686018427387903|0", "4|0||Send|65|1|0|0", "4|0||Send|1|3|3|0", "4|0||Send|1|3|4|0",
    "4|0||Send|2|3|5|0", "4|0||Send|2|3|9|0", "4|0||Send|2|3|10|0", "4|0||Send|0|1|1|0",
    "4|0||Send|0|9223372036854775807|0|0", "4|0||Send|0|0|0|0", "04|0||Send|0|1|0|0", "4|00||Send|0|1|0|0",
    "3|0||Send|0|1|0|0", "7|0||Send|0|1|0|0", "6|11||Send|0|1|0|0", "6|12||Send|0|1|0|0", "4|0|0|Wait|0|1|0|0",
    "4|0|0|Waitany|0|1|0|0", "4|0|0|Wai|0|1|0|0", "4|0|0|Testall|0|1|0|0", "4|0|1|Send|0|1|0|0",
    "4|0|2|Send|0|1|0|0", "4|0||" + "A" * 64 + "|0|1|0|0", "4|0||" + "A" * 65 + "|0|1|0|0",
    "4|0||aSend|0|1|0|0", "4|0||Se nd|0|1|0|0", "4|0||Send|0|1|0|0|", "4|0||Send|0|1|0", "4|0||Send|0|1|0|-1",
    "4|0||Send|0|1|0|99999999999999999999", "4|0||Send|0|1|0|+1", "4|0||S_|0|1|0|0", "4|0||Sénd|0|1|0|0",
]


def test_the_corners_of_the_row_rules():
    head = b"comms 2\nCOMM_SELF|1||\nCOMM_WORLD|16|0-15|\n"
    for row in CORNERS:
        same(head + f"ops 1\n{row}\npeers 0\n".encode())
        for other in CORNERS[:6]:           # pairs: the order of keys, equal keys
            same(head + f"ops 2\n{row}\n{other}\npeers 0\n".encode())
    for peer in ["4|0||15|1|0", "4|0||16|1|0", "4|0||0|0|0", "4|||3|1|9223372036854775807", "4|0|2|3|1|0",
                 "6|0|1|0|1|1", "4|0||3|1"]:
        same(head + f"ops 0\npeers 2\n{peer}\n4|0||3|1|0\n".encode())
        same(head + f"ops 0\npeers 1\n{peer}\n".encode())
    for counts in [b"ops 1\n", b"ops 01\n", b"ops  1\n", b"ops\n", b"ops 3\n", b"op 0\n"]:
        same(head + counts + b"4|||Wait|0|1|0|0\npeers 0\n")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text("0129|AWabit_ ", max_size=12), min_size=8, max_size=9))
def test_random_row_text(fields):
    row = "|".join(fields)
    same(f"comms 1\nCOMM_WORLD|16|0-15|\nops 1\n{row}\npeers 1\n{row[:20]}\n".encode())
