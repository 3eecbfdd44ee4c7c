"""The meta section codec (docs/format.md, "The meta section"): the canonical
form round-trips, the reader accepts nothing else, and every problem is a
FormatError naming the file and the line."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyprof
from tinyprof.format import encoding, meta_section
from tinyprof.format.encoding import FormatError, Header
from tinyprof.format.reader import parse_data

ENTRIES = {"nranks": 4, "eps": 1.5e-7, "big": -2**63, "case": "a|b\nc%\r\u2028\udcff", "empty": "",
           "inf": math.inf, "_x.y-z": "ok"}
PAYLOAD = (b"_x.y-z|s|ok\n"
           b"big|i|-9223372036854775808\n"
           b"case|s|a|b%0Ac%25%0D\xe2\x80\xa8\xed\xb3\xbf\n"
           b"empty|s|\n"
           b"eps|f|1.5e-7\n"
           b"inf|f|inf\n"
           b"nranks|i|4\n")


def _file(payload: bytes, index: int = 0, count: int = 1) -> bytes:
    h = Header(name="m", nranks=count, first_rank=index, rank_count=1, file_index=index,
               file_count=count, executions=[1], created="2026-01-01T00:00:00Z")
    return encoding.encode_file(h, ["main"], [-1], [0], [0], [b""], [[b"5"]], [("meta", payload)])


def test_the_canonical_form():
    assert meta_section.encode(ENTRIES) == PAYLOAD
    got = parse_data("m.tp", _file(PAYLOAD)).metadata
    assert got == ENTRIES and list(got) == sorted(ENTRIES)
    assert all(type(got[k]) is type(v) for k, v in ENTRIES.items())


def test_a_file_without_the_section_reads_as_empty(tmp_path):
    (tmp_path / "m.0-of-1.tp").write_bytes(_file(b""))
    assert tinyprof.read(tmp_path).metadata == {}


def test_golden_files_of_every_version_have_no_metadata():
    from test_golden import GOLDEN, GOLDEN_V1, GOLDEN_V2
    assert [tinyprof.read(g).metadata for g in (GOLDEN, GOLDEN_V2, GOLDEN_V1)] == [{}, {}, {}]


# The section starts on line 17 of _file's output, its payload on line 18.
@pytest.mark.parametrize("payload,line,problem", [
    (b"a|s|x", 18, "no newline"),
    (b"a|s|x\n\n", 19, "expected"),
    (b"a|x|1\n", 18, "expected"),
    (b"a s 1\n", 18, "expected"),
    (b"1a|s|x\n", 18, "expected"),
    (b"a" * 65 + b"|s|x\n", 18, "expected"),
    (b"a|s|x\nb|s|y\na|s|z\n", 20, "out of order"),
    (b"a|s|x\na|s|x\n", 19, "given twice"),
    (b"b|s|x\na|s|y\n", 19, "out of order"),
    (b"a|s|%41\n", 18, "not canonically escaped"),
    (b"a|s|%0a\n", 18, "not canonically escaped"),
    (b"a|s|%4\n", 18, "bad escape"),
    (b"a|s|x\ry\n", 18, "not canonically escaped"),
    (b"a|s|\xff\n", 18, "not valid UTF-8"),
    (b"a|i|01\n", 18, "bad integer"),
    (b"a|i|-0\n", 18, "bad integer"),
    (b"a|i|+1\n", 18, "bad integer"),
    (b"a|i|9223372036854775808\n", 18, "bad integer"),
    (b"a|i|1.5\n", 18, "bad integer"),
    (b"a|f|1.0\n", 18, "bad float"),
    (b"a|f|1e3\n", 18, "bad float"),
    (b"a|f|NaN\n", 18, "bad float"),
    (b"a|f|1_0\n", 18, "bad float"),
    (b"a|f|\n", 18, "bad float"),
    (b"a|s|" + b"x" * ((1 << 20) + 1) + b"\n", 18, "longer than"),
    (b"".join(b"k%04d|i|1\n" % i for i in range(1025)), 18, "more than 1024"),
])
def test_bad_sections_are_format_errors_naming_the_line(payload, line, problem):
    with pytest.raises(FormatError, match=problem) as e:
        parse_data("m.tp", _file(payload))
    assert e.value.line == line and "meta section" in str(e.value)


def test_only_file_zero_holds_it():
    with pytest.raises(FormatError, match="outside file 0") as e:
        parse_data("m.tp", _file(b"a|s|x\n", index=1, count=2))
    assert e.value.line == 17


def test_the_messages_quote_hostile_values_escaped_and_short():
    with pytest.raises(FormatError) as e:
        parse_data("m.tp", _file(b"a|i|\x1b[31m" + b"9" * 10_000 + b"\n"))
    assert "\x1b" not in str(e.value) and len(str(e.value)) < 300


_keys = st.from_regex(meta_section.KEY_RE, fullmatch=True)
_values = st.one_of(st.text(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(_keys, _values, max_size=20))
def test_any_entries_round_trip(entries):
    payload = meta_section.encode(entries)
    assert parse_data("m.tp", _file(payload)).metadata == entries
