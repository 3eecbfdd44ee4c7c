"""``tinyprof report``: the time to write the report, its size, and the time
a browser needs to show it and to answer a click, at 200 callpaths x 100
iterations (benchmarks/formats.py's synthetic profile) for growing rank counts.

    .venv/bin/python benchmarks/report.py [--ranks 64 256 1024] [--repeats 5]

Writing: ``tinyprof.read`` (the baseline: what any analysis pays) and
``report.write`` (read + the report's numbers + the HTML) run alternately in
one process, median of the repeats; the ratio is report over read. Size: the
file, and the part that is the profile's numbers (the JSON payload; the rest is
plotly.min.js and the page's own script and style).

In headless Chromium (Debian's ``chromium``), median of the repeats, each in
a fresh tab opened from disk:
- *ready*: from navigation start until the page has drawn every section
  (``document.body.dataset.ready``), against the baseline of a page holding
  only the same inlined plotly.min.js (its parse cost, which no report avoids);
- *click*: from a click on a call-tree row until the next frame is painted
  with that callpath's plots redrawn (the row is the median-sized one);
- *heatmap*: switching the heatmap between exclusive and inclusive time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, os.pardir, "tests"))

import formats  # noqa: E402  (benchmarks/formats.py)
from _browser import Browser  # noqa: E402  (tests/_browser.py)

import tinyprof  # noqa: E402
from tinyprof.views import report_page  # noqa: E402

READY = """new Promise((done) => { const poll = () => document.body &&
    document.body.dataset.ready === "1" ? done(performance.now()) : setTimeout(poll, 5); poll(); })"""
NEXT_FRAME = "new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))"
CLICK = """(async () => { const rows = [...document.querySelectorAll('#tree-table tbody tr')];
    const row = rows[rows.length >> 1]; const t0 = performance.now(); row.click();
    await %s; return performance.now() - t0; })()""" % NEXT_FRAME
HEATMAP = """(async () => { const s = document.getElementById('heat-metric');
    s.value = s.value === 'exc' ? 'inc' : 'exc'; const t0 = performance.now();
    s.dispatchEvent(new Event('change')); await %s; return performance.now() - t0; })()""" % NEXT_FRAME


def write_times(source: str, out: str, repeats: int):
    read, write = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        tinyprof.read(source)
        t1 = time.perf_counter()
        report_page.write(source, out)
        t2 = time.perf_counter()
        read.append(t1 - t0)
        write.append(t2 - t1)
    return statistics.median(read), statistics.median(write)


def payload_bytes(source: str) -> int:
    html = report_page.render(report_page.build(tinyprof.read(source), source))
    start = html.index('id="tinyprof-data">')
    return len(html[start:html.index("</script>", start)].encode())


def page_times(browser: Browser, path: str, repeats: int, interact: bool):
    ready, click, heat = [], [], []
    for _ in range(repeats):
        browser.open("about:blank")
        browser.open(f"file://{path}")
        ready.append(browser.evaluate(READY, timeout=300))
        if interact:
            click.append(browser.evaluate(CLICK))
            heat.append(browser.evaluate(HEATMAP))
    med = statistics.median
    return med(ready), (med(click) if click else None), (med(heat) if heat else None)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp, Browser(1500, 1000) as browser:
        blank = os.path.join(tmp, "plotly-only.html")
        with open(blank, "w", encoding="utf-8") as f:
            f.write(f"<!DOCTYPE html><html><head><script>{report_page.plotly_js()}</script></head>"
                    f"<body><script>document.body.dataset.ready = '1';</script></body></html>")
        base, _, _ = page_times(browser, blank, args.repeats, interact=False)
        print(f"200 callpaths x 100 iterations; median of {args.repeats}; times in s, page times in ms")
        print(f"baseline page (plotly.min.js alone, {os.path.getsize(blank) / 1e6:.1f} MB): "
              f"ready in {base:.0f} ms")
        print(f"{'ranks':>6} {'read':>7} {'report':>7} {'ratio':>6} {'file MB':>8} {'data MB':>8} "
              f"{'ready':>7} {'-base':>7} {'click':>6} {'heatmap':>8}")
        for nranks in args.ranks:
            source = os.path.join(tmp, f"p{nranks}")
            formats.write_tinyprof(source, nranks)
            out = os.path.join(tmp, f"p{nranks}.html")
            read, write = write_times(source, out, args.repeats)
            ready, click, heat = page_times(browser, out, args.repeats, interact=True)
            print(f"{nranks:>6} {read:>7.3f} {write:>7.3f} {write / read:>5.1f}x "
                  f"{os.path.getsize(out) / 1e6:>8.1f} {payload_bytes(source) / 1e6:>8.2f} "
                  f"{ready:>7.0f} {ready - base:>7.0f} {click:>6.0f} {heat:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
