"""Names built to drive a terminal (escape sequences, C0/C1 controls, DEL,
bidi overrides, line breaks) printed by every terminal view: ``show``,
``mpi`` (callpaths and communicators), ``critical-path`` and ``wait-states``.
Each character a terminal would act on is printed escaped, the escaped name
is there to read, and the columns stay aligned, wide characters too."""
from __future__ import annotations

from helpers.files import deep_file, write_file
from helpers.profiles import record_ranks, write_profile

import tinyprof
from tinyprof import annotate
from tinyprof.cli import main
from tinyprof.format.mpi_section import NONE, Communicator, bucket, encode
from tinyprof.runtime import collect as _collect
from tinyprof.views.text import printable, width

HOSTILE = ["\x1b]0;title\x07", "\x1b[2J\x1b[H", "\x1b]52;c;ZXZpbA==\x07", "\x9b31m", "\x85",
           "del\x7f", "\u202egnp.exe", "\u2066iso\u2069", "two\nlines", "back\rover", "tab\t",
           "\\x1b", "界面"]
NAME = "prof\x1b]0;title\x07"


def _terminal_safe(out: str) -> None:
    assert all(c.isprintable() or c == "\n" for c in out), [c for c in out if not c.isprintable()]


def _aligned(lines) -> None:
    """Every column right-aligned but the first: every line of a table is as wide."""
    assert len({width(line) for line in lines}) == 1, lines


def _run(capsys, *argv) -> str:
    assert main(list(argv)) == 0
    out, err = capsys.readouterr()
    assert err == ""
    _terminal_safe(out)
    return out


def test_printable_escapes_what_a_terminal_acts_on():
    assert printable("a\x1b]0;t\x07b") == "a\\x1b]0;t\\x07b"
    assert printable("\u202eabc\x7f\x9b") == "\\u202eabc\\x7f\\x9b"
    assert printable("a\\x1b\x1b") == "a\\\\x1b\\x1b"      # a written backslash stays apart
    assert printable("a\\b") == "a\\b" and printable("界面 ok") == "界面 ok"
    for name in HOSTILE:
        assert printable(printable(name)) == printable(name)
        assert printable(name).isprintable()


def _record(rank, clock):
    for name in HOSTILE:
        with tinyprof.Event(name):
            with tinyprof.Event(name + "<inner"):
                clock.tick(1000)
    return _collect.collect(annotate.impl.root())


def test_show_and_mpi_escape_names(tmp_path, clock, capsys):
    prof = tinyprof.Profiler(NAME, outdir=tmp_path / "p")
    ranks, executions = record_ranks(1, _record, clock)
    comms = [Communicator("COMM_WORLD", 1, (0,), NONE)]   # the reader allows [A-Za-z0-9_.@]
    lines = [e.path for e in ranks[0]]
    ops = [(0, lines.index((name, name + "<inner")), 0, "Bcast", bucket(8), 1, 8, 100 + k)
           for k, name in enumerate(HOSTILE)]
    where = write_profile(tmp_path / "p", NAME, prof.metrics, ranks, executions, [(0, 1)],
                          lambda index, lo, hi: [("mpi", encode(comms, ops, []))])

    out = _run(capsys, "show", where)
    head, *table = out.split("\n\n")[0].splitlines()
    assert head.startswith(printable(NAME) + ": 1 ranks")
    _aligned(table)
    assert [line.split("  ")[0] for line in table[1::2]] == [printable(n) for n in HOSTILE]

    out = _run(capsys, "mpi", where, "--by", "callpath,comm", "--comms")
    head, *rows = out.split("\n\n")[0].splitlines()
    assert head.startswith(printable(NAME) + ": 1 ranks")
    _aligned(rows)
    assert sorted(r.split("  ")[0].rstrip() for r in rows[1:]) == sorted(
        printable(f"{n}<{n}<inner") for n in HOSTILE)


def test_trace_views_escape_names(tmp_path, clock, capsys):
    tinyprof.Profiler(NAME, outdir=tmp_path / "t", trace=True)
    for name in HOSTILE:
        with tinyprof.Event(name):
            clock.tick(1000)
    where = tinyprof.flush()
    for command in ("critical-path", "wait-states"):
        out = _run(capsys, command, where)
        assert out.startswith(printable(NAME) + ": ")
    out = _run(capsys, "critical-path", where, "--limit", "0")
    head, columns, *rows = out.splitlines()
    _aligned([columns, *rows])
    assert sorted(r.split("  ")[0].rstrip() for r in rows) == sorted(map(printable, HOSTILE))


def test_show_stays_bounded_on_deep_trees_and_huge_names(tmp_path, capsys):
    """A tree 3,000 levels deep indents 32 levels and then says its depth,
    and a 10^6-character name is cut in its middle: every line of ``show``
    stays a few hundred columns wide, so its output follows the callpaths
    (it was the sum of their depths, 2 GB at 20,000 levels)."""

    deep_file(tmp_path / "deep", 3000)
    out = _run(capsys, "show", str(tmp_path / "deep"))
    lines = out.splitlines()
    assert max(map(len, lines)) < 500 and len(lines) > 3000
    assert any(line.lstrip().startswith("[2999] ") for line in lines)
    huge = "h\x1b" + "n" * 1_000_000 + "end"
    write_file(tmp_path / "wide", ["main", huge], [-1, 0], [0, 1], [[b"9", b"5"]])
    out = _run(capsys, "show", str(tmp_path / "wide"))
    assert max(map(len, out.splitlines())) < 500
    assert "h\\x1bnnn" in out and "nnnend" in out and "…" in out
