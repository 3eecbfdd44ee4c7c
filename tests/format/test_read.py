"""Reading damaged or foreign input: always a FormatError naming the file (and
the line where one applies), never another exception or a silent misread."""
from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import threading
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tinyprof
from tinyprof import FormatError
from tinyprof.format.encoding import Header
from tinyprof.format.output_dir import file_name, write_atomic
from tinyprof.format.reader import parse_file
from tinyprof.runtime import assemble
from tinyprof.runtime.collect import LocalEvent

HERE = os.path.join(os.path.dirname(__file__), os.pardir, "golden")
GOLDEN, GOLDEN_V1 = os.path.join(HERE, "fig3-v2.tp"), os.path.join(HERE, "fig3.tp")
with open(GOLDEN, "rb") as _f:
    VALID = _f.read()
with open(GOLDEN_V1, "rb") as _f:
    VALID_V1 = _f.read()
RUN = "5f0c9e1d2a3b4c6d"
BOTH = pytest.mark.parametrize("valid", [VALID, VALID_V1], ids=["v2", "v1"])


def resum(data: bytes) -> bytes:
    """A version-2 file after an edit of its body, with the end line made right
    again: the edit reaches the parser instead of failing the checksum."""
    body = data[:data.rindex(b"end ")]
    return body + b"end %08x\n" % zlib.crc32(body)


def edit(valid: bytes, old: bytes, new: bytes) -> bytes:
    assert old in valid, old
    data = valid.replace(old, new, 1)
    return resum(data) if valid is VALID else data


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


@BOTH
def test_valid_file_reads(tmp_path, valid):
    read_everything(tinyprof.read(write(tmp_path, valid)))


@BOTH
def test_truncated_at_every_byte_offset(tmp_path, valid):
    path = write(tmp_path, b"")
    for cut in range(len(valid)):
        with open(path, "wb") as f:
            f.write(valid[:cut])
        err = read_error(path)
        assert err.line is not None and f"{path}:{err.line}: " in str(err), (cut, str(err))
        # the error is at or before the line where the file was cut
        assert err.line <= line_of(valid, cut) + 1, (cut, str(err))
        if valid is VALID and cut > len(b"tinyprof 2\n"):
            assert "truncated" in err.problem, (cut, str(err))
    with open(path, "wb") as f:
        f.write(valid)
    read_everything(tinyprof.read(path))


@BOTH
def test_truncation_error_says_truncated(tmp_path, valid):
    for cut in (len(valid) - 1, len(valid) - 4, valid.index(b"\nevents") + 1):
        assert "truncated" in read_error(write(tmp_path, valid[:cut])).problem


NASTY = [b"99999999999999999999", b"-", b"%", b"%0", b"\xff", b"\xed\xa0\x80", b"nan", b"*",
         b"1_0", b" ", b"\t", b"\r", b"|", b";", b"+", b",", b"<", b":", b"\n", b"\nend\n",
         b"9" * 12, b"\x00", b"0", b"section x 1\n"]


@st.composite
def corruptions(draw):
    """A valid file (version 2: with the end line made right again) with a few
    bytes replaced, inserted or deleted, or a nasty token spliced in."""
    valid = draw(st.sampled_from([VALID, VALID_V1]))
    data = bytearray(valid)
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
    data = bytes(data)
    return resum(data) if valid is VALID and b"end " in data else data


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
    (VALID.replace(b"tinyprof 2\n", b"tinyprof 4\n"), "newer"),
    (VALID.replace(b"tinyprof 2\n", b"tinyprof 10\n"), "newer"),
    (VALID.replace(b"tinyprof 2\n", b"tinyprof one\n"), "format version"),
    (VALID.replace(b"tinyprof 2\n", b"tinyprof 02\n"), "format version"),
    (VALID.replace(b"tinyprof 2\n", b"tinyprof 0\n"), "format version"),
])
def test_not_a_profile_or_another_version(tmp_path, data, problem):
    assert problem in str(read_error(write(tmp_path, data)))


