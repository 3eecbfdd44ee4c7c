"""The trace section's rules between rows and tables (issue 34), checked as
the grammar is: a FormatError naming the file and the line."""
from __future__ import annotations

import pytest

from tinyprof.errors import FormatError
from tinyprof.format.trace_section import encode, parse

SAMPLE = b"""rank 0
clock 1000|-5|2000|-7|3
threads 2|101|105
comms 2|COMM_WORLD|COMM_SELF
events 3|0
0|0|100|50
1|0|0|50
1|1|0|10
calls 3|0
0|0|100|30|Send|0|8||s1:7:8:0
0|0|0|20|Barrier|1|0||
1||0|5|Wait||0||r1:7:8:0
"""


def _parse(data: bytes):
    return parse(data, "f.tp", 30, 2, 0, 1, 2)


def test_the_sample_is_valid():
    assert encode(_parse(SAMPLE)) == SAMPLE


@pytest.mark.parametrize("old,new,line,problem", [
    (b"clock 1000|-5|2000", b"clock 1000|-5|999", 31, "before the first"),
    (b"1|0|0|50\n1|1|0|10", b"1|1|0|10\n1|0|0|50", 37, "event rows of one start not by thread"),
    (b"0|0|100|50\n1|0|0|50", b"1|0|100|50\n0|0|0|50", 36, "event rows of one start not by thread"),
    (b"0|0|0|20|Barrier|1|0||\n1||0|5|", b"1||0|20|Barrier|1|0||\n0||0|5|", 41, "call rows of one start"),
    (b"comms 2|COMM_WORLD|COMM_SELF", b"comms 3|COMM_WORLD|COMM_SELF|unused", 41, "once each in order of first use"),
    (b"|Barrier|1|", b"|Barrier|0|", 41, "order of first use"),
])
def test_rules_between_rows_name_the_line(old, new, line, problem):
    assert old in SAMPLE
    with pytest.raises(FormatError) as e:
        _parse(SAMPLE.replace(old, new, 1))
    assert (e.value.path, e.value.line) == ("f.tp", line), e.value
    assert problem in e.value.problem
