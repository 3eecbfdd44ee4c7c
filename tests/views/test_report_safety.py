"""The report with names built to break it, and the pictures drawn true.

Names that would break the HTML, the JSON inside its <script>, or Plotly's
pseudo-HTML (tags, links, entities, LaTeX) show as the text they are in a
real headless Chromium, and create no element. The charts: the heatmap's
scale starts at 0, rank axes tick at whole ranks, the size legend is in size
order with a colour each, the iterations' axis counts occurrences, each
table column has one unit, a short region is not flagged for imbalance, and
no chart's toolbar covers its title."""
from __future__ import annotations

import json
import re

import pytest
from _browser import Browser
from test_convert import record_ranks, write_profile

import tinyprof
from tinyprof import annotate
from tinyprof.runtime import collect as _collect
from tinyprof.runtime import session
from tinyprof.views import report_page

pytest.importorskip("plotly")

HOSTILE = ["<!--<script>", "</script><script>window.pwned=1</script>", "<b>bold</b>",
           '<a href="https://example.com/x">link</a>', "line<br>break", "<i>it</i><sub>2</sub>",
           '<img src=x onerror="window.pwned=1">', "&amp; &lt;b&gt; &#60;", "$x^2$",
           "ls\u2028ps\u2029", "]]> -->", '{"json": "</"}', "1", "2024-01-01", "<span style=\"color:red\">r</span>"]


def _payload(page: str) -> str:
    return re.search(r'<script type="application/json" id="tinyprof-data">(.*?)</script>', page, re.S)[1]


@pytest.fixture
def hostile(tmp_path, clock):
    """A traced profile whose callpaths and name are HOSTILE, with snapshots kept."""
    out = tmp_path / "h"
    tinyprof.Profiler("<b>run</b><!--", frequency=3600, outdir=out, keep="all", trace=True)
    for k in (1, 2):
        for i, name in enumerate(HOSTILE):
            with tinyprof.Event(name):
                clock.tick(1000 * (i + 1))
                with tinyprof.Event(HOSTILE[-1 - i]):
                    clock.tick(500)
        assert session.current().snapshotter.take(k)
    tinyprof.flush()
    return str(out)


def test_the_embedded_json_holds_no_markup_and_gives_the_names_back(hostile, tmp_path):
    data = report_page.build(tinyprof.read(hostile), hostile)
    page = report_page.render(data)
    payload = _payload(page)
    assert not set(payload) & set("<>&\u2028\u2029")
    assert json.loads(payload) == data
    assert {c["name"] for c in data["callpaths"]} == set(HOSTILE)
    assert page.count("<script") == 3                 # plotly, the data, report.js


def _facts(path, script):
    with Browser(1500, 1400) as b:
        b.open(f"file://{path}")
        b.wait_for("document.body && document.body.dataset.ready === '1'", timeout=120)
        facts = b.evaluate(script)
        facts["console"], facts["blocked"] = b.console, b.blocked
    return facts


HOSTILE_FACTS = """(() => {
  const texts = (sel) => [...document.querySelectorAll(sel)].map((t) => t.textContent);
  return {
    pwned: window.pwned === 1,
    sections: [...document.querySelectorAll('section')].map((s) => s.id),
    scripts: document.querySelectorAll('script').length,
    made: document.querySelectorAll('body img, body b, body i, body sub, main a, svg a, ' +
                                    'header a, svg img, span[style*="color:red"]').length,
    bold: document.querySelectorAll('svg tspan[style*="font-weight"], svg tspan[style*="italic"]').length,
    links: [...document.querySelectorAll('a[href]')].map((a) => a.href).filter((h) => h.includes('example')),
    h1: document.querySelector('header h1').textContent,
    title: document.title,
    rows: [...document.querySelectorAll('#tree-table tbody tr')].map((r) => r.cells[0].lastChild.textContent),
    heatTicks: texts('#heat .ytick text'),
    heatType: document.getElementById('heat')._fullLayout.yaxis.type,
    legend: texts('#snapshot-plot .legendtext'),
    critical: texts('#critical-plot .ytick text'),
  };
})()"""