# Edits that both versions reject: (old, new, problem).
BAD_EITHER = [
    (b"unit ns", b"unit us", "unit"),
    (b"executions 2*2", b"executions 2*3", "covers 3 ranks"),
    (b"executions 2*2", b"executions 2*99999999999999", "covers"),
    (b"metrics tag:0 mem:1", b"metrics tag:0 tag:1", "metrics"),
    (b"metrics tag:0 mem:1", b"metrics tag:2 mem:1", "metrics"),
    (b"name fig2", b"name %zz", "'name'"),
    (b"\nmain\n", b"\nma%0\n", "bad name"),
    (b"\nmain\n", b"\n\xff\xfe\n", "UTF-8"),
    (b"4|0|||300;301", b"4|3|||300;301", "loop"),
    (b"4|0|||300;301", b"4|0||300;301", "fields, expected 5"),
    (b"|300;301", b"|300;301;302", "3 executions"),
    (b"|300;301", b"|300;99999999999999999999", "bad time value"),
    (b"|300;301", b"|300;9223372036854775808", "bad time value"),
    (b"|300;301", b"|300;3.5", "bad time value"),
    (b"|600,3.75;", b"|600+1,3.75;", "loop-2"),
    (b"|600,3.75;", b"|600,3.75,1;", "too many metric values"),
    (b"|600,3.75;", b"|600,x;", "bad inconsistent metric value"),
    (b"|2|2|600", b"|2|2,3|600", "too many consistent"),
    (b"|2|2|600", b"|2|two|600", "bad consistent"),
    (b"file 0 1", b"file 0 2", "file 0 of 2"),
    (b"file 0 1", b"file 1 1", "file index out of range"),
    (b"file 0 1", b"file 0 3", "file index out of range"),
    (b"nranks 2", b"nranks 3", "cover 2 of 3 ranks"),
    (b"nranks 2", b"nranks 0", "out of range"),
    (b"ranks 0 2", b"ranks 1 2", "out of range"),
    # issue 11, item 6: hostile sizes, rejected before anything is allocated
    (b"nranks 2\nranks 0 2", b"nranks 1000000000000\nranks 0 1000000000000", "'nranks'"),
    (b"nranks 2\nranks 0 2", b"nranks 2147483647\nranks 0 2147483647", "ranks in a file of"),
    (b"executions 2*2", b"executions 2*1000000000000", "covers"),
    (b"executions 2*2", b"executions 1000000000000*2", "executions in a file of"),
    (b"executions 2*2", b"executions 99999999999999999999*2", "'executions'"),
    (b"executions 2*2", b"executions 2*99999999999999999999", "'executions'"),
    (b"\nevents 5\n", b"\nevents 1000000000000\n", "only"),
    (b"\nnames 5\n", b"\nnames 1000000000000\n", "only"),
    (b"\nnames 5\n", b"\nnames 99999999999999999999\n", "names count"),
    (b"4|0|||", b"%s|0|||" % (b"9" * 5000), "callpath"),
    (b"4|0|||", b"99999999999999999999|0|||", "callpath"),
    # issue 11, item 6: one spelling per number
    (b"|652;672", b"|652; 672", "bad time value"),
    (b"|300;301", b"|300;3_01", "bad time value"),
    (b"|300;301", b"|300;0301", "bad time value"),
    (b"|300;301", b"|300;301\x00", "bad time value"),
    (b"|300;301", b"|300;+301", "bad time value"),
    (b"|300;301", b"|300;-0", "bad time value"),
    (b"|300;301", b"|300;\xd9\xa3", "bad time value"),          # an Arabic-Indic 3
    (b"nranks 2", b"nranks 02", "'nranks'"),
    (b"nranks 2", b"nranks  2", "'nranks'"),
    (b"nranks 2", b"nranks 2\x00", "'nranks'"),
    (b"nranks 2", b"nranks 2_0", "'nranks'"),
    (b"ranks 0 2", b"ranks 0  2", "'ranks'"),
    (b"executions 2*2", b"executions 2*02", "'executions'"),
    (b"\nnames 5\n", b"\nnames 05\n", "names count"),
    (b"\nevents 5\n", b"\nevents +5\n", "events count"),
    (b"4|0|||", b"04|0|||", "callpath"),
    (b"|2|2|600", b"|2|2.0|600", "bad consistent"),
    (b"|2|2|600", b"|2|+2|600", "bad consistent"),
    (b"|600,3.75;", b"|600,3.750;", "bad inconsistent metric value"),
    (b"|600,3.75;", b"|600,3.75\x00;", "bad inconsistent metric value"),
]


