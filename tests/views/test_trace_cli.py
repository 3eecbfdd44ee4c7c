"""``tinyprof critical-path`` and ``tinyprof wait-states`` on the traced demo
(3 real MPI ranks), and on profiles they cannot analyse."""
from __future__ import annotations

import os
import re
import shutil

import pytest

import tinyprof
from tinyprof import cli


def run(capsys, *argv):
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_critical_path_summary_and_segments(traced_demo, capsys):
    where = os.path.dirname(traced_demo.files[0])
    status, out, err = run(capsys, "critical-path", where)
    assert status == 0 and err == ""
    head, columns, *rows = out.splitlines()
    m = re.fullmatch(r"heat: critical path ([0-9.]+) (ms|s) over (\d+) visits to (\d) of 3 ranks; "
                     r"wall time ([0-9.]+) (ms|s) \(([0-9.]+)%\)", head)
    assert m, head
    # the path is contiguous: it is the wall time less the start of its first segment
    path = traced_demo.critical_path()
    length, wall = path["duration"].sum(), traced_demo.trace.wall_time * 1e-9
    assert length == pytest.approx(wall - path["start"].iloc[0], abs=1e-9)
    assert float(m[7]) == pytest.approx(100 * length / wall, abs=0.006)
    assert columns.split()[:2] == ["callpath", "rank"]
    summary = traced_demo.critical_path_summary()
    assert len(rows) == min(20, len(summary)) + (len(summary) > 20)
    first = rows[0].split()
    assert (first[0], int(first[1])) == ("<".join(summary.iloc[0]["callpath"]),
                                         summary.iloc[0]["rank"])
    status, out, _ = run(capsys, "critical-path", where, "--segments", "--limit", "5")
    lines = out.splitlines()
    assert status == 0 and len(lines) == 2 + 5 + 1
    assert lines[-1] == f"... {len(path) - 5} more (--limit 0 shows all)"
    assert lines[2].split()[0] == "<".join(path.iloc[0]["callpath"]) or \
        lines[2].startswith("(outside")


def test_wait_states_table(traced_demo, capsys):
    status, out, err = run(capsys, "wait-states", os.path.dirname(traced_demo.files[0]),
                           "--limit", "0")
    assert status == 0 and err == ""
    lines = out.splitlines()
    table = traced_demo.wait_states()
    assert lines[0].startswith("heat: waiting in MPI calls, ") and len(lines) == 2 + len(table)
    assert lines[1].split()[:2] == ["callpath", "rank"]
    assert all(kind in lines[1] for kind in ("late sender", "late receiver", "wait collective",
                                             "wait barrier", "total"))
    assert {line.split()[0] for line in lines[2:]} <= {"main<halo", "main<residual"}


def test_profiles_without_trace_or_broken_say_so(tmp_path, traced_demo, capsys):
    tinyprof.Profiler("plain", outdir=str(tmp_path / "plain"))
    with tinyprof.Event("a"):
        pass
    tinyprof.flush()
    for command in ("critical-path", "wait-states"):
        status, out, err = run(capsys, command, str(tmp_path / "plain"))
        assert status == 1 and out == ""
        assert err.startswith("tinyprof: ") and "no trace: record with Profiler(trace=True)" in err
        assert len(err.splitlines()) == 1
    broken = tmp_path / "broken"
    shutil.copytree(os.path.dirname(traced_demo.files[0]), broken)
    name = sorted(os.listdir(broken))[0]
    data = bytearray((broken / name).read_bytes())
    at = data.index(b"section trace ")
    data[at + 100] = ord("#") if data[at + 100] != ord("#") else ord("$")
    (broken / name).write_bytes(bytes(data))
    status, out, err = run(capsys, "critical-path", str(broken))
    assert status == 2 and out == "" and name in err and len(err.splitlines()) == 1
