"""Format version 3's execution gaps: a callpath that skips executions writes
``*k;`` (k >= 2 executions on) instead of one ``;`` per execution, so a
request loop, whose every execution adds a callpath, writes a file linear in
its size; the reader checks the gaps strictly and still reads version 2."""
from __future__ import annotations

import os
import zlib

import numpy as np
import pytest

import tinyprof
from tinyprof.errors import FormatError
from tinyprof.format.encoding import encode_rank_field
from tinyprof.format.output_dir import write_atomic
from tinyprof.format.reader import parse_file

Event = tinyprof.Event


def field(times, execs, start=0) -> bytes:
    return encode_rank_field(np.array(times, np.int64), np.array(execs, np.int64), (), start)


@pytest.mark.parametrize("execs,expected", [
    ([0, 0, 1, 1, 2, 2], b"1;2;3"),
    ([0, 0, 2, 1, 9, 2], b"1*2;2*7;3"),
    ([1, 0, 3, 2], b";1+2*2;3"),
    ([5, 0], b"*5;1+2+3"),
    ([2, 0, 4, 0], b"*4;1+2+3"),         # two executions at one index (a race): the later
])
def test_gaps_are_written_in_constant_space(execs, expected):
    assert field([1, 2, 3], execs) == expected


@pytest.mark.parametrize("start", range(4))
def test_an_appended_field_continues_the_whole_one(start):
    times, execs = [1, 2, 3, 4], [1, 0, 6, 1, 7, 3]
    assert field(times[:start], execs) + field(times, execs, start) == field(times, execs)


def test_a_long_field_is_encoded_in_chunks_as_whole():
    n = (1 << 16) * 2 + 5          # over two chunks; executions start on both sides of a border
    times = np.arange(n, dtype=np.int64) - 7
    firsts = [0, 3, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, n - 1]
    execs = np.array([x for i, f in enumerate(firsts) for x in (3 * i + 1, f)], np.int64)
    pieces = []
    for i, f in enumerate(firsts):
        end = firsts[i + 1] if i + 1 < len(firsts) else n
        pieces.append((";" if i == 0 else "*3;") + "+".join(map(str, times[f:end].tolist())))
    assert encode_rank_field(times, execs) == "".join(pieces).encode()


def request_loop(tmp_path, executions: int) -> str:
    """A request loop: every execution of the root adds a callpath."""
    outdir = str(tmp_path / f"loop{executions}")
    tinyprof.Profiler("loop", outdir=outdir)
    for i in range(executions):
        with Event("request"):
            with Event(f"handler{i}"):
                pass
            if i % 7 == 6:
                with Event("every seventh"):
                    pass
    tinyprof.flush()
    return outdir + "/loop.0-of-1.tp"


def test_a_request_loop_file_grows_linearly(tmp_path):
    path = request_loop(tmp_path, 2000)
    lines = open(path, "rb").read().split(b"\n")
    names = lines[lines.index(b"names 2002") + 1:][:2002]
    events = lines[lines.index(b"events 2002") + 1:][:2002]
    handlers = [line for line in events
                if names[int(line.split(b"|")[0].split(b":")[-1])].startswith(b"handler")]
    # a handler's line holds its path, one gap and one time: its length does
    # not grow with the executions before it, nor the file with their product
    assert len(handlers) == 2000
    assert max(len(line) for line in handlers) < 48
    assert handlers[-1].startswith(b"0:2001|0||*1999;")
    assert os.path.getsize(path) < 2000 * 100
    p = tinyprof.read(path)
    assert [len(ex) for ex in p.series(("request", "handler1999"), 0)] == [0] * 1999 + [1]
    assert [len(ex) for ex in p.series(("request", "every seventh"), 0)] == \
        [int(i % 7 == 6) for i in range(2000)]


@pytest.mark.parametrize("parser", ["c", "python"])
def test_gapped_files_read_back_with_either_parser(tmp_path, parser):
    got = parse_file(request_loop(tmp_path, 50), parser)
    handler = got.names.index("handler49")
    line = got.ids.index(handler)
    assert got.lines[line].slots.tolist() == [49]
    assert got.header.format_version == 3


def _v3(tmp_path, fld: bytes, version: int = 3) -> str:
    body = (b"tinyprof %d\nname h\nrun 0000000000000000\nset flush 0\nnranks 1\nranks 0 1\n"
            b"file 0 1\nunit ns\nmetrics m:1\ncreated 2026-01-02T03:04:05Z\nversion 0\n"
            b"executions 5\nnames 2\na\nb\nevents 2\n0|0||1;2;3;4;5\n0:1|1||" % version
            + fld + b"\n")
    path = str(tmp_path / "gap.tp")
    write_atomic(path, body + b"end %08x\n" % zlib.crc32(body))
    return path


@pytest.mark.parametrize("fld,executions", [
    (b"7", [[7], [], [], [], []]),
    (b";7", [[], [7], [], [], []]),
    (b"*4;7,1.5+8", [[], [], [], [], [7, 8]]),
    (b"7*2;8;9", [[7], [], [8], [9], []]),
    (b"7;8*3;9", [[7], [8], [], [], [9]]),
])
@pytest.mark.parametrize("parser", ["c", "python"])
def test_valid_gaps_read(tmp_path, fld, executions, parser):
    got = parse_file(_v3(tmp_path, fld), parser)
    line = got.lines[1]
    per_exec = [[] for _ in range(5)]
    times = iter(line.times.tolist())
    for slot, count in zip(line.slots.tolist(), line.counts.tolist()):
        per_exec[slot] = [next(times) for _ in range(count)]
    assert per_exec == executions


@pytest.mark.parametrize("fld", [
    b"7;;8",            # an empty execution: version 3 writes a gap
    b";;8",             # so is a second leading one
    b"7*1;8",           # a gap of 1 is ';'
    b"7*02;8",          # one spelling
    b"7*;8",
    b"7*-2;8",
    b"7*2",             # a gap leads to an execution
    b"7*2;",
    b"*2;",
    b"7*2;*2;8",        # two gaps in a row are one
    b";*2;8",
    b"7*5;8",           # beyond the 5 executions of the header
    b"*5;8",
    b"7*99999999999999999999;8",
    b"7*2*2;8",
    b"7,1*2;8*x;9",
    b"7;8;9;10;11;12",  # more executions than the header says
])
@pytest.mark.parametrize("parser", ["c", "python"])
def test_malformed_gaps_are_format_errors(tmp_path, fld, parser):
    with pytest.raises(FormatError):
        parse_file(_v3(tmp_path, fld), parser)


@pytest.mark.parametrize("parser", ["c", "python"])
def test_version_2_reads_empty_executions_and_refuses_gaps(tmp_path, parser):
    got = parse_file(_v3(tmp_path, b";;7;;8", version=2), parser)
    assert got.lines[1].slots.tolist() == [2, 4]
    with pytest.raises(FormatError):
        parse_file(_v3(tmp_path, b"7*2;8", version=2), parser)
