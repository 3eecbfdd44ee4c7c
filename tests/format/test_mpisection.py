"""The mpi section codec: the canonical form round-trips, the parser accepts
nothing else, and any corruption is a FormatError naming file and line."""
from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinyprof.errors import FormatError
from tinyprof.format.mpi_section import (
    NONE,
    Communicator,
    bucket,
    bucket_range,
    decode_members,
    encode,
    encode_members,
    merge,
    parse,
)

COMMS = [Communicator("COMM_WORLD.split1@4", 2, (4, 6), 3),
         Communicator("COMM_WORLD", 8, tuple(range(8)), NONE),
         Communicator("COMM_SELF", 1, (), NONE)]
OPS = [(4, 3, 0, "Allreduce", 4, 10, 80, 1234), (4, NONE, NONE, "Waitall", 0, 2, 0, 55),
       (5, 3, 1, "Send", 7, 1, 100, 9)]
PEERS = [(4, 3, 0, 6, 1, 100), (5, 3, 1, 2, 3, 300)]
PAYLOAD = b"""comms 3
COMM_SELF|1||
COMM_WORLD|8|0-7|
COMM_WORLD.split1@4|2|4,6|3
ops 3
4|||Waitall|0|2|0|55
4|3|2|Allreduce|4|10|80|1234
5|3|1|Send|7|1|100|9
peers 2
4|3|2|6|1|100
5|3|1|2|3|300
"""


def _parse(payload: bytes):
    return parse(payload, "f.tp", 20, 5, 4, 2, 8)


def test_the_canonical_form():
    assert encode(COMMS, OPS, PEERS) == PAYLOAD
    s = _parse(PAYLOAD)
    assert [c.name for c in s.comms] == ["COMM_SELF", "COMM_WORLD", "COMM_WORLD.split1@4"]
    assert s.comms[2] == Communicator("COMM_WORLD.split1@4", 2, (4, 6), 3)
    assert s.ops[1] == (4, 3, 2, "Allreduce", 4, 10, 80, 1234)
    assert encode(s.comms, s.ops, s.peers) == PAYLOAD


def test_buckets_are_powers_of_two():
    assert [bucket(b) for b in (0, 1, 2, 3, 4, 1023, 1024)] == [0, 1, 2, 2, 3, 10, 11]
    assert bucket_range(0) == (0, 0) and bucket_range(1) == (1, 1)
    assert bucket_range(11) == (1024, 2047)


@pytest.mark.parametrize("members,text", [
    ((), ""), ((5,), "5"), ((0, 1, 2, 3), "0-3"), ((0, 2, 4, 6), "0-6:2"), ((3, 5), "3,5"),
    ((0, 1, 2, 3, 8, 10, 12, 14, 5, 9), "0-3,8-14:2,5,9"), ((7, 6, 5), "7,6,5"), ((1, 2, 4, 6), "1-2,4,6")])
def test_member_lists(members, text):
    assert encode_members(members) == text
    assert decode_members(text, len(members)) == members


@given(st.lists(st.integers(0, 40), max_size=12))
def test_member_lists_round_trip(members):
    assert decode_members(encode_members(members), len(members)) == tuple(members)


@pytest.mark.parametrize("text,size", [("0-3", 3), ("3-0", 4), ("0-1:2", 1), ("0-2:2", 2),
                                       ("3,5,7", 3), ("0,1", 2), ("01", 1), ("0-9999999999", 4)])
def test_member_lists_not_canonical_are_refused(text, size):
    with pytest.raises(ValueError):
        decode_members(text, size)


def test_merge_unites_communicators_by_name():
    a = _parse(PAYLOAD)
    b = parse(b"comms 1\nCOMM_WORLD|8|0-7|\nops 1\n4||0|Barrier|0|1|0|5\npeers 0\n",
              "g.tp", 1, 5, 4, 2, 8)
    assert b.comms == [Communicator("COMM_WORLD", 8, tuple(range(8)), NONE)]
    m = merge([a, b])
    assert [c.name for c in m.comms] == ["COMM_SELF", "COMM_WORLD", "COMM_WORLD.split1@4"]
    assert (4, NONE, 1, "Barrier", 0, 1, 0, 5) in m.ops


