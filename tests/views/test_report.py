"""``tinyprof report``: the report's numbers against the Profile they come from,
and the page rendered by a real headless Chromium (offline, no script error)
for a two-file profile, the traced demo with MPI capture, a time series of
snapshots and 1,024 ranks x 200 callpaths."""
from __future__ import annotations

import os
import re
import sys

import numpy as np
import pytest
from _browser import Browser
from test_convert import NRANKS, make_profile

import tinyprof
from tinyprof.cli import main
from tinyprof.views import report_page

pytest.importorskip("plotly")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCHMARKS = os.path.join(ROOT, "benchmarks")


def _seconds(profile, path, rank):
    return sum(map(sum, profile.series(path, rank)))


def test_report_data_is_the_profile(tmp_path, clock):
    profile = tinyprof.read(make_profile(tmp_path / "prof", clock))
    data = report_page.build(profile)
    paths = []
    for i, c in enumerate(data["callpaths"]):          # tree order: each parent before its children
        assert c["parent"] < i
        paths.append((paths[c["parent"]] if c["parent"] >= 0 else ()) + (c["name"],))
        assert c["path"] == "<".join(paths[-1])
    assert sorted(paths) == sorted(profile.callpaths)
    for i, path in enumerate(paths):
        for rank in range(NRANKS):
            assert data["inc"][i][rank] == pytest.approx(_seconds(profile, path, rank), rel=1e-4)
            assert data["count"][i][rank] == sum(map(len, profile.series(path, rank)))
            kids = [p for p in paths if p[:-1] == path]
            own = _seconds(profile, path, rank) - sum(_seconds(profile, k, rank) for k in kids)
            assert data["exc"][i][rank] == pytest.approx(own, rel=1e-4, abs=1e-12)
    # The run's recorded time: "tail" is still open, so the time of what closed inside it.
    assert data["runtime"] == pytest.approx([_seconds(profile, ("main",), r) + _seconds(
        profile, ("tail", "inner"), r) for r in range(NRANKS)], rel=1e-4)
    # Per (execution, iteration): min, mean and max across the ranks that ran it.
    compute = ("main", "compute")
    got = data["iterations"][str(paths.index(compute))]
    want = {}
    for rank in range(NRANKS):
        for e, values in enumerate(profile.series(compute, rank)):
            for it, v in enumerate(values):
                want.setdefault((e, it), []).append(v)
    keys = sorted(want)
    assert list(zip(got["execution"], got["iteration"])) == keys and not got["binned"]
    assert got["min"] == pytest.approx([min(want[k]) for k in keys], rel=1e-4)
    assert got["max"] == pytest.approx([max(want[k]) for k in keys], rel=1e-4)
    assert got["mean"] == pytest.approx([np.mean(want[k]) for k in keys], rel=1e-4)
    assert str(paths.index(("tail",))) not in data["iterations"]      # never a value
    assert data["mpi"] is None and data["trace"] is None and data["snapshots"]["series"] == []


def test_iterations_are_binned_to_a_bounded_size(tmp_path, clock, monkeypatch):
    monkeypatch.setattr(report_page, "MAX_POINTS", 3)
    profile = tinyprof.read(make_profile(tmp_path / "prof", clock))
    got = report_page.build(profile)["iterations"]
    assert all(len(s["mean"]) <= 3 for s in got.values())
    index = [i for i, c in enumerate(report_page.build(profile)["callpaths"])
             if c["path"] == "main<compute"][0]
    comm = got[str(index)]              # up to 6 iterations x 3 executions: in 3 bins
    values = [v for r in range(NRANKS) for s in profile.series(("main", "compute"), r) for v in s]
    assert comm["binned"] and min(comm["min"]) == pytest.approx(min(values), rel=1e-4)
    assert max(comm["max"]) == pytest.approx(max(values), rel=1e-4)


def test_snapshots_over_time(tmp_path, step_snapshots):
    out = tmp_path / "s"
    step_snapshots(out, [3, 0, 5])
    data = report_page.build(tinyprof.read(out, snapshot=3), str(out))
    snaps = data["snapshots"]
    assert snaps["numbers"] == [1, 2, 3]
    series = {data["callpaths"][s["callpath"]]["path"]: s["values"] for s in snaps["series"]}
    assert series == {"main<step": pytest.approx([3e-6, 0, 5e-6]),
                      "main": pytest.approx([1e-8] * 3)}