@BOTH
@pytest.mark.parametrize("old,new,problem", BAD_EITHER)
def test_bad_content_names_file_line_and_problem(tmp_path, valid, old, new, problem):
    err = read_error(write(tmp_path, edit(valid, old, new)))
    assert problem in str(err)


@pytest.mark.parametrize("old,new,problem", [
    (b"version 0.1.0\n", b"", "header lacks version"),
    (b"0<4|0|||", b"0<5|0|||", "callpath"),
    (b"0<4|0|||", b"0<-1|0|||", "callpath"),
    (b"0<4|0|||", b"0< 4|0|||", "callpath"),
    (b"0<4|0|||", b"0<2|0|||", "twice"),
    (b"0<2<3|", b"0<4<3|", "parent"),
    (b"events 5", b"events 6", "fields, expected 5"),
    (b"events 5", b"events 4", "expected 'end'"),
    (b"end\n", b"end\nmore\n", "after the 'end'"),
])
def test_bad_version_1_content(tmp_path, old, new, problem):
    assert problem in str(read_error(write(tmp_path, edit(VALID_V1, old, new))))


@pytest.mark.parametrize("old,new,problem", [
    (b"version 0.1.0\n", b"", "expected 'version'"),
    (b"run 5f0c9e1d2a3b4c6d\nset flush 0\n", b"set flush 0\nrun 5f0c9e1d2a3b4c6d\n", "expected 'run'"),
    (b"unit ns\n", b"unit ns\nextra 1\n", "expected 'metrics'"),
    (b"unit ns\n", b"unit ns\nunit ns\n", "expected 'metrics'"),
    (b"run 5f0c9e1d2a3b4c6d", b"run 5F0C9E1D2A3B4C6D", "'run'"),
    (b"run 5f0c9e1d2a3b4c6d", b"run 5f0c9e1d2a3b4c6", "'run'"),
    (b"set flush 0", b"set flush 00", "'set'"),
    (b"set flush 0", b"set flushes 0", "'set'"),
    (b"set flush 0", b"set flush", "'set'"),
    (b"created 2023-11-14T22:13:20Z", b"created yesterday", "'created'"),
    (b"version 0.1.0", b"version ", "'version'"),
    (b"metrics tag:0 mem:1", b"metrics tag:0  mem:1", "'metrics'"),
    (b"metrics tag:0 mem:1", b"metrics tag:0 m%65m:1", "'metrics'"),
    (b"executions 2*2", b"executions 2,2", "'executions'"),
    (b"executions 2*2", b"executions 2*1,2*1", "'executions'"),
    (b"executions 2*2", b"executions 2*2,", "'executions'"),
    (b"\nmain\n", b"\nm%61in\n", "bad name"),
    (b"\nmain\n", b"\nmain%0a\n", "bad name"),
    (b"\nmain\n", b"\nma\rin\n", "bad name"),
    (b"0:4|0|||", b"0:5|0|||", "callpath"),
    (b"0:4|0|||", b"0:-1|0|||", "callpath"),
    (b"0:4|0|||", b"4:4|0|||", "parent line"),
    (b"0:4|0|||", b"0:2|0|||", "twice"),
    (b"0:4|0|||", b"0<4|0|||", "callpath"),
    (b"2:3|", b"3:3|", "parent line"),
    (b"2:3|", b"0:2:3|", "callpath"),
    (b"|300;301", b"|300;", "trailing empty execution"),
    (b"|6655,1024;", b"|6655,;", "trailing empty metric value"),
    (b"|2|2|600", b"|2|2,|600", "too many consistent"),
    (b"events 5", b"events 6", "only 5 lines follow"),
    (b"events 5", b"events 4", "expected 'section"),
    (b"\nend ", b"\nsection mpi 100\nx\nend ", "does not fit"),
    (b"\nend ", b"\nsection mpi 1\nxy\nend ", "does not fit"),
    (b"\nend ", b"\nsection Mpi 1\nx\nend ", "expected 'section"),
    (b"\nend ", b"\nsection mpi 01\nx\nend ", "expected 'section"),
    (b"\nend ", b"\nsection mpi 1\nx\nsection mpi 0\n\nend ", "twice"),
])
def test_bad_version_2_content(tmp_path, old, new, problem):
    assert problem in str(read_error(write(tmp_path, edit(VALID, old, new))))


