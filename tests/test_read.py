"""Reading damaged or foreign input: always a FormatError naming the file (and
the line where one applies), never another exception or a silent misread."""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tinyprof
from tinyprof import FormatError, _flush
from tinyprof._eventmap import LocalEvent
from tinyprof._format import Header, file_name, write_atomic

GOLDEN = os.path.join(os.path.dirname(__file__), "golden", "fig3.tp")
with open(GOLDEN, "rb") as _f:
    VALID = _f.read()


def read_everything(profile: tinyprof.Profile) -> None:
    """Touch every value a reader can ask for."""
    for path in profile.callpaths:
        profile.loop(path)
        for key, consistent in profile.metrics:
            if consistent:
                profile.value(path, key)
        for rank in range(profile.nranks):
            profile.series(path, rank)
            for key, consistent in profile.metrics:
                if not consistent:
                    profile.series(path, rank, key)


def read_error(target, named=None) -> FormatError:
    """The FormatError of reading ``target``; its message starts with ``named`` (or target)."""
    with pytest.raises(FormatError) as info:
        tinyprof.read(target)
    assert str(info.value).startswith(str(named or target)), str(info.value)
    return info.value


def write(directory, data: bytes, name: str = "fig2.0-of-1.tp") -> str:
    path = os.path.join(directory, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


def line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def test_valid_file_reads():
    read_everything(tinyprof.read(GOLDEN))


def test_truncated_at_every_byte_offset(tmp_path):
    path = write(tmp_path, b"")
    for cut in range(len(VALID)):
        with open(path, "wb") as f:
            f.write(VALID[:cut])
        err = read_error(path)
        assert err.line is not None and f"{path}:{err.line}: " in str(err), (cut, str(err))
        # the error is at or before the line where the file was cut
        assert err.line <= line_of(VALID, cut) + 1, (cut, str(err))
    with open(path, "wb") as f:
        f.write(VALID)
    read_everything(tinyprof.read(path))


def test_truncation_error_says_truncated(tmp_path):
    for cut in (len(VALID) - 1, len(VALID) - 4, VALID.index(b"\nevents") + 1):
        assert "truncated" in read_error(write(tmp_path, VALID[:cut])).problem


NASTY = [b"99999999999999999999", b"-", b"%", b"%0", b"\xff", b"\xed\xa0\x80", b"nan", b"*",
         b"1_0", b" ", b"\t", b"\r", b"|", b";", b"+", b",", b"<", b"\n", b"\nend\n", b"9" * 12]


@st.composite
def corruptions(draw):
    """The valid file with a few bytes replaced, inserted or deleted, or a nasty
    token spliced in."""
    data = bytearray(VALID)
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, len(data) - 1))
        kind = draw(st.sampled_from(["replace", "insert", "delete", "splice"]))
        byte = draw(st.one_of(st.sampled_from(b"0123456789-|;+,<*% \n:e"), st.integers(0, 255)))
        if kind == "replace":
            data[pos] = byte
        elif kind == "insert":
            data.insert(pos, byte)
        elif kind == "delete":
            del data[pos]
        else:
            data[pos:pos + draw(st.integers(0, 2))] = draw(st.sampled_from(NASTY))
    return bytes(data)


@given(corruptions())
@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_corruption_is_a_format_error_or_a_usable_profile(tmp_path, data):
    path = write(tmp_path, data)
    try:
        profile = tinyprof.read(path)
    except FormatError as e:
        assert str(e).startswith(path)
        return
    read_everything(profile)


@pytest.mark.parametrize("data,problem", [
    (b"", "not a tinyprof profile"),
    (json.dumps({"tinyprof": 1, "events": []}).encode(), "not a tinyprof profile"),
    (b'{"columns": ["path"], "data": []}\n', "not a tinyprof profile"),
    (b"path,rank,time\nmain,0,1.5\n", "not a tinyprof profile"),
    (bytes(range(256)) * 4, "not a tinyprof profile"),
    (gzip.compress(VALID), "not a tinyprof profile"),
    (b"tinyprofile 1\n", "not a tinyprof profile"),
    (VALID.replace(b"tinyprof 1\n", b"tinyprof 2\n"), "newer"),
    (VALID.replace(b"tinyprof 1\n", b"tinyprof 10\n"), "newer"),
    (VALID.replace(b"tinyprof 1\n", b"tinyprof one\n"), "format version"),
    (VALID.replace(b"unit ns", b"unit us"), "unit"),
    (VALID.replace(b"version 0.1.0\n", b""), "header lacks version"),
    (VALID.replace(b"executions 2*2", b"executions 2*3"), "covers 3 ranks"),
    (VALID.replace(b"executions 2*2", b"executions 2*99999999999999"), "covers"),
    (VALID.replace(b"metrics tag:0 mem:1", b"metrics tag:0 tag:1"), "metrics"),
    (VALID.replace(b"metrics tag:0 mem:1", b"metrics tag:2 mem:1"), "metrics"),
    (VALID.replace(b"name fig2", b"name %zz"), "'name'"),
    (VALID.replace(b"\nmain\n", b"\nma%0\n"), "bad name"),
    (VALID.replace(b"\nmain\n", b"\n\xff\xfe\n"), "UTF-8"),
    (VALID.replace(b"0<4|0|||", b"0<5|0|||"), "callpath"),
    (VALID.replace(b"0<4|0|||", b"0<-1|0|||"), "callpath"),
    (VALID.replace(b"0<4|0|||", b"0< 4|0|||"), "callpath"),
    (VALID.replace(b"0<4|0|||", b"0<4|3|||"), "loop"),
    (VALID.replace(b"0<4|0|||", b"0<2|0|||"), "twice"),
    (VALID.replace(b"0<2<3|", b"0<4<3|"), "parent"),
    (VALID.replace(b"0<4|0|||300;301", b"0<4|0||300;301"), "fields, expected 5"),
    (VALID.replace(b"|300;301", b"|300;301;302"), "3 executions"),
    (VALID.replace(b"|300;301", b"|300;99999999999999999999"), "bad time value"),
    (VALID.replace(b"|300;301", b"|300;3.5"), "bad time value"),
    (VALID.replace(b"|600,3.75;", b"|600+1,3.75;"), "loop-2"),
    (VALID.replace(b"|600,3.75;", b"|600,3.75,1;"), "too many metric values"),
    (VALID.replace(b"|600,3.75;", b"|600,x;"), "bad metric value"),
    (VALID.replace(b"0<2<3|2|2|", b"0<2<3|2|2,3|"), "too many consistent"),
    (VALID.replace(b"0<2<3|2|2|", b"0<2<3|2|two|"), "bad consistent"),
    (VALID.replace(b"events 5", b"events 6"), "fewer event lines"),
    (VALID.replace(b"events 5", b"events 4"), "expected 'end'"),
    (VALID + b"more\n", "after the 'end'"),
    (VALID[:-1], "truncated"),
    (VALID.replace(b"file 0 1", b"file 0 2"), "file 0 of 2"),
    (VALID.replace(b"nranks 2", b"nranks 3"), "cover 2 of 3 ranks"),
    (VALID.replace(b"ranks 0 2", b"ranks 1 2"), "out of range"),
])
def test_bad_content_names_file_line_and_problem(tmp_path, data, problem):
    err = read_error(write(tmp_path, data))
    assert problem in str(err)


