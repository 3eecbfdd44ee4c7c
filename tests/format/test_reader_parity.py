"""The C parser of event lines (tinyprof/format/_parse.c) against the pure-Python
reference (tinyprof/format/reader.py): the same files accepted, the same values read.

- the fuzz corpus of tests/format/test_fuzz.py, mutated copies re-checksummed so that
  the grammar, not the checksum, decides;
- random profiles written by the writer (hypothesis), values of every kind;
- random event lines from the grammar's alphabet (hypothesis), to hit the
  corners of the number and separator rules;
- every short rank-field text from a small alphabet, exhaustively: the C
  parser reads fields in one pass, deciding at each delimiter.
"""
from __future__ import annotations

import itertools
import os
import random
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fuzz import SEED, content, mutated, real_profiles, resum

from tinyprof.errors import FormatError
from tinyprof.format import reader
from tinyprof.format.encoding import Header
from tinyprof.runtime import assemble
from tinyprof.runtime.collect import LocalEvent

pytestmark = pytest.mark.skipif(reader._parse is None, reason="tinyprof.format._parse not built")
COPIES = 1500


def outcome(path: str, parser: str):
    """("ok", everything read) or ("error", None): which one, and what."""
    try:
        return "ok", content(reader.parse_file(path, parser))
    except FormatError:
        return "error", None


def same(path: str, where: str) -> str:
    c, python = outcome(path, "c"), outcome(path, "python")
    assert c[0] == python[0], f"{where}: C says {c[0]}, Python says {python[0]}"
    assert c[1] == python[1], f"{where}: C and Python read different values"
    return c[0]


def test_the_fuzz_corpus_reads_the_same(tmp_path):
    originals = real_profiles(str(tmp_path))
    blobs = [open(p, "rb").read() for p in originals]
    for p in originals:
        assert same(p, p) == "ok"
    rng = random.Random(SEED)
    target = str(tmp_path / "mutant.tp")
    seen = {"ok": 0, "error": 0}
    for i in range(COPIES):
        data, how = mutated(rng, rng.choice(blobs))
        with open(target, "wb") as f:
            f.write(resum(data))
        seen[same(target, f"TINYPROF_FUZZ_SEED={SEED}, copy {i} ({how})")] += 1
    assert seen["ok"] > 50 and seen["error"] > 50, seen      # both sides exercised


def test_errors_name_the_reference_line(tmp_path):
    path = real_profiles(str(tmp_path))[0]
    lines = open(path, "rb").read().split(b"\n")
    line = next(i for i, x in enumerate(lines) if x.startswith(b"events ")) + 3   # 2nd event line
    lines[line - 1] = lines[line - 1].replace(b"|", b"|x", 1)
    bad = b"\n".join(lines)
    open(path, "wb").write(resum(bad))
    with pytest.raises(FormatError) as python:
        reader.parse_file(path, "python")
    with pytest.raises(FormatError) as auto:
        reader.parse_file(path)
    assert str(auto.value) == str(python.value) == f"{path}:{line}: bad loop field b'x0'"


_values = st.one_of(st.just(float("nan")), st.integers(-10**17, 10**17).map(float),
                    st.floats(allow_nan=False), st.sampled_from([-0.0, 1e16, 9007199254740993.0,
                                                                 5e-324, 1e-4, 1e-5, 0.1]))


@st.composite
def _profile(draw):
    """A random file of 1-4 ranks: callpaths, loops, executions, metrics of both kinds."""
    nranks = draw(st.integers(1, 4))
    metrics = draw(st.sampled_from([[], [("c", True)], [("m", False)],
                                    [("c", True), ("m", False), ("n", False)]]))
    nexecs = [draw(st.integers(0, 3)) for _ in range(nranks)]
    paths = [("main",), ("main", "a"), ("main", "a", "b"), ("main", "c"), ("x",)]
    loops = {p: draw(st.integers(0, 2)) for p in paths}
    ranks = []
    for r in range(nranks):
        events = []
        for p in paths:
            if len(p) > 1 and not draw(st.booleans()):
                continue
            if len(p) > 1 and p[:-1] not in [e.path for e in events]:
                continue
            times, execs = [], []
            for e in range(nexecs[r]):
                if draw(st.booleans()):
                    execs += [e, len(times)]
                    times += draw(st.lists(st.integers(-2**63, 2**63 - 1), min_size=1,
                                           max_size=1 if loops[p] == 2 else 4))
            columns = {k: np.array([draw(_values) for _ in times]) for k, c in metrics
                       if not c and draw(st.booleans())}
            consistent = {k: draw(_values) for k, c in metrics if c and draw(st.booleans())}
            events.append(LocalEvent(p, loops[p], True, np.array(times, np.int64),
                                     np.array(execs, np.int64), consistent, columns))
        ranks.append(events)
    header = Header(name="h", nranks=nranks, first_rank=0, rank_count=nranks, metrics=metrics,
                    created="2026-01-02T03:04:05Z")
    return assemble.build_file(header, ranks, nexecs)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_profile())