@pytest.mark.parametrize("data", [
    VALID.replace(b"6655", b"6656"),                # a digit no grammar can catch
    VALID.replace(b"name fig2", b"name fig3"),
    VALID[:-2] + b"5\n",
    VALID.replace(b"\nevents 5\n0|", b"\nevents 5\n1|"),
])
def test_checksum_mismatch(tmp_path, data):
    err = read_error(write(tmp_path, data))
    assert err.line is None and err.problem.startswith("checksum mismatch: ")


@pytest.mark.parametrize("data", [VALID + b"\n", VALID + b"more\n", VALID[:-1],
                                  VALID.replace(b"end 062cfcd4", b"end 062CFCD4"),
                                  VALID.replace(b"end 062cfcd4", b"end  62cfcd4"),
                                  VALID.replace(b"end 062cfcd4", b"END 062cfcd4")])
def test_version_2_must_end_in_its_end_line(tmp_path, data):
    assert "truncated" in read_error(write(tmp_path, data)).problem


@BOTH
def test_error_names_the_line(tmp_path, valid):
    data = edit(valid, b"|300;301", b"|300;x")
    err = read_error(write(tmp_path, data))
    assert err.line == line_of(data, data.index(b"4|0|||300;x"))
    assert re.match(rf"{re.escape(str(tmp_path))}/fig2\.0-of-1\.tp:{err.line}: bad time value", str(err))


@pytest.mark.parametrize("make", ["fifo", "directory", "device"])
def test_only_regular_files_are_read(tmp_path, make):
    """A FIFO named like a profile file is a FormatError, not a reader blocked forever."""
    path = str(tmp_path / "fig2.0-of-1.tp")
    if make == "fifo":
        os.mkfifo(path)
    elif make == "directory":
        os.mkdir(path)
    else:
        path = os.devnull
    outcome = []
    reader = threading.Thread(target=lambda: outcome.append(_error_of(path)), daemon=True)
    reader.start()
    reader.join(120)            # a generous bound on a hang, not a timing assertion
    assert outcome and "not a regular file" in outcome[0], outcome


def _error_of(path: str) -> str:
    try:
        parse_file(path)
    except FormatError as e:
        return str(e)
    return "read without error"


def test_lone_surrogates_and_unicode_whitespace_in_names_read_back(tmp_path):
    keys = [("a\u2028b\tc", False), ("\ud800", True)]
    names = ["x\ud800", "\x85\u2029"]
    events = [LocalEvent((names[0],), 0, True, np.array([1]), np.array([0, 0]), {"\ud800": 2.0},
                         {"a\u2028b\tc": np.array([3.0])}),
              LocalEvent(tuple(names), 0, True, np.array([4]), np.array([0, 0]), {}, {})]
    header = Header(name="p\ud800", nranks=1, first_rank=0, rank_count=1, metrics=keys)
    write_atomic(str(tmp_path / "p.0-of-1.tp"), assemble.build_file(header, [events], [1]))
    p = tinyprof.read(tmp_path)
    assert p.name == "p\ud800" and p.metrics == keys
    assert p.callpaths == [(names[0],), tuple(names)]
    assert p.value((names[0],), "\ud800") == 2.0
    assert p.series((names[0],), 0, "a\u2028b\tc") == [[3.0]]