def test_error_names_the_line(tmp_path):
    data = VALID.replace(b"0<4|0|||300;301", b"0<4|0|||300;x")
    err = read_error(write(tmp_path, data))
    assert err.line == line_of(data, data.index(b"0<4|"))
    assert re.match(rf"{re.escape(str(tmp_path))}/fig2\.0-of-1\.tp:{err.line}: bad time value", str(err))


def test_lone_surrogates_and_unicode_whitespace_in_names_read_back(tmp_path):
    keys = [("a\u2028b\tc", False), ("\ud800", True)]
    names = ["x\ud800", "\x85\u2029"]
    events = [LocalEvent((names[0],), 0, True, np.array([1]), np.array([0, 0]), {"\ud800": 2.0},
                         {"a\u2028b\tc": np.array([3.0])}),
              LocalEvent(tuple(names), 0, True, np.array([4]), np.array([0, 0]), {}, {})]
    header = Header(name="p\ud800", nranks=1, first_rank=0, rank_count=1, metrics=keys)
    write_atomic(str(tmp_path / "p.0-of-1.tp"), _flush.build_file(header, [events], [1]))
    p = tinyprof.read(tmp_path)
    assert p.name == "p\ud800" and p.metrics == keys
    assert p.callpaths == [(names[0],), tuple(names)]
    assert p.value((names[0],), "\ud800") == 2.0
    assert p.series((names[0],), 0, "a\u2028b\tc") == [[3.0]]


# -- profile sets and directories --------------------------------------------

def write_set(directory, nfiles: int = 3, name: str = "heat") -> list:
    paths = []
    for i in range(nfiles):
        events = [LocalEvent(("main",), 0, True, np.array([10 + i]), np.array([0, 0]), {}, {})]
        header = Header(name=name, nranks=nfiles, first_rank=i, rank_count=1,
                        file_index=i, file_count=nfiles)
        paths.append(os.path.join(directory, file_name(name, i, nfiles)))
        write_atomic(paths[-1], _flush.build_file(header, [events], [1]))
    return paths


def test_multi_file_set_reads_from_directory_or_any_file(tmp_path):
    paths = write_set(tmp_path)
    for target in [tmp_path, *paths]:
        p = tinyprof.read(target)
        assert p.files == paths
        assert [p.series(("main",), r) for r in range(3)] == [[[10e-9]], [[11e-9]], [[12e-9]]]


def test_missing_file_of_a_set_is_named(tmp_path):
    paths = write_set(tmp_path)
    os.remove(paths[1])
    for target in (tmp_path, paths[0], paths[2]):
        err = read_error(target, paths[1])
        assert "missing" in err.problem and "3 files" in err.problem


def test_file_from_another_profile_in_a_set_is_rejected(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    paths = write_set(tmp_path / "a", name="heat")
    other = write_set(tmp_path / "b", name="heat2")
    shutil.copy(other[1], paths[1])
    err = read_error(tmp_path / "a", paths[1])
    assert "does not belong" in err.problem


def test_file_renamed_out_of_its_place_is_rejected(tmp_path):
    paths = write_set(tmp_path)
    os.rename(paths[0], paths[0] + ".bak")
    shutil.copy(paths[1], paths[0])
    err = read_error(tmp_path, paths[0])
    assert "file 1 of 3" in err.problem


def test_directory_without_a_profile(tmp_path):
    assert "no tinyprof profile" in read_error(tmp_path).problem
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "x.0-of-1.tp.tmp123").write_bytes(VALID)      # a writer's leftover
    assert "no tinyprof profile" in read_error(tmp_path).problem


def test_directory_with_two_profiles_asks_for_one(tmp_path):
    write_set(tmp_path, 1, "a")
    write_set(tmp_path, 2, "b")
    assert "several profiles" in read_error(tmp_path).problem
    assert tinyprof.read(tmp_path / file_name("b", 0, 2)).nranks == 2


def test_missing_path(tmp_path):
    assert "no such file" in read_error(tmp_path / "nope.tp").problem

