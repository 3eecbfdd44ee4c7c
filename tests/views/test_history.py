"""``tinyprof report R1 R2 ...``: the history page of many runs (or of the
snapshots of one). Its data against the runs it comes from (exact times,
start order, the regressions flagged by compare's rule), the command's
errors, and the page in a real headless Chromium: no script error, the diff
of two runs picked on the page, the metadata filter, hostile names as text."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers.browser import Browser, needs_chromium
from helpers.mpi import MPIEXEC, needs_mpiexec
from helpers.mpi_profile import make_mpi_profile

import tinyprof
from tinyprof.analysis import compare
from tinyprof.analysis.profile import read_runs
from tinyprof.cli import main
from tinyprof.format import meta_section, mpi_section, output_dir
from tinyprof.format.encoding import Header
from tinyprof.runtime import assemble
from tinyprof.runtime.collect import LocalEvent
from tinyprof.views import history_page

pytest.importorskip("plotly")

NRANKS = 4
US = 1000                                    # ns
COMPUTE = np.array([200, 220, 240, 260]) * US   # per rank
SOLVE = np.array([100, 110, 105, 120]) * US
OWN = 10 * US                                 # main's own time on every rank
HOSTILE = '<img src=x onerror="window.pwned=1">'


def write_dated_run(directory, start: str, slow: float = 1.0, names=("compute", "solve"), commit: str = "a" * 40,
              app: str = "app", nranks: int = NRANKS, flops: bool = False, mpi=None, seed=None) -> str:
    """One run of ``nranks`` ranks (at most NRANKS), one file: main (OWN)
    holding ``names[0]`` (COMPUTE) and ``names[1]`` (SOLVE x ``slow``), with
    run metadata; with ``flops``, that metric per occurrence: the time in us;
    with ``mpi``, per rank (calls, bytes per call, ns) of Allreduces in ``names[1]``;
    with ``seed``, noise: each rank's times 3% apart at most, the whole run 2%."""
    rng = np.random.default_rng(seed)
    noise = (lambda: 1.0) if seed is None else \
        (lambda: rng.uniform(0.98, 1.02) * rng.uniform(0.97, 1.03, NRANKS))
    solve = np.round(SOLVE * slow * noise()).astype(np.int64)
    compute = np.round(COMPUTE * noise()).astype(np.int64)
    ranks = []

    def event(path, t):
        return LocalEvent(path, 1, True, np.array([t]), np.array([0, 0]), {},
                          {"flops": np.array([t / US])} if flops else {})
    for r in range(nranks):
        times = {names[0]: compute[r], names[1]: solve[r]}
        ranks.append([event(("main",), OWN + sum(times.values())), *(event(("main", n), t) for n, t in times.items())])
    header = Header(name=app, nranks=nranks, first_rank=0, rank_count=nranks, file_index=0,
                    file_count=1, metrics=[("flops", False)] if flops else [])
    meta = meta_section.encode({"start": start, "nranks": nranks, "git": commit, "case": "c<1>"})
    os.makedirs(directory, exist_ok=True)
    output_dir.write_atomic(os.path.join(directory, output_dir.file_name(app, 0, 1)),
                            assemble.build_file(header, ranks, [1] * nranks, [("meta", meta)] + ([] if mpi is None else [
                            ("mpi", mpi_section.encode([mpi_section.Communicator("COMM_WORLD", nranks, tuple(range(nranks)),
                                                                                 mpi_section.NONE)],
                                                       [(r, 2, 0, "Allreduce", mpi_section.bucket(size), calls,
                                                         calls * size, t) for r, (calls, size, t) in enumerate(mpi)],
                                                       []))])))
    return str(directory)


# Written in name order a, b, c, d; started in the order b, c, a, d. From c on, solve is 25% slower.
STARTS = {"a": ("2026-03-01T03:00:00Z", 1.25), "b": ("2026-03-01T01:00:00Z", 1.0),
          "c": ("2026-03-01T02:00:00Z", 1.0), "d": ("2026-03-01T04:00:00Z", 1.25)}
ORDER = ["b", "c", "a", "d"]


@pytest.fixture
def runs(tmp_path):
    where = tmp_path / "runs"
    for name, (start, slow) in STARTS.items():
        write_dated_run(where / name, start, slow, commit=name * 40)
    return str(where)


