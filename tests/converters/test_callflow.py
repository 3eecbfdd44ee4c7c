"""``tinyprof callflow``: CallFlow 1.3.0, in the environment of its own that
the command makes (``make install`` makes it beforehand), really processes a
converted 4-rank profile, and what it wrote matches the Profile per rank and
per node; its web app, served on any port, shows the demo's run and call
sites in real headless Chromium."""
from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers.browser import Browser, free_port, needs_chromium, serving
from helpers.callflow import callflow_frame
from helpers.profiles import NRANKS, assert_same, expected, make_profile
from helpers.tools import script

import tinyprof
from tinyprof.converters import callflow


def test_callflow_processes_a_converted_profile(tmp_path, clock, callflow_env):
    profile_dir = make_profile(tmp_path / "prof", clock)
    profile = tinyprof.read(profile_dir)
    data = tmp_path / "flow"
    done = subprocess.run([script("tinyprof"), "callflow", profile_dir, "-o", str(data),
                           "--process-only"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"wrote {data / 'conv.json'}" in done.stdout

    saved = data / ".callflow" / "conv"
    rows = callflow_frame(saved / "df.pkl")
    want = expected(profile, "sum")
    # CallFlow drops callsites whose inclusive time is 0 on every rank ("tail",
    # open at the snapshot); every other (callpath, rank) is there, unchanged.
    kept = [p for p in profile.callpaths if p != ("tail",)]
    got = {(profile.callpaths[row["nid"]], row["rank"]): row for row in rows}
    assert set(got) == {(p, r) for p in kept for r in range(NRANKS)}
    for (path, rank), row in got.items():       # times in microseconds, as CallFlow labels them
        for column, scale in (("time (inc)", 1e6), ("time", 1e6), ("count", 1)):
            assert_same(float(row[column]), scale * want[path, rank][column],
                        f"{path} rank {rank} {column}")

    names = json.loads((saved / "maps.json").read_text(encoding="utf-8"))["c2idx"]
    assert set(names) - {"null"} == {p[-1] for p in profile.callpaths}
    by_index = {i: n for n, i in names.items()}
    assert all(by_index[row["name"]] == path[-1] for (path, _), row in got.items())

    graph = json.loads((saved / "nxg.json").read_text(encoding="utf-8"))
    edges = {(e["source"], e["target"]) for e in graph["edges"]}
    assert edges == {(p[-2], p[-1]) for p in kept if len(p) > 1 and p[:-1] in kept}


def test_callflow_input_is_in_microseconds_mpi_times_too(tmp_path, traced_demo):
    """CallFlow labels every time "μs": its input is the hatchet file's, times x 1e6."""
    from tinyprof.converters import hatchet

    def load(path):
        doc = json.loads(open(path, encoding="utf-8").read())
        return doc, {c: [row[i] for row in doc["data"]] for i, c in enumerate(doc["columns"])}

    (seconds_doc, seconds), (micro_doc, micro) = (
        load(hatchet.write(traced_demo, tmp_path / "h.json")),
        load(callflow.write(traced_demo, tmp_path / "flow")))
    assert (seconds_doc["time.unit"], micro_doc["time.unit"]) == ("s", "us")
    assert set(seconds) == set(micro) >= {"mpi.time", "mpi.time (inc)", "mpi.bytes"}
    for column in seconds:
        scale = 1e6 if "time" in column else 1
        assert [v is None for v in micro[column]] == [v is None for v in seconds[column]], column
        assert [v for v in micro[column] if v is not None] == pytest.approx(
            [v * scale for v in seconds[column] if v is not None], rel=1e-12), column
    assert max(micro["mpi.time"]) > 0


def test_callflow_without_the_fix_fails(tmp_path, clock, callflow_env):
    """The break the fix works around: plain ``callflow --process`` on the same data."""
    profile_dir = make_profile(tmp_path / "prof", clock)
    data = tmp_path / "flow"
    assert subprocess.run([script("tinyprof-convert"), profile_dir, "--to", "callflow",
                           "-o", str(data)], capture_output=True).returncode == 0
    plain = os.path.join(os.path.dirname(callflow_env), "callflow")
    done = subprocess.run([plain, "--data_path", str(data), "--profile_format",
                           "caliper_json", "--process"], capture_output=True, text=True, timeout=180)
    assert done.returncode != 0 and "from_htframe" in done.stderr and "AssertionError" in done.stderr


@pytest.mark.parametrize("python,error", [
    ("/bin/false", "-m venv {env} failed: no output"),
    ("/nonexistent/python3", "/nonexistent/python3: No such file or directory")])
def test_an_environment_that_cannot_be_made_is_one_line(tmp_path, clock, python, error):
    profile_dir = make_profile(tmp_path / "prof", clock)
    env = tmp_path / "env"
    done = subprocess.run([script("tinyprof"), "callflow", profile_dir, "-o", str(tmp_path / "flow"),
                           "--process-only"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TINYPROF_CALLFLOW_ENV": str(env),
                               "TINYPROF_CALLFLOW_PYTHON": python})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        f"tinyprof: installing CallFlow {callflow.VERSION} with hatchet 1.4.1, pandas<2 and numpy<2 "
        f"into {env} (once; a few minutes)",
        f"tinyprof: cannot set up CallFlow's environment in {env}: " + error.format(env=env)]
    assert not (env / ".tinyprof-ready").exists()


def test_an_environment_whose_python_went_away_is_one_line(tmp_path, clock):
    profile_dir = make_profile(tmp_path / "prof", clock)
    env = tmp_path / "env"
    (env / "bin").mkdir(parents=True)
    (env / "bin" / "python").symlink_to(tmp_path / "removed-python")
    (env / ".tinyprof-ready").write_text(" ".join(callflow.REQUIREMENTS))
    for serve in ([], ["--process-only"]):
        done = subprocess.run([script("tinyprof"), "callflow", profile_dir, "-o", str(tmp_path / "flow"),
                               *serve], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "TINYPROF_CALLFLOW_ENV": str(env)})
        assert done.returncode == 2 and done.stderr.splitlines() == [
            f"tinyprof: cannot run CallFlow's environment {env}: No such file or directory "
            "(remove it: the next command makes it anew)"]