@pytest.mark.parametrize("bad,line,problem", [
    (b"comm 1\nCOMM_WORLD|8|0-7|\nops 0\npeers 0\n", 20, "expected 'comms <count>'"),
    (b"comms 2\nCOMM_WORLD|8|0-7|\nCOMM_SELF|1||\nops 0\npeers 0\n", 22, "not sorted"),
    (b"comms 3\nCOMM_WORLD|8|0-7|\n", 22, "truncated"),
    (b"comms 1\nCOMM WORLD|8|0-7|\n", 21, "bad communicator name"),
    (b"comms 1\nCOMM_WORLD|9|0-8|\n", 21, "bad communicator size"),
    (b"comms 1\nCOMM_WORLD|8|0-6|\n", 21, "bad member list"),
    (b"comms 1\nCOMM_WORLD|2||\n", 21, "lists no member"),
    (b"comms 0\nops 1\n3|||Barrier|0|1|0|5\n", 22, "bad rank"),
    (b"comms 0\nops 1\n4|5||Barrier|0|1|0|5\n", 22, "bad line"),
    (b"comms 0\nops 1\n4||0|Barrier|0|1|0|5\n", 22, "bad communicator '0' (none listed)"),
    (b"comms 0\nops 1\n4|||barrier|0|1|0|5\n", 22, "bad operation name"),
    (b"comms 0\nops 1\n4|||Barrier|65|1|0|5\n", 22, "bad size bucket"),
    (b"comms 0\nops 1\n4|||Barrier|0|0|0|5\n", 22, "bad calls"),
    (b"comms 0\nops 1\n4|||Barrier|0|1|0|-5\n", 22, "bad time"),
    (b"comms 0\nops 2\n4|||Barrier|0|1|0|5\n4|||Barrier|0|1|0|5\n", 23, "not in order"),
    (b"comms 0\nops 0\npeers 1\n4|||8|1|5\n", 23, "bad peer"),
    (b"comms 0\nops 0\npeers 0\nextra\n", 23, "data after"),
    (b"comms 0\nops 0\npeers 0", 22, "truncated"),
    (b"comms 99999999\n", 20, "more than the section's bytes can hold"),
    (b"comms 0\nops 1\n4|||Barrier|0|1|0\n", 22, "has 7 fields"),
    # issue 34: the rules between fields, not only each field's grammar
    (b"comms 0\nops 1\n4|||Bcast|3|1|0|5\n", 22, "0 bytes in 1 calls of size bucket 3 (4 to 7 bytes a call)"),
    (b"comms 0\nops 1\n4|||Bcast|1|2|3|5\n", 22, "3 bytes in 2 calls of size bucket 1"),
    (b"comms 0\nops 1\n4|||Barrier|0|1|8|5\n", 22, "8 bytes in 1 calls of size bucket 0"),
    (b"comms 1\nCOMM_WORLD|8|0-7|\nops 1\n4||0|Waitall|0|1|0|5\n", 23, "completion call Waitall names a communicator"),
    (b"comms 0\nops 0\npeers 0\ntransport 1\n4||Recv|tag_recv|eager|tcp|1|8\nucx 1\n4|used\n", 24,
     "a tag_recv row with protocol 'eager'"),
    (b"comms 0\nops 0\npeers 0\ntransport 1\n4||Send|tag_send|eager||1|8\nucx 1\n4|used\n", 24,
     "both are empty"),
    (b"comms 0\nops 0\npeers 0\ntransport 0\nucx 1\n4|used\n", 25, "rank 4 is used in the ucx rows but has no"),
    (b"comms 0\nops 0\npeers 0\ntransport 1\n4||Send|tag_send|eager|tcp|1|8\nucx 1\n4|unavailable\n", 26,
     "rank 4 is unavailable in the ucx rows but has transport rows"),
    (b"comms 0\nops 0\npeers 0\ntransport 1\n5||Send|tag_send|eager|tcp|1|8\nucx 1\n4|unused\n", 26,
     "rank 5 is not listed in the ucx rows"),
])
def test_bad_payloads_are_format_errors_naming_file_and_line(bad, line, problem):
    with pytest.raises(FormatError) as e:
        _parse(bad)
    assert (e.value.path, e.value.line) == ("f.tp", line), e.value
    assert problem in e.value.problem and e.value.problem.startswith("mpi section: ")


@settings(max_examples=300, deadline=None)
@given(st.randoms(use_true_random=False))
def test_corrupted_payloads_never_raise_anything_else(rnd: random.Random):
    data = corrupted(rnd, PAYLOAD, 4)
    try:
        s = _parse(data)
    except FormatError:
        return
    assert encode(s.comms, s.ops, s.peers) == data      # accepted: it is canonical


def corrupted(rnd: random.Random, payload: bytes, most: int) -> bytes:
    """``payload`` with 1 to ``most`` bytes changed, removed or added."""
    data = bytearray(payload)
    for _ in range(rnd.randint(1, most)):
        i = rnd.randrange(len(data))
        op = rnd.randrange(3)
        if op == 0:
            data[i] = rnd.choice(b"0123456789|\n-,:@abcAWZ_ \xff")
        elif op == 1:
            del data[i]
        else:
            data.insert(i, rnd.choice(b"0123456789|\n"))
    return bytes(data)


def test_a_resummed_file_with_bytes_outside_their_bucket_is_refused(tmp_path):
    """Issue 34: a re-checksummed mpi section whose bytes fall outside the
    declared bucket was read without a word."""
    import tinyprof
    from tinyprof.format import encoding
    from tinyprof.format.encoding import Header
    from tinyprof.format.output_dir import write_atomic
    h = Header(name="p", nranks=1, first_rank=0, rank_count=1, executions=[1], created="2000-01-01T00:00:00Z")
    payload = b"comms 1\nCOMM_WORLD|1||\nops 1\n0|0|0|Send|4|2|1000|7\npeers 0\n"     # 2 calls of 8-15 bytes
    data = encoding.encode_file(h, ["main"], [-1], [0], [0], [b""], [[b"5"]], [("mpi", payload)])
    write_atomic(str(tmp_path / "p.0-of-1.tp"), data)
    profile = tinyprof.read(tmp_path)
    with pytest.raises(FormatError) as e:
        len(profile.mpi)
    line = data[:data.index(b"0|0|0|Send")].count(b"\n") + 1
    assert (e.value.path, e.value.line) == (str(tmp_path / "p.0-of-1.tp"), line)
    assert "1000 bytes in 2 calls of size bucket 4 (8 to 15 bytes a call)" in e.value.problem