def test_random_profiles_read_the_same(tmp_path, data):
    path = str(tmp_path / "random.tp")
    with open(path, "wb") as f:
        f.write(data)
    assert same(path, "a random profile") == "ok"


# An event line of a file with 2 ranks (3 and 2 executions), one consistent and
# one inconsistent metric, 3 names, as the second of 3 lines.
_HEAD = (b"tinyprof %d\nname h\nrun 0000000000000000\nset flush 0\nnranks 2\nranks 0 2\n"
         b"file 0 1\nunit ns\nmetrics c:0 m:1\ncreated 2026-01-02T03:04:05Z\nversion 0\n"
         b"executions 3,2\nnames 3\na\nb\nc\nevents 3\n0|0||1|2\n")
_TOKENS = ["0", "1", "-1", "12", "007", "-0", "9223372036854775807", "9223372036854775808",
           "-9223372036854775808", "-9223372036854775809", "0.5", "1e16", "1e+16", "1.5e-7",
           "1e-05", "nan", "-nan", "inf", "-inf", "NaN", "1.0", "0.1", "100000000000000",
           "1000000000000000", "9999999999999999", "2.5e16", " 1", "+1", "0x10", "1_0", ""]


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.one_of(st.sampled_from(_TOKENS), st.sampled_from(list("|,;+:*"))),
                      max_size=24), version=st.sampled_from([2, 3]))
def test_random_event_lines_read_the_same(tmp_path, parts, version):
    line = "".join(parts).encode()
    path = str(tmp_path / "line.tp")
    _write_line(path, line, version)
    same(path, f"event line {line!r}")


def _write_line(path: str, line: bytes, version: int = 2) -> None:
    body = _HEAD % version + line + b"\n0:2|1||1|\n"
    with open(path, "wb") as f:
        f.write(body + b"end %08x\n" % zlib.crc32(body))


_FIELD_TOKENS = [b"5", b"-0", b"2.5", b"nan", b"+", b";", b",", b"|"]
# version 3's execution gaps "*k;", k >= 2: too small, the largest, too large
_GAP_TOKENS = [b"*1;", b"*2;", b"*3;", b"*"]


@pytest.mark.parametrize("version,tokens", [(2, _FIELD_TOKENS + [b"*2;"]),
                                            (3, _FIELD_TOKENS[:1] + _FIELD_TOKENS[3:] + _GAP_TOKENS)])
def test_every_short_rank_field_reads_the_same(tmp_path, version, tokens):
    """Both ranks' fields, every text of up to 4 tokens (loop 1) or 3 (loop 2,
    one value per execution): empty executions and fields, trailing
    separators, execution gaps, metric values, too many executions or fields."""
    path = str(tmp_path / "field.tp")
    outcomes = {"ok": 0, "error": 0}
    for loop, most in ((b"1", 4), (b"2", 3)):
        for n in range(most + 1):
            for parts in itertools.product(tokens, repeat=n):
                line = b"0:1|" + loop + b"||" + b"".join(parts)
                _write_line(path, line, version)
                outcomes[same(path, f"event line {line!r}")] += 1
    assert outcomes["ok"] >= 30 and outcomes["error"] > 5000, outcomes   # both kinds, many


def test_the_c_parser_reads_a_large_profile_as_the_reference(tmp_path):
    """Many ranks and values per line: the buffers grow past their first size."""
    rng = np.random.default_rng(5)
    nranks, paths = 40, [("main",), ("main", "k")]
    ranks = [[LocalEvent(p, 1, True, rng.integers(-10**12, 10**12, 3000), np.array([0, 0, 1, 2000]),
                         {}, {"m": rng.random(3000)}) for p in paths] for _ in range(nranks)]
    header = Header(name="big", nranks=nranks, first_rank=0, rank_count=nranks,
                    metrics=[("m", False)], created="2026-01-02T03:04:05Z")
    path = str(tmp_path / "big.tp")
    with open(path, "wb") as f:
        f.write(assemble.build_file(header, ranks, [2] * nranks))
    assert same(path, "a large profile") == "ok"
    assert os.path.getsize(path) > 2**20