@pytest.mark.parametrize("argv,error", [
    ([], "tinyprof: callflow: give a PROFILE (or --setup)"),
    (["missing.tinyprof"], "tinyprof: missing.tinyprof: no such file or directory")])
def test_bad_input_is_one_line(tmp_path, argv, error):
    done = subprocess.run([script("tinyprof"), "callflow", *argv], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.splitlines() == [error]


@pytest.fixture
def served(tmp_path, traced_demo, callflow_env):
    """``tinyprof callflow`` serving the 3-rank demo on a free port (not 5000,
    which the unfixed frontend would call whatever the port)."""
    port = free_port()
    with serving([script("tinyprof"), "callflow", os.path.dirname(traced_demo.files[0]),
                  "-o", str(tmp_path / "flow"), "--host", "127.0.0.1", "--port", str(port)], port):
        yield f"http://127.0.0.1:{port}/"


@needs_chromium
def test_callflow_app_shows_the_run_and_its_call_sites(served, traced_demo):
    """What a user sees: the run in the summary, and every call site in the
    Super Graph and the CCT (both were empty before the fixes)."""
    names = sorted({p[-1] for p in traced_demo.callpaths})
    edges = len({(p[-2], p[-1]) for p in traced_demo.callpaths if len(p) > 1})
    with Browser() as browser:
        browser.open(served)
        row = browser.wait_for("""(() => { const cells = [...document.querySelectorAll(
            '.v-data-table tbody tr td')].map(td => td.textContent.trim());
            return cells.length > 1 ? cells : null; })()""", timeout=60)  # not "No data"
        assert row[0] == traced_demo.name and row[-3:] == [str(traced_demo.nranks),
                                                            str(len(names)), str(edges)], row

        browser.open(served + "#/super_graph")
        # every call site laid out: its box drawn with a height (on a loaded machine, later)
        heights = browser.wait_for(f"""(() => {{ const h = [...document.querySelectorAll(
            '#ensemble-supergraph-overview g.callsite rect.callsite-rect')].map(
            r => r.getBBox().height);
            return h.length >= {len(names)} && Math.min(...h) > 0 ? h : null; }})()""", timeout=120)
        count = browser.evaluate(
            "document.querySelectorAll('#ensemble-supergraph-overview g.callsite').length")
        assert count == len(names) and len(heights) == len(names) and min(heights) > 0
        assert browser.evaluate(
            "document.querySelectorAll('#ensemble-supergraph-overview path.edge-single').length"
        ) == edges

        browser.open(served + "#/cct")
        ids = browser.wait_for("""(() => { const ids = [...document.querySelectorAll(
            '#cct-overview g.node.cct-node')].map(g => g.id).sort();
            return ids.length ? ids : null; })()""", timeout=60)
        assert ids == names
        assert browser.evaluate(
            "document.querySelectorAll('#cct-overview g.edgePath.cct-edge').length") == edges
        assert not browser.blocked, browser.blocked
        assert not [e for e in browser.console if "reading 'length'" in e], browser.console
