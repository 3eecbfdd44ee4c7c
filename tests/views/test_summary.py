"""``tinyprof show`` on a snapshot whose root was still open (what a SIGTERM
leaves), and ``--limit`` meaning the same in every command."""
from __future__ import annotations

import re

from test_mpi_convert import make_profile

import tinyprof
from tinyprof.cli import main
from tinyprof.runtime import session


def _rows(out: str):
    return {line.split()[0]: line.split() for line in out.splitlines()[2:] if line.strip()}


def test_show_gives_the_share_of_the_recorded_run_while_the_root_is_open(tmp_path, clock, capsys):
    out = tmp_path / "s"
    tinyprof.Profiler("s", frequency=3600, outdir=out)
    with tinyprof.Event("main"):
        with tinyprof.Event("solve"):
            clock.tick(3000)
        with tinyprof.Event("io"):
            clock.tick(1000)
        assert session.current().snapshotter.take(1)      # as at a SIGTERM: main still open
    assert main(["show", str(out)]) == 0
    text = capsys.readouterr().out
    assert "main still open when written" in text.splitlines()[0]
    rows = _rows(text)
    assert rows["main"][1:] == ["0/1"] + ["-"] * 7
    assert rows["solve"][6] == "75.0" and rows["io"][6] == "25.0"   # % run


def test_show_share_of_a_closed_run(tmp_path, clock, capsys):
    tinyprof.Profiler("c", outdir=tmp_path / "c")
    with tinyprof.Event("main"):
        clock.tick(1000)
        with tinyprof.Event("solve"):
            clock.tick(3000)
    assert main(["show", tinyprof.flush()]) == 0
    text = capsys.readouterr().out
    assert "still open" not in text
    rows = _rows(text)
    assert rows["main"][6] == "100.0" and rows["solve"][6] == "75.0"


def test_limit_0_means_all_rows_in_every_command(tmp_path, clock, capsys):
    where = make_profile(tmp_path / "m", clock)
    assert main(["mpi", where]) == 0
    every = capsys.readouterr().out
    assert "not shown" not in every and len(every.splitlines()) == 2 + 9
    assert main(["mpi", where, "--limit", "0"]) == 0
    assert capsys.readouterr().out == every
    assert main(["mpi", where, "--limit", "2"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "(7 more rows not shown: --limit)"
    for parser_help in (["mpi", "--help"], ["critical-path", "--help"], ["wait-states", "--help"]):
        try:
            main(parser_help)
        except SystemExit:
            pass
        assert "0: all" in " ".join(capsys.readouterr().out.split())


def test_show_and_the_report_print_the_run_line(tmp_path, clock, capsys, monkeypatch):
    from tinyprof.views import report_page
    tinyprof.Profiler("h", outdir=tmp_path / "h", metadata={"command": "app \x1b[2J --n 4"})
    with tinyprof.Event("main"):
        clock.tick(10)
    assert main(["show", tinyprof.flush()]) == 0
    line = capsys.readouterr().out.splitlines()[-2]          # above the "Next:" hint
    assert re.fullmatch(r"run: started \S+Z, 1 ranks on 1 node\(s\)(, git [0-9a-f]{12})?, "
                        r"command: app \\x1b\[2J --n 4", line)       # escaped
    assert report_page.build(tinyprof.read(tmp_path / "h"))["run"] == line
    monkeypatch.setenv("TINYPROF_AUTO_METADATA", "0")     # no metadata: no line
    tinyprof.Profiler("n", outdir=tmp_path / "n")
    with tinyprof.Event("main"):
        clock.tick(10)
    assert main(["show", tinyprof.flush()]) == 0
    assert not any(x.startswith("run:") for x in capsys.readouterr().out.splitlines())