def test_the_command_writes_a_report_and_says_where(tmp_path, clock, capsys):
    src = make_profile(tmp_path / "prof", clock)
    out = tmp_path / "r.html"
    assert main(["report", src, "-o", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"tinyprof: wrote {out}")
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "Plotly" in page
    # everything inline: no script or stylesheet loaded from elsewhere
    assert not re.search(r"<(script|link)\b[^>]*\b(src|href)=", page)
    assert main(["report", str(tmp_path / "missing"), "-o", str(out)]) == 2
    assert "missing" in capsys.readouterr().err


# -- in a real browser -------------------------------------------------------------

def _render(path, checks=()):
    """Open the report from disk in headless Chromium; the page's facts."""
    with Browser(1500, 1400) as b:
        b.open(f"file://{path}")
        b.wait_for("document.body && document.body.dataset.ready === '1'", timeout=120)
        facts = b.evaluate("""(() => ({
            sections: [...document.querySelectorAll('section')].map(s => s.id),
            plots: [...document.querySelectorAll('.js-plotly-plot')].map(p => p.id),
            notes: [...document.querySelectorAll('section .note')].map(n => n.closest('section').id),
            rows: [...document.querySelectorAll('#tree-table tbody tr')].map(r => r.dataset.callpath),
            selected: document.querySelector('#tree-table tr.selected').dataset.callpath,
            title: document.getElementById('detail-title').textContent,
            heatRows: document.getElementById('heat').data[0].z.length,
            heatCols: document.getElementById('heat').data[0].z[0].length }))()""")
        facts["checks"] = [b.evaluate(c) for c in checks]
        facts["console"], facts["blocked"], facts["requests"] = b.console, b.blocked, b.requests
    return facts


SECTIONS = ["tree", "detail", "heatmap", "snapshots", "efficiency", "mpi", "trace"]
CLICK_ROW = """(() => { const row = [...document.querySelectorAll('#tree-table tbody tr')]
    .find(r => r.dataset.callpath === %r); row.click();
    return document.getElementById('detail-title').textContent; })()"""
FOLD = """(() => { const row = [...document.querySelectorAll('#tree-table tbody tr')]
    .find(r => r.dataset.callpath === %r); row.querySelector('.toggle').click();
    return document.querySelectorAll('#tree-table tbody tr').length; })()"""


def test_the_traced_demo_report_renders_every_section(traced_demo, tmp_path):
    out = tmp_path / "demo.html"
    report_page.write(traced_demo, out)
    facts = _render(out, [CLICK_ROW % "main<halo", FOLD % "main",
                          "document.getElementById('critical-length').textContent"])
    assert facts["console"] == [] and facts["blocked"] == []
    assert facts["requests"] == [f"file://{out}"]           # one file, nothing fetched
    assert facts["sections"] == SECTIONS
    assert set(facts["plots"]) == {"dist", "iters", "heat", "mpi-time", "mpi-bytes", "mpi-matrix",
                                   "critical-plot", "wait-plot"}
    assert facts["notes"] == ["snapshots"]                 # a flush: no time series
    assert sorted(facts["rows"]) == sorted("<".join(p) for p in traced_demo.callpaths)
    assert (facts["heatRows"], facts["heatCols"]) == (len(traced_demo.callpaths), 3)
    clicked, folded, critical = facts["checks"]
    assert clicked.startswith("main<halo: ran on 3 of 3 ranks")
    assert folded == 1                                      # main folded: its children hidden
    assert critical.startswith("Critical path ") and "of 3 ranks" in critical


def test_a_profile_without_mpi_trace_or_snapshots_says_how_to_get_them(tmp_path, clock):
    out = tmp_path / "r.html"
    report_page.write(make_profile(tmp_path / "prof", clock), out)
    facts = _render(out)
    assert facts["console"] == [] and facts["sections"] == SECTIONS
    assert facts["notes"] == ["snapshots", "efficiency", "mpi", "trace"]
    assert set(facts["plots"]) == {"dist", "iters", "heat"}


def test_1024_ranks_by_200_callpaths(tmp_path):
    sys.path.insert(0, BENCHMARKS)
    try:
        import formats
    finally:
        sys.path.remove(BENCHMARKS)
    formats.write_tinyprof(str(tmp_path / "big"), 1024)
    out = tmp_path / "big.html"
    report_page.write(str(tmp_path / "big"), out)
    facts = _render(out, [CLICK_ROW % "main<phase3<kernel13"])
    assert facts["console"] == [] and len(facts["rows"]) == 200
    assert (facts["heatRows"], facts["heatCols"]) == (200, 1024)
    assert facts["checks"][0].startswith("main<phase3<kernel13: ran on 1024 of 1024 ranks")


def test_numbers_are_rounded_to_five_digits_as_printf_would():
    rng = np.random.default_rng(5)
    values = np.concatenate([rng.lognormal(0, 12, 100_000) * rng.choice([-1, 1], 100_000),
                             [0.0, np.nan, 1.5, 2.5, 123456789012.0, 0.30000000000000004]])
    want = [None if v != v else v for v in np.char.mod("%.5g", values).astype(np.float64).tolist()]
    assert report_page.rounded(values) == want


def test_report_mpi_tables_are_the_profiles(traced_demo):
    """The MPI section's rows: calls, bytes and time per (communicator, op,
    size) as pandas sums them from ``profile.mpi``, largest time first."""
    data = report_page.build(traced_demo)["mpi"]
    frame = traced_demo.mpi
    want = frame.groupby(["comm", "op", "bucket"])[["calls", "bytes", "time"]].sum()
    got = {(comm, op, size): (calls, nbytes, time) for comm, op, size, calls, nbytes, time in data["ops"]}
    assert len(got) == len(data["ops"]) == len(want) > 0
    from tinyprof.views.mpi_text import size_range
    for (comm, op, bucket), r in want.iterrows():
        calls, nbytes, time = got[comm or "(completion)", op, size_range(int(bucket))]
        assert (calls, nbytes) == (int(r.calls), int(r.bytes))
        assert time == pytest.approx(r.time, rel=1e-4)
    times = [row[5] for row in data["ops"]]
    assert times == sorted(times, reverse=True)
    assert data["total_time"] == pytest.approx(frame["time"].sum(), rel=1e-12)