def test_the_page_data_is_the_runs_in_start_order(runs):
    data = history_page.build(*read_runs([runs]))
    assert data["kind"] == "runs" and data["name"] == "app"
    assert data["runs"] == ORDER and data["nranks"] == [NRANKS] * 4
    paths = [c["path"] for c in data["callpaths"]]
    assert paths == ["main", "main<compute", "main<solve"]
    assert [c["parent"] for c in data["callpaths"]] == [-1, 0, 0]
    for k, name in enumerate(ORDER):                  # exclusive seconds per rank on average
        slow = STARTS[name][1]
        solve = np.round(SOLVE * slow).mean() / 1e9
        assert data["exc"][k] == pytest.approx([OWN / 1e9, COMPUTE.mean() / 1e9, solve], rel=1e-4)
        assert data["totals"][k] == pytest.approx(OWN / 1e9 + COMPUTE.mean() / 1e9 + solve, rel=1e-4)
    # Flagged: solve, at a (the third run) against b and c, by +25%; nothing else.
    [(run, callpath, since, base, new, change, p, kind)] = data["flags"]
    assert (run, paths[callpath], since, kind) == (2, "main<solve", 0, 1)
    assert (base, new) == pytest.approx([SOLVE.mean() / 1e9, np.round(SOLVE * 1.25).mean() / 1e9], rel=1e-4)
    assert change == pytest.approx(0.25, rel=1e-3) and p < 0.05
    assert paths[data["worst"][0]] == "main<solve"
    meta = data["meta"]
    assert meta["columns"] == ["run", "start", "name", "ranks", "created", "case", "git"]
    assert [row[0] for row in meta["rows"]] == ORDER
    assert [row[1] for row in meta["rows"]] == [STARTS[n][0] for n in ORDER]
    assert [row[6] for row in meta["rows"]] == [n * 40 for n in ORDER]


def test_runs_of_different_rank_counts_are_per_rank_and_say_so(tmp_path):
    write_dated_run(tmp_path / "two", "2026-03-01T01:00:00Z", nranks=2)
    write_dated_run(tmp_path / "four", "2026-03-01T02:00:00Z")
    data = history_page.build(*read_runs([str(tmp_path)]))
    assert data["runs"] == ["two", "four"] and data["nranks"] == [2, 4]
    assert data["notes"] == ["rank counts differ (2/4 ranks): values are per rank on average",
                             "2 runs: too few to see the run-to-run noise (it takes 4): nothing flagged"]
    assert [row[1] for row in data["exc"]] == pytest.approx([COMPUTE[:2].mean() / 1e9, COMPUTE.mean() / 1e9])


def test_the_page_flags_tinyprof_history_table(runs):
    """The page renders the flagged table of ``tinyprof.history``, row for row."""
    data = history_page.build(*read_runs([runs]))
    table = tinyprof.history(runs)
    assert table.attrs["runs"] == data["runs"] == ORDER
    paths = [tuple(c["path"].split("<")) for c in data["callpaths"]]
    assert [(f[0], paths[f[1]], f[2], f[7] > 0) for f in data["flags"]] == \
        list(zip(table["run"], table["callpath"], table["since"], table["regressed"]))
    assert list(table["label"]) == ["a"] and list(table["improved"]) == [False]


def test_a_directory_of_runs_is_its_runs(runs, tmp_path):
    """A directory of run directories, of the files of several profiles, and
    the runs named one by one give the same runs."""
    assert output_dir.runs_in([runs]) == [os.path.join(runs, n) for n in "abcd"]
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in "abcd":          # each run's one file, renamed apart, in one directory
        os.rename(os.path.join(runs, name, output_dir.file_name("app", 0, 1)),
                  flat / output_dir.file_name(f"app-{name}", 0, 1))
    assert output_dir.runs_in([str(flat)]) == [str(flat / output_dir.file_name(f"app-{n}", 0, 1)) for n in "abcd"]
    profiles, labels, cumulative = read_runs([str(flat)])
    assert labels == [output_dir.file_name(f"app-{n}", 0, 1) for n in ORDER] and not cumulative
    one = tmp_path / "one"
    write_dated_run(one, "2026-03-01T00:00:00Z")
    assert output_dir.runs_in([str(one)]) == [str(one)]             # one run's directory