def test_hostile_names_show_as_text_in_a_browser(hostile, tmp_path):
    out = tmp_path / "h.html"
    report_page.write(hostile, out)
    f = _facts(out, HOSTILE_FACTS)
    assert f["console"] == [] and f["blocked"] == [] and not f["pwned"]
    assert f["sections"] == ["tree", "detail", "heatmap", "snapshots", "efficiency", "mpi", "trace"]
    assert f["scripts"] == 3 and f["made"] == 0 and f["bold"] == 0 and f["links"] == []
    assert f["h1"] == "tinyprof: <b>run</b><!--" and f["title"] == "tinyprof report: <b>run</b><!--"
    assert sorted(f["rows"]) == sorted(HOSTILE * 2)            # each name, at two depths
    profile = tinyprof.read(hostile)
    paths = ["<".join(p) for p in profile.callpaths]
    assert f["heatType"] == "category" and sorted(f["heatTicks"]) == sorted(paths)
    assert set(f["legend"]) - {"other"} <= set(paths) and len(f["legend"]) > 1
    assert f["critical"] and all(t.split(": ", 1)[1] in paths for t in f["critical"])


# -- pictures that do not mislead ------------------------------------------------------

S = 1_000_000_000           # ns


def _pictures_rank(rank, clock):
    with tinyprof.Event("main"):
        with tinyprof.Event("solve"):
            clock.tick([23_848_000_000, 23_851_000_000][rank])
        with tinyprof.Event("io"):
            clock.tick([10 * S, 2 * S][rank])                   # 1.67x, 12 s of 60: flagged
        with tinyprof.Event("tiny"):
            clock.tick([1_000_000, 100_000][rank])              # 1.82x, but 1.1 ms: not flagged
        for it in range(5):
            with tinyprof.Event("step", loop=1):
                clock.tick(1000 * (it + 1))
    return _collect.collect(annotate.impl.root())


@pytest.fixture
def pictures(tmp_path, clock):
    prof = tinyprof.Profiler("pic", outdir=tmp_path / "pic")
    ranks, executions = record_ranks(2, _pictures_rank, clock)
    return write_profile(tmp_path / "pic", "pic", prof.metrics, ranks, executions, [(0, 2)])


# Each chart's caption, and whether it meets the toolbar's box or a Plotly title.
CHARTS = """(() => [...document.querySelectorAll('.js-plotly-plot')].map((p) => {
  const title = document.getElementById(p.id + '-title') || p.querySelector('.gtitle');
  if (!title) return [p.id, false, []];
  const cap = title.getBoundingClientRect(), bar = p.querySelector('.modebar').getBoundingClientRect();
  const meets = !(cap.right <= bar.left || bar.right <= cap.left || cap.bottom <= bar.top || bar.bottom <= cap.top);
  const titles = [...p.querySelectorAll('.gtitle')].map((t) => t.textContent).filter((t) => t);
  return [p.id, meets, titles];
}))()"""

PICTURE_FACTS = """(() => {
  const texts = (sel) => [...document.querySelectorAll(sel)].map((t) => t.textContent);
  const row = [...document.querySelectorAll('#tree-table tbody tr')].find((r) => r.dataset.callpath === 'main<step');
  row.click();
  return {
    heatTicks: texts('#heat .xtick text'), distTicks: texts('#dist .xtick text'),
    hot: [...document.querySelectorAll('#tree-table td.hot')].map((td) => td.parentElement.dataset.callpath),
    iterX: document.getElementById('iters').data[0].x,
    charts: %s,
  };
})()""" % CHARTS