# -- profile sets and directories --------------------------------------------

def write_set(directory, nfiles: int = 3, name: str = "heat", runs=None, sets=None) -> list:
    """A set of ``nfiles`` one-rank files; ``runs``/``sets``: each file's run id
    and (kind, number), by default one run's flush 0."""
    paths = []
    for i in range(nfiles):
        events = [LocalEvent(("main",), 0, True, np.array([10 + i]), np.array([0, 0]), {}, {})]
        kind, number = sets[i] if sets else ("flush", 0)
        header = Header(name=name, nranks=nfiles, first_rank=i, rank_count=1,
                        file_index=i, file_count=nfiles, run=runs[i] if runs else RUN,
                        set_kind=kind, set_number=number)
        paths.append(os.path.join(directory, file_name(name, i, nfiles)))
        write_atomic(paths[-1], assemble.build_file(header, [events], [1]))
    return paths


def test_multi_file_set_reads_from_directory_or_any_file(tmp_path):
    paths = write_set(tmp_path)
    for target in [tmp_path, *paths]:
        for threads in (None, 1, 2, 5):
            p = tinyprof.read(target, threads=threads)
            assert p.files == paths
            assert [p.series(("main",), r) for r in range(3)] == [[[10e-9]], [[11e-9]], [[12e-9]]]


def test_threads_report_the_first_bad_file(tmp_path):
    paths = write_set(tmp_path, 4)
    for bad in paths[1:3]:
        with open(bad, "r+b") as f:
            f.seek(0, 2)
            f.seek(f.tell() - 3)
            f.write(b"zz\n")
    for threads in (1, 2, 4):
        with pytest.raises(FormatError) as err:
            tinyprof.read(tmp_path, threads=threads)
        assert err.value.path == paths[1]


@pytest.mark.parametrize("runs,sets", [
    ([RUN, RUN, "0123456789abcdef"], None),                                   # a rerun's file
    (None, [("flush", 1), ("flush", 2), ("flush", 1)]),                       # another flush
    (None, [("flush", 3), ("flush", 3), ("snapshot", 3)]),
    (None, [("snapshot", 4), ("snapshot", 5), ("snapshot", 5)]),
])
def test_files_of_another_run_or_flush_are_refused(tmp_path, runs, sets):
    """Issue 11, item 5: the first file that disagrees with file 0 is named."""
    paths = write_set(tmp_path, runs=runs, sets=sets)
    odd = paths[2] if runs else paths[1 if sets[1] != sets[0] else 2]
    err = read_error(tmp_path, odd)
    assert err.problem.startswith("from another flush/run: "), err.problem
    assert paths[0] in err.problem


def test_a_version_1_file_in_a_version_2_set_is_refused(tmp_path):
    paths = write_set(tmp_path, 2)
    v1 = (b"tinyprof 1\nname heat\nnranks 2\nranks 1 1\nfile 1 2\nunit ns\nmetrics \n"
          b"created 2000-01-01T00:00:00Z\nversion 0.1.0\nexecutions 1\nnames 1\nmain\n"
          b"events 1\n0|0||11\nend\n")
    assert parse_file(write(tmp_path, v1, "alone.tp")).header.format_version == 1
    write(tmp_path, v1, os.path.basename(paths[1]))
    assert "from another flush/run" in read_error(tmp_path, paths[1]).problem


def test_profile_knows_its_run_and_set(tmp_path):
    write_set(tmp_path, sets=[("snapshot", 7)] * 3)
    p = tinyprof.read(tmp_path)
    assert (p.run, p.set) == (RUN, ("snapshot", 7))


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