def test_a_directory_beside_the_runs_is_no_run(runs, tmp_path, capsys):
    """logs/ and scripts/ beside the runs are left out (silently); a run's
    snapshots/ makes it a run; a directory with no run in it is one line."""
    (tmp_path / "runs" / "logs").mkdir()
    (tmp_path / "runs" / "logs" / "job.out").write_text("ok\n")
    (tmp_path / "runs" / "scripts" / "old").mkdir(parents=True)
    kept = tmp_path / "runs" / "e"                     # only its snapshots: a run
    (kept / output_dir.SNAPSHOTS).mkdir(parents=True)
    assert output_dir.runs_in([runs]) == [os.path.join(runs, n) for n in "abcde"]
    os.rmdir(kept / output_dir.SNAPSHOTS)
    os.rmdir(kept)
    out = tmp_path / "h.html"
    assert main(["report", runs, "-o", str(out)]) == 0
    assert capsys.readouterr().err == ""
    data = json.loads(re.search(r'id="tinyprof-data">(.*?)</script>', out.read_text(), re.S)[1])
    assert data["runs"] == ORDER
    one = tmp_path / "one"                             # one run's directory, with its logs
    write_dated_run(one, "2026-03-01T00:00:00Z")
    (one / "logs").mkdir()
    assert output_dir.runs_in([str(one)]) == [str(one)]
    none = tmp_path / "none"
    (none / "logs").mkdir(parents=True)
    (none / "scripts").mkdir()
    assert main(["report", str(none), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (f"tinyprof: {none}: no run in it: none of its 2 subdirectories holds a profile "
                   "(.tp files or snapshots/)\n")


@needs_chromium
def test_snapshots_of_one_run_are_its_history(tmp_path, step_snapshots):
    """The snapshots, cumulative, are taken as intervals: what each added."""
    out = tmp_path / "s"
    step_snapshots(out, [3, 0, 5, 5])
    data = history_page.build(*read_runs([str(out)], of_snapshots=True))
    assert data["kind"] == "snapshots"
    assert data["runs"] == ["snapshot 1", "snapshot 2", "snapshot 3", "snapshot 4"]
    step = [c["path"] for c in data["callpaths"]].index("main<step")
    assert [row[step] for row in data["exc"]] == pytest.approx([3e-6, 0, 5e-6, 5e-6])
    # 3, 0, 5, 5 us: the differences' spread (3 us) is the noise: nothing stands out of it
    assert data["flags"] == [] and tinyprof.history(out, snapshots=True).empty
    page = tmp_path / "s.html"
    assert main(["report", "--snapshots", str(out), "-o", str(page)]) == 0
    assert json.loads(re.search(r'id="tinyprof-data">(.*?)</script>', page.read_text(), re.S)[1]) == data
    facts = _page(page, ["document.getElementById('regressions').textContent"])
    assert facts["console"] == [] and facts["sections"] == ["regressions", "history", "diff", "runs"]
    assert facts["checks"][0].endswith("No change flagged.")
    with pytest.raises(tinyprof.FormatError, match=r"0 complete snapshot\(s\): the history of a run needs at least 2"):
        read_runs([str(out / "snapshots" / "000001")], of_snapshots=True)


# -- the command ---------------------------------------------------------------------

def test_the_command_writes_one_page_of_many_runs(runs, tmp_path, capsys):
    out = tmp_path / "h.html"
    assert main(["report", runs, "-o", str(out)]) == 0
    assert capsys.readouterr().out.startswith(f"tinyprof: wrote {out}")
    page = out.read_text(encoding="utf-8")
    assert not re.search(r"<(script|link)\b[^>]*\b(src|href)=", page)      # nothing fetched
    data = json.loads(re.search(r'id="tinyprof-data">(.*?)</script>', page, re.S)[1])
    assert data["runs"] == ORDER
    named = [os.path.join(runs, n) for n in "dcba"]
    assert main(["report", *named, "-o", str(out)]) == 0         # the runs one by one: same order
    data = json.loads(re.search(r'id="tinyprof-data">(.*?)</script>', out.read_text(), re.S)[1])
    assert data["runs"] == ORDER


def test_a_bad_run_among_many_is_named_in_one_line(runs, tmp_path, capsys):
    out = tmp_path / "h.html"
    bad = os.path.join(runs, "c", output_dir.file_name("app", 0, 1))
    with open(bad, "r+b") as f:
        f.seek(40)
        f.write(b"\xff garbage \xff")
    assert main(["report", runs, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and bad in err and "Traceback" not in err
    assert not out.exists()
    missing = str(tmp_path / "nowhere")
    assert main(["report", os.path.join(runs, "a"), missing, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and missing in err
    # --skip-bad: the others make the page, the bad one named on stderr
    assert main(["report", runs, "--skip-bad", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("skipped") == 1 and bad in err
    data = json.loads(re.search(r'id="tinyprof-data">(.*?)</script>', out.read_text(), re.S)[1])
    assert data["runs"] == ["b", "a", "d"]
    assert main(["report", missing, missing + "2", "--skip-bad", "-o", str(out)]) == 2
    assert "no run could be read" in capsys.readouterr().err


APP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_compare_app.py")


@needs_mpiexec
def test_real_mpi_runs_in_start_order_outside_mpi(tmp_path):
    """Four real runs on 4 ranks (tests/_compare_app.py), named against their
    start order; from the third on, solve twice as long: flagged, on the time
    outside MPI calls, at the third run."""
    where = tmp_path / "runs"
    for name, slow in (("d", 1), ("c", 1), ("b", 2), ("a", 2)):         # started in this order
        subprocess.run([MPIEXEC, "-n", "4", sys.executable, APP, str(where / name), str(slow)],
                       check=True, capture_output=True, timeout=300)
    out = tmp_path / "h.html"
    done = subprocess.run([sys.executable, "-m", "tinyprof.cli", "report", str(where), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(re.search(r'id="tinyprof-data">(.*?)</script>', out.read_text(), re.S)[1])
    assert data["runs"] == ["d", "c", "b", "a"] and data["outside_mpi"] and data["nranks"] == [4] * 4
    starts = [row[1] for row in data["meta"]["rows"]]
    assert starts == sorted(starts) and len(set(starts)) == 4
    paths = [c["path"] for c in data["callpaths"]]
    solve = paths.index("main<solve")
    [(change, p)] = [(f[5], f[6]) for f in data["flags"] if f[:2] == [2, solve] and f[7] == 1]
    assert 0.5 < change < 1.5 and p < 0.05
    assert data["exc"][2][solve] == pytest.approx(2 * data["exc"][1][solve], rel=0.3)
    for k, name in enumerate(data["runs"]):          # each run's MPI calls (the barriers), as it recorded them
        profile = tinyprof.read(where / name)
        for key in ("time", "bytes"):
            want = _mpi_of(profile, key)
            shown = dict(zip(data["mpi"]["columns"], data["mpi"][key][k]))
            assert [shown.get(c, 0.0) for c in range(len(paths))] == \
                pytest.approx([want.get(p, 0.0) for p in paths], rel=1e-4, abs=1e-12)
    assert data["mpi"]["columns"] and max(data["mpi"]["time"][0]) > 0


# -- in a real browser -------------------------------------------------------------

PICK = """(() => {
  const pick = (id, value) => { const s = document.getElementById(id); s.value = value;
    s.dispatchEvent(new Event('change')); };
  pick('diff-base', %d); pick('diff-new', %d);
  return { title: document.getElementById('diff-title').textContent,
    rows: [...document.querySelectorAll('#diff-table tbody tr')].map((tr) => [tr.dataset.callpath,
      tr.dataset.flag || '', ...[...tr.children].slice(1).map((td) => td.textContent)]) };
})()"""
FILTER = """(() => { const f = document.getElementById('run-filter'); f.value = %r;
  f.dispatchEvent(new Event('input'));
  return [...document.querySelectorAll('#runs-table tbody tr')].filter((tr) => !tr.hidden)
    .map((tr) => tr.firstChild.textContent); })()"""
CLICK_FLAG = """(() => { document.querySelector('#flags-table tbody tr').click();
  return [document.getElementById('diff-title').textContent,
          document.getElementById('history-plot-title').textContent]; })()"""
FACTS = """(() => ({
  sections: [...document.querySelectorAll('section')].map((s) => s.id),
  flags: [...document.querySelectorAll('#flags-table tbody tr')].map((tr) => tr.dataset.callpath),
  history: [...document.querySelectorAll('#history-table tbody tr')].map((tr) => tr.dataset.callpath),
  sparks: document.querySelectorAll('#history-table svg.spark polyline').length,
  chart: document.getElementById('history-plot').data.length,
  pwned: window.pwned === 1, images: document.querySelectorAll('body img').length,
  names: [...document.querySelectorAll('#diff-table tbody td:first-child')].map((td) => td.textContent) }))()"""


def _page(path, checks):
    with Browser(1500, 1400) as b:
        b.open(f"file://{path}")
        b.wait_for("document.body && document.body.dataset.ready === '1'", timeout=120)
        facts = b.evaluate(FACTS)
        facts["checks"] = [b.evaluate(c) for c in checks]
        facts["console"], facts["blocked"], facts["requests"] = b.console, b.blocked, b.requests
    return facts


@needs_chromium
def test_the_page_renders_and_diffs_two_runs_picked_on_it(tmp_path):
    """60 runs; solve 25% slower from run 30 on; the page picks runs 10 and 40."""
    where = tmp_path / "many"
    for k in range(60):
        write_dated_run(where / f"r{k:02d}", f"2026-03-{1 + k // 24:02d}T{k % 24:02d}:00:00Z", 1.25 if k >= 30 else 1.0,
                  commit=f"{k // 10:040x}")
    out = tmp_path / "many.html"
    history_page.write([str(where)], out)
    facts = _page(out, [PICK % (10, 40), FILTER % f"{3:040x}", PICK % (0, 1), CLICK_FLAG])
    assert facts["console"] == [] and facts["blocked"] == [] and facts["requests"] == [f"file://{out}"]
    assert facts["sections"] == ["regressions", "history", "diff", "runs"]
    assert facts["flags"] == ["main<solve"] and facts["history"][0] == "main<solve"
    assert facts["sparks"] == 3 and facts["chart"] == 3
    picked, filtered, same, clicked = facts["checks"]
    assert picked["title"].startswith("r40 against r10: total ")
    rows = {r[0]: r[1:] for r in picked["rows"]}
    assert rows["main<solve"][3] == "+25.0%" and rows["main<compute"][3] == "+0.0%"
    assert rows["main"][6] == f"+{100 * (SOLVE.mean() * 0.25) / (OWN + COMPUTE.mean() + SOLVE.mean()):.1f}%"
    assert filtered == [f"r{k}" for k in range(30, 40)]         # the runs of commit 3
    assert same["title"].startswith("r01 against r00: total ")
    assert clicked[0].startswith("r30 against r29: ") and clicked[1].startswith("main<solve: ")


@needs_chromium
def test_hostile_names_are_text_on_the_page(tmp_path):
    where = tmp_path / "h"
    for k, slow in enumerate([1.0, 1.0, 1.5, 1.5]):
        write_dated_run(where / f"r{k}", f"2026-03-01T0{k}:00:00Z", slow, names=(HOSTILE, "</script><b>x"),
                  app="<b>app</b>")
    out = tmp_path / "h.html"
    history_page.write([str(where)], out)
    payload = re.search(r'id="tinyprof-data">(.*?)</script>', out.read_text(), re.S)[1]
    assert not set(payload) & set("<>&")
    assert "<title>tinyprof report: &lt;b>app&lt;/b></title>" in out.read_text()
    facts = _page(out, [PICK % (0, 3)])
    assert facts["console"] == [] and not facts["pwned"] and facts["images"] == 0
    assert facts["flags"] == ["main<</script><b>x"]
    assert sorted(facts["names"]) == sorted(["main", HOSTILE, "</script><b>x"])
    assert {r[0] for r in facts["checks"][0]["rows"]} == {"main", f"main<{HOSTILE}", "main<</script><b>x"}


# -- the rule on the command line ------------------------------------------------------

def _data(path):
    return json.loads(re.search(r'id="tinyprof-data">(.*?)</script>', path.read_text(), re.S)[1])


@needs_chromium
def test_the_rule_is_given_on_the_command_line(runs, tmp_path, capsys):
    """--threshold, --floor, --inclusive, --metric as tinyprof compare's; with
    one run's report, a one-line usage error."""
    out = tmp_path / "h.html"
    paths = ["main", "main<compute", "main<solve"]

    def flagged(*options):
        assert main(["report", runs, *options, "-o", str(out)]) == 0
        data = _data(out)
        return data, sorted((data["runs"][f[0]], paths[f[1]]) for f in data["flags"] if f[7] == 1)

    data, flags = flagged()
    assert flags == [("a", "main<solve")]
    assert data["rule"] == {"test": compare.HISTORY_TEST, "threshold": 0.05, "floor": 0.01, "alpha": 0.05,
                            "metric": "time", "inclusive": False}
    data, flags = flagged("--threshold", "30")                  # solve: +25%
    assert flags == [] and data["rule"]["threshold"] == 0.3
    data, flags = flagged("--floor", "8")                       # solve: +26 us of 345 us, 7.6%
    assert flags == [] and data["rule"]["floor"] == 0.08
    # Inclusive: main holds solve, +7.8% of its inclusive time: flagged too, but not beyond 10%
    data, flags = flagged("--inclusive")
    assert flags == [("a", "main"), ("a", "main<solve")] and data["rule"]["inclusive"]
    inclusive = OWN + COMPUTE.mean() + np.round(SOLVE * 1.25).mean()
    assert "exc" not in data and data["inc"][2] == pytest.approx(
        [inclusive / 1e9, COMPUTE.mean() / 1e9, np.round(SOLVE * 1.25).mean() / 1e9], rel=1e-4)
    table = tinyprof.history(runs, inclusive=True)                # as tinyprof.history flags them
    assert sorted(zip(table["label"], ["<".join(p) for p in table["callpath"]])) == flags
    data, flags = flagged("--inclusive", "--threshold", "7")
    assert flags == [("a", "main"), ("a", "main<solve")] and data["rule"]["threshold"] == 0.07
    hints = "[...document.querySelectorAll('.hint')].map((h) => h.textContent).join(' ')"
    facts = _page(out, [PICK % (0, 3), hints])                   # b to d, judged inclusive
    assert facts["console"] == [] and facts["flags"] == ["main<solve", "main"]      # worst first
    assert "the change beyond 7% and |new - baseline| at least 1% of the baseline's time" in facts["checks"][1]
    assert "inclusive time per rank on average" in facts["checks"][1]
    rows = {r[0]: r[1:] for r in facts["checks"][0]["rows"]}
    exclusive = [OWN, COMPUTE.mean(), SOLVE.mean()]
    for path, want in zip(paths, exclusive):                     # derived in the page from inclusive
        assert float(rows[path][1]) == pytest.approx(want / 1e3, abs=2e-3)   # us
    base = OWN + COMPUTE.mean() + SOLVE.mean()
    assert rows["main"][6] == f"+{100 * (inclusive / base - 1):.1f}%"
    _, flags = flagged("--inclusive", "--threshold", "10")
    assert flags == [("a", "main<solve")]
    assert main(["report", runs, "--metric", "flops", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "no per-occurrence metric 'flops'" in err
    one = os.path.join(runs, "a")
    for options in (["--threshold", "0"], ["--floor", "2"], ["--inclusive"], ["--metric", "time"], ["--skip-bad"]):
        assert main(["report", one, *options, "-o", str(out)]) == 2
        assert capsys.readouterr().err == f"tinyprof report: {options[0]}: for several runs\n"
    with pytest.raises(SystemExit) as bad:                      # parsed as compare's
        main(["report", runs, "--floor", "-1", "-o", str(out)])
    assert bad.value.code == 2 and "'-1' is not a percentage" in capsys.readouterr().err


# -- MPI time and bytes per callpath over the runs ----------------------------------------

def _mpi_of(profile, key):
    """Per callpath, the profile's own MPI ``key`` (exclusive) per rank on average, from
    ``Profile.mpi``: its rows summed over ranks, communicators, operations and sizes."""
    table = profile.mpi
    table = table[table["callpath"].map(len) > 0]
    return {"<".join(path): value / profile.nranks for path, value in table.groupby("callpath")[key].sum().items()}


MPI_PAGE = """(() => {
  document.querySelector('#history-table tr[data-callpath="main<halo"]').click();
  const chart = document.getElementById('history-plot');
  return { unit: chart.layout.yaxis.title.text, facts: document.getElementById('facts').textContent,
    traces: Object.fromEntries(chart.data.map((t) => [t.name, t.y])),
    head: [...document.querySelectorAll('#diff-table thead th')].map((th) => th.textContent) };
})()"""


@needs_chromium
def test_mpi_time_and_bytes_per_callpath_over_the_runs(tmp_path, clock):
    """Two runs with MPI capture and one without: each callpath's MPI time and
    bytes per rank, per run (null for the run without), in the data, the
    chart and the diff of two runs, equal to each profile's own MPI rows."""

    where = tmp_path / "runs"
    for name, mpi in (("r0", True), ("r1", False), ("r2", True)):
        make_mpi_profile(where / name, clock, mpi=mpi)
    out = tmp_path / "h.html"
    assert main(["report", str(where), "-o", str(out)]) == 0
    data = _data(out)
    assert data["runs"] == ["r0", "r1", "r2"] and not data["outside_mpi"]     # r1 has none
    paths = [c["path"] for c in data["callpaths"]]
    profile = tinyprof.read(where / "r0")
    want = {key: _mpi_of(profile, key) for key in ("time", "bytes")}
    assert want["bytes"]["main<halo"] == pytest.approx((4296 + 6000) / 3)       # the test's own check
    assert data["mpi"]["columns"] == [paths.index(p) for p in want["time"]] == [0, 1, 2, 3]
    for key in ("time", "bytes"):
        expected = [want[key][p] for p in paths]
        assert data["mpi"][key][0] == data["mpi"][key][2] == pytest.approx(expected, rel=1e-4)
        assert data["mpi"][key][1] is None
    both_mpi = history_page.build(*read_runs([where / "r0", where / "r2"]))      # times outside MPI
    assert both_mpi["outside_mpi"] and both_mpi["mpi"] == {"columns": [0, 1, 2, 3],
                                                **{key: [data["mpi"][key][0]] * 2 for key in ("time", "bytes")}}
    without = tmp_path / "none"
    for k in range(2):
        write_dated_run(without / f"r{k}", f"2026-03-01T0{k}:00:00Z")
    assert history_page.build(*read_runs([str(without)]))["mpi"] is None
    # Only the callpaths where a run made MPI calls are embedded; the page shows 0 for the others
    solve = tmp_path / "solve"
    calls = [(3, 8, 1000 * (r + 1)) for r in range(NRANKS)]
    for k in range(2):
        write_dated_run(solve / f"r{k}", f"2026-03-01T0{k}:00:00Z", mpi=calls)
    compact = history_page.build(*read_runs([str(solve)]))
    assert compact["mpi"] == {"columns": [2], "time": [[2500e-9]] * 2, "bytes": [[24.0]] * 2}
    picked = _page(history_page.write([str(solve)], tmp_path / "s.html"), [PICK % (0, 1)])
    assert picked["console"] == []
    assert {r[0]: r[-2:] for r in picked["checks"][0]["rows"]} == {
        "main": ["0", "0"], "main<compute": ["0", "0"], "main<solve": ["24", "24"]}
    facts = _page(out, [MPI_PAGE, PICK % (0, 2), PICK % (0, 1)])
    assert facts["console"] == [] and facts["blocked"] == []
    shown, both, one = facts["checks"]
    scale = {"s": 1, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[shown["unit"]]
    halo = want["time"]["main<halo"]
    assert "MPI time and bytes (exclusive) in 2 of 3 runs" in shown["facts"]
    times = shown["traces"]["MPI time (exclusive)"]
    assert times[1] is None and [t * scale for t in times[::2]] == pytest.approx([halo, halo], rel=1e-4)
    sent = shown["traces"]["MPI bytes (exclusive, right)"]
    assert sent[1] is None and sent[::2] == pytest.approx([want["bytes"]["main<halo"]] * 2, rel=1e-4)
    assert shown["head"][7:] == [f"base MPI time ({shown['unit']})", f"new MPI time ({shown['unit']})",
                                 "base MPI bytes", "new MPI bytes"]
    for path in paths:
        row = {r[0]: r[2:] for r in both["rows"]}[path]
        for text in row[6:8]:
            assert float(text) * scale == pytest.approx(want["time"].get(path, 0.0), rel=1e-4, abs=6e-4 * scale)
        assert [float(t) for t in row[8:]] == pytest.approx([want["bytes"].get(path, 0.0)] * 2, rel=1e-4)
        assert {r[0]: r[2:] for r in one["rows"]}[path][6:] == [row[6], "-", row[8], "-"]


CUSTOM = """(() => ({ head: [...document.querySelectorAll('#flags-table thead th')].map((th) => th.textContent),
  flag: [...document.querySelectorAll('#flags-table tbody td')].map((td) => td.textContent),
  rule: document.querySelector('#regressions .hint').textContent,
  title: document.getElementById('diff-title').textContent }))()"""


@needs_chromium
def test_a_custom_metric_over_the_runs(tmp_path):
    """--metric flops: its values per rank on average, flagged by compare's rule, in its own unit."""
    where = tmp_path / "runs"
    for name, (start, slow) in STARTS.items():
        write_dated_run(where / name, start, slow, flops=True)
    out = tmp_path / "h.html"
    assert main(["report", str(where), "--metric", "flops", "--threshold", "20", "-o", str(out)]) == 0
    data = _data(out)
    assert data["rule"]["metric"] == "flops" and data["rule"]["threshold"] == 0.2
    # As recorded per callpath (a custom metric is not made exclusive): main holds its whole time
    solve = [np.round(SOLVE * STARTS[n][1]).mean() / US for n in ORDER]
    assert [row[2] for row in data["exc"]] == pytest.approx(solve, rel=1e-4)
    assert [(f[0], data["callpaths"][f[1]]["path"]) for f in data["flags"]] == [(2, "main<solve")]
    facts = _page(out, [CUSTOM])
    assert facts["console"] == []
    [shown] = facts["checks"]
    assert shown["head"][3:5] == ["baseline (flops)", "run (flops)"]
    assert shown["flag"][:3] == ["main<solve", "a", "b to c"] and shown["flag"][5] == "+25.0%"
    assert [float(v) for v in shown["flag"][3:5]] == pytest.approx([solve[0], solve[2]], rel=1e-4)   # 5 digits
    assert "flops per rank on average" in shown["rule"] and "beyond 20%" in shown["rule"]
    assert shown["title"].endswith(" flops per rank.")


# -- the CI recipe's order: base and change alternating ------------------------------------

FLAGS = """(() => ({ facts: document.getElementById('facts').textContent,
  rows: [...document.querySelectorAll('#flags-table tbody tr')].map((tr) =>
    [...tr.children].map((td) => td.textContent)) }))()"""


@needs_chromium
def test_alternating_runs_flag_the_slowed_region_alone(tmp_path):
    """6 runs of 4 ranks with noise, base and change alternating (the guide's CI
    order), the change's solve 25% slower: solve is flagged at every run, each
    change (regressions and improvements) listed on the page as
    ``tinyprof.history`` gives it, nothing else; the header counts the list."""
    where = tmp_path / "ci"
    for k in range(6):
        write_dated_run(where / f"{k}-{'new' if k % 2 else 'base'}", f"2026-03-01T0{k}:00:00Z",
                  1.25 if k % 2 else 1.0, seed=k)
    table = tinyprof.history(where)
    assert set(table["callpath"]) == {("main", "solve")}
    assert sorted(table.loc[table["regressed"], "label"]) == ["1-new", "3-new", "5-new"]
    assert sorted(table.loc[table["improved"], "label"]) == ["2-base", "4-base"]
    assert table.loc[table["regressed"], "change"].between(0.18, 0.32).all()
    assert (table["p_value"] < 0.05).all() and list(table["since"]) == list(table["run"] - 1)
    out = history_page.write([str(where)], tmp_path / "ci.html")
    facts = _page(out, [FLAGS])
    assert facts["console"] == []
    [shown] = facts["checks"]
    assert "3 regression(s), 2 improvement(s) flagged" in shown["facts"]
    assert [(r[0], r[1], r[5], r[7]) for r in shown["rows"]] == [
        ("<".join(p), label, f"{100 * c:+.1f}%", "regressed" if c > 0 else "improved")
        for p, label, c in zip(table["callpath"], table["label"], table["change"])]
