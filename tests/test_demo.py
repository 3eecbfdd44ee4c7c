"""``make demo`` (``python -m tinyprof.demo --run``, then ``tinyprof report``)
fills every section of the report: the tree, MPI, the trace and the
snapshots over time (docs/guide.md, "Try it first")."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from _browser import Browser
from test_mpi_large import needs_mpi

import tinyprof
from tinyprof.runtime import capture
from tinyprof.views import report_page


@needs_mpi
@pytest.mark.skipif(not os.path.exists(capture.LIBRARY), reason="libtinyprof_mpi.so not built")
def test_the_demo_fills_every_section_of_its_report(tmp_path):
    out = tmp_path / "demo.tinyprof"
    done = subprocess.run([sys.executable, "-m", "tinyprof.demo", "--run", "-n", "2",
                           "--steps", "40", str(out)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if not k.startswith("TINYPROF")})
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "\nCritical path (tinyprof critical-path" in done.stdout
    assert "\nWait states (tinyprof wait-states" in done.stdout
    assert "\nMPI calls (tinyprof mpi" in done.stdout
    profile = tinyprof.read(str(out))
    data = report_page.build(profile, str(out))          # what `tinyprof report OUTDIR` shows
    assert sorted(p["path"] for p in data["callpaths"]) == [
        "main", "main<boundary", "main<halo", "main<init", "main<residual", "main<stencil"]
    assert data["mpi"] is not None and {row[1] for row in data["mpi"]["ops"]} >= {"Sendrecv"}
    trace = data["trace"]
    assert trace is not None and trace["ranks"] >= 1 and trace["critical"] and trace["waits"]
    assert 0 < trace["length"] <= trace["wall"]
    # a snapshot after every 20 steps, all kept: the time series has 2 points
    snapshots = data["snapshots"]
    assert snapshots["numbers"] == [1, 2] and len(snapshots["created"]) == 2
    assert snapshots["series"] and all(len(s["values"]) == 2 for s in snapshots["series"])
    halo = [p["path"] for p in data["callpaths"]].index("main<halo")
    assert [s["values"] for s in snapshots["series"] if s["callpath"] == halo][0][0] > 0
    # the efficiencies per callpath, and per interval between the two snapshots
    pop = data["pop"]
    assert pop is not None and len(pop["rows"]) == len(data["callpaths"])
    assert pop["history"]["numbers"] == [1, 2] and pop["history"]["series"]
    # in Chromium: a plot in every section, no note saying how to get the data
    pytest.importorskip("plotly")
    page = tmp_path / "demo-report.html"
    report_page.write(str(out), page)
    with Browser(1500, 1400) as b:
        b.open(f"file://{page}")
        b.wait_for("document.body && document.body.dataset.ready === '1'", timeout=120)
        facts = b.evaluate("""(() => ({
            sections: [...document.querySelectorAll('section')].map(s => [s.id,
                s.querySelectorAll('.js-plotly-plot, table').length]),
            notes: [...document.querySelectorAll('section .note')].map(n => n.textContent) }))()""")
        assert b.console == []
    assert [name for name, _ in facts["sections"]] == [
        "tree", "detail", "heatmap", "snapshots", "efficiency", "mpi", "trace"]
    assert all(shown for _, shown in facts["sections"]) and facts["notes"] == [], facts