def test_pictures_of_a_two_rank_run(pictures, tmp_path, monkeypatch):
    monkeypatch.setattr(report_page, "MAX_POINTS", 2)     # 5 occurrences in 2 bins: from 0 and from 2
    out = tmp_path / "pic.html"
    report_page.write(pictures, out)
    f = _facts(out, PICTURE_FACTS)
    assert f["console"] == []
    assert f["heatTicks"] == ["0", "1"] and f["distTicks"] == ["0", "1"]
    assert f["hot"] == ["main<io"]
    assert f["iterX"] == [0, 2]
    assert f["charts"] and all(not meets and titles == [] for _, meets, titles in f["charts"]), f["charts"]


def _solve_rank(rank, clock):
    with tinyprof.Event("solve"):
        clock.tick([23_848_000_000, 23_851_000_000][rank])
    return _collect.collect(annotate.impl.root())


def test_the_heatmap_scale_starts_at_0(tmp_path, clock):
    """23.848 s and 23.851 s: near the top of one scale from 0, not its two ends."""
    prof = tinyprof.Profiler("solve", outdir=tmp_path / "solve")
    ranks, executions = record_ranks(2, _solve_rank, clock)
    where = write_profile(tmp_path / "solve", "solve", prof.metrics, ranks, executions, [(0, 2)])
    out = tmp_path / "solve.html"
    report_page.write(where, out)
    f = _facts(out, "(() => { const h = document.getElementById('heat')._fullData[0]; "
                    "return { zmin: h.zmin, zmax: h.zmax }; })()")
    assert f["console"] == [] and f["zmin"] == 0 and f["zmax"] == pytest.approx(23.851, rel=1e-5)


DEMO_FACTS = """(() => {
  const heads = (id) => [...document.querySelectorAll('#' + id + ' th')].map((t) => t.textContent);
  const column = (id, k) => [...document.querySelectorAll('#' + id + ' tbody tr')].map((r) => r.cells[k].textContent);
  const time = document.getElementById('mpi-time');
  return {
    sizes: time.data.map((d) => d.name), colours: time.data.map((d) => (d.marker || {}).color),
    legend: [...time.querySelectorAll('.legendtext')].map((t) => t.textContent),
    mpiHeads: heads('mpi-table'), mpiTime: column('mpi-table', 5), mpiBytes: column('mpi-table', 4),
    critHeads: heads('critical-table'), critPath: column('critical-table', 2),
    matrixTicks: [...document.querySelectorAll('#mpi-matrix .xtick text')].map((t) => t.textContent),
    charts: %s,
  };
})()""" % CHARTS


def test_pictures_of_the_traced_demo(traced_demo, tmp_path):
    out = tmp_path / "demo.html"
    report_page.write(traced_demo, out)
    f = _facts(out, DEMO_FACTS)
    assert f["console"] == []
    buckets = sorted(set(int(b) for b in traced_demo.mpi["bucket"]))
    from tinyprof.views.mpi_text import size_range
    assert f["sizes"] == [size_range(b) for b in buckets] == f["legend"]
    assert len(set(f["colours"])) == len(f["colours"]) > 1
    assert f["mpiHeads"][4:] == [f["mpiHeads"][4], f["mpiHeads"][5]]
    assert re.fullmatch(r"bytes \((B|KiB|MiB|GiB)\)", f["mpiHeads"][4])
    assert re.fullmatch(r"time \((s|ms|us|ns)\)", f["mpiHeads"][5])
    assert re.fullmatch(r"on path \((s|ms|us|ns)\)", f["critHeads"][2])
    for cells in (f["mpiTime"], f["mpiBytes"], f["critPath"]):      # numbers only: the unit is the heading's
        assert cells and all(re.fullmatch(r"[0-9]+(\.[0-9]+)?", c) for c in cells), cells
    assert f["matrixTicks"] == ["0", "1", "2"]
    assert all(not meets and titles == [] for _, meets, titles in f["charts"]), f["charts"]
