"""The meta section codec (docs/format.md, "The meta section"): the canonical
form round-trips, the reader accepts nothing else, and every problem is a
FormatError naming the file and the line."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyprof
from tinyprof.errors import FormatError
from tinyprof.format import encoding, hostlist, meta_section
from tinyprof.format.encoding import Header
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


def test_the_writer_leaves_out_what_the_reader_would_refuse():
    """A string over the bound (a huge run's command or host list) and keys
    past the 1024th are left out, so that the file stays readable."""
    huge = {"a": "x" * meta_section.MAX_VALUE + "%", "b": 1, "c": "x" * meta_section.MAX_VALUE}
    assert meta_section.encode(huge) == b"b|i|1\nc|s|" + b"x" * meta_section.MAX_VALUE + b"\n"
    many = {f"k{i:04d}": i for i in range(1100)}
    got = parse_data("m.tp", _file(meta_section.encode(many))).metadata
    assert got == {k: v for k, v in many.items() if v < 1024}


# -- rank_hosts: the host of each rank, run-length encoded (format/hostlist.py) --

def test_rank_hosts_is_run_length_encoded_in_rank_order():
    hosts = ["n1"] * 3 + ["n2"] * 2 + ["n1"] + ["n3"]
    assert hostlist.encode(hosts) == "n1*3,n2*2,n1,n3"
    assert hostlist.decode("n1*3,n2*2,n1,n3", 7, "rank_hosts") == hosts
    assert hostlist.decode("n1,n1*2,n2*0,n2*02,n1,n3", 7, "x") == hosts      # not canonical, same ranks
    assert hostlist.decode("n*" + "0" * 40 + "2", 2, "x") == ["n", "n"]
    assert hostlist.encode([]) == "" and hostlist.encode(["a", ""]) == ""     # nothing to name


def test_hostile_host_names_are_escaped_and_read_back_through_the_section():
    """`,` and `*` would cut a name, and `%` starts an escape: all three are
    escaped; the meta section then escapes the `%` (and a newline) again."""
    hosts = ["a,b", "a,b", "a*b", "50%", "%2C", "*", "line\nbreak|x", "café"]
    text = hostlist.encode(hosts)
    assert text == "a%2Cb*2,a%2Ab,50%25,%252C,%2A,line\nbreak|x,café"
    payload = meta_section.encode({"rank_hosts": text})
    assert payload == "rank_hosts|s|a%252Cb*2,a%252Ab,50%2525,%25252C,%252A,line%0Abreak|x,café\n".encode()
    got = parse_data("m.tp", _file(payload)).metadata["rank_hosts"]
    assert hostlist.decode(str(got), len(hosts), "rank_hosts") == hosts
    assert hostlist.decode("a%2cb*2", 2, "x") == ["a,b"] * 2                   # hex in either case


@pytest.mark.parametrize("text, nranks, says", [
    ("a*3", 4, "--hosts: 3 given for the profile's 4 ranks"),
    ("a*2,,b*2", 4, "--hosts: '' is not a host name or NAME*COUNT"),
    ("*4", 4, "--hosts: '*4' is not a host name or NAME*COUNT"),
    ("a**4", 4, "--hosts: 'a**4' is not a host name or NAME*COUNT"),
    ("a*", 4, "--hosts: 'a*' is not a host name or NAME*COUNT"),
    ("a*\u00b2", 4, "--hosts: 'a*\u00b2' is not a host name or NAME*COUNT"),   # a digit, not ASCII
    ("a*-1,b*5", 4, "--hosts: 'a*-1' is not a host name or NAME*COUNT"),
    ("50%,b*3", 4, "--hosts: '50%' is not a host name or NAME*COUNT"),
    ("a%2D*4", 4, "--hosts: 'a%2D*4' is not a host name or NAME*COUNT"),
    ("a*99999999999999", 4, "--hosts: more than the profile's 4 ranks"),
    ("a*" + "9" * 5000, 4, "--hosts: more than the profile's 4 ranks"),      # past int()'s digits
])
def test_bad_host_lists_are_one_clear_error(text, nranks, says):
    with pytest.raises(ValueError) as e:
        hostlist.decode(text, nranks, "--hosts")
    assert str(e.value) == says


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["n1", "n2", "a,b", "*", "%", "%2A", "é", "x*2"]), min_size=1, max_size=30))
def test_any_host_list_round_trips(hosts):
    text = hostlist.encode(hosts)
    assert hostlist.decode(text, len(hosts), "rank_hosts") == hosts
    assert text.count(",") + 1 == sum(1 for i, h in enumerate(hosts) if i == 0 or hosts[i - 1] != h)
