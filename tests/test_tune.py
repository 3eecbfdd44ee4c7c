"""``tinyprof tune`` at tiny scale: the sweep table, the recommendation, the
clean-up and the bad-argument paths; and the synthetic profile it flushes."""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest

from tinyprof import _sweep, tune

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
needs_mpi = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or not os.path.exists(MPIEXEC),
    reason="needs mpi4py and mpiexec next to the Python executable (pip install mpi4py mpich)")


@pytest.mark.parametrize("callpaths", [1, 2, 11, 20, 200, 1001])
def test_synthetic_profile_has_the_asked_callpaths(callpaths, flush_read):
    _sweep.record(rank=1, callpaths=callpaths, iterations=3)
    profile = flush_read()
    assert len(profile.callpaths) == callpaths
    variant = [p for p in profile.callpaths if p[:2] == ("main", "variant1")]
    assert len(variant) == (callpaths - 1) // 10
    assert all(len(profile.series(p, 0)[0]) == 3 for p in profile.callpaths if len(p) > 1)


def test_the_paper_workload_is_181_common_and_19_non_common_callpaths():
    *groups, variant = _sweep.shape(200)
    assert (groups, variant) == ([9] * 18, 18)


def test_sweep_counts_halve_and_include_the_count_in_force(monkeypatch):
    monkeypatch.delenv("TINYPROF_AGGREGATORS", raising=False)
    assert tune.counts(64) == [64, 32, 16, 8, 4, 2, 1]
    assert tune.counts(3) == [3, 1]
    monkeypatch.setenv("TINYPROF_AGGREGATORS", "5")
    assert tune.counts(64) == [64, 32, 16, 8, 5, 4, 2, 1]


def test_recommendation_prefers_fewer_files_within_the_tolerance():
    runs = [{"A": a, "median": [t]} for a, t in ((16, 1.00), (8, 1.05), (4, 1.20), (1, 2.0))]
    assert tune.recommend(runs)["A"] == 8
    assert tune.recommend(runs, tolerance=0.0)["A"] == 16


def test_report_says_when_the_recommendation_is_within_the_noise(monkeypatch):
    monkeypatch.delenv("TINYPROF_AGGREGATORS", raising=False)
    args = tune._parser().parse_args(["--repeats", "3"])

    def run(a, total, low, high):
        return {"A": a, "bytes": 100, "median": [total] + [0.0] * 6, "range": [low, high]}

    apart = tune.report([run(64, 0.5, 0.4, 0.6), run(4, 0.9, 0.8, 1.0)], 64, args)
    assert apart.splitlines()[-1] == "export TINYPROF_AGGREGATORS=64"
    assert "4 *" in apart and "0.4..0.6" not in apart and "400.0..600.0" in apart
    assert "note:" not in apart
    close = tune.report([run(64, 0.5, 0.4, 0.85), run(4, 0.9, 0.8, 1.0)], 64, args)
    assert "note: the totals of A = 64 and A = 4 overlap" in close
    assert close.splitlines()[-1] == "export TINYPROF_AGGREGATORS=64"


@needs_mpi
def test_tune_on_three_ranks(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    proc = subprocess.run(
        [MPIEXEC, "-n", "3", sys.executable, "-m", "tinyprof.tune", "--callpaths", "20",
         "--iterations", "5", "--repeats", "2", "--outdir", str(scratch)],
        capture_output=True, text=True, timeout=120,
        env=dict(os.environ, TINYPROF_AGGREGATORS=""))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if re.match(r"\s+\d+ ", line)]
    assert [row[0] for row in rows] == ["3", "1"]
    assert rows[1][1] == "*"                     # the default, P // 16 clamped to 1
    # A, total, min..max, the phases, bytes
    assert all(len(row) == 4 + len(_sweep.PARTS) + (row[1] == "*") for row in rows)
    last = proc.stdout.splitlines()[-1]
    assert re.fullmatch(r"export TINYPROF_AGGREGATORS=[13]", last), proc.stdout
    assert os.listdir(scratch) == []


@pytest.mark.parametrize("args, env, message", [
    (["--callpaths", "0"], {}, "argument --callpaths: must be an integer >= 1, not '0'"),
    (["--repeats", "x"], {}, "argument --repeats: must be an integer >= 1, not 'x'"),
    pytest.param(["--outdir", "missing"], {}, "tinyprof tune: missing: No such file or directory",
                 marks=needs_mpi),
    pytest.param([], {"TINYPROF_AGGREGATORS": "0"},
                 "tinyprof tune: TINYPROF_AGGREGATORS must be an integer >= 1, not '0'",
                 marks=needs_mpi),
])
def test_bad_arguments_end_with_one_line_and_status_2(tmp_path, args, env, message):
    proc = subprocess.run([sys.executable, "-m", "tinyprof.cli", "tune", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **env))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines()[-1].endswith(message), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert os.listdir(tmp_path) == []


def _imports(module: str) -> set:
    """The tinyprof modules ``module`` imports anywhere in its code, by absolute name."""
    import ast

    import tinyprof

    path = os.path.join(os.path.dirname(tinyprof.__file__), *module.split(".")[1:]) + ".py"
    out = set()
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ".".join(module.split(".")[:-node.level] + ([node.module] if node.module else []))
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return {m for m in out if m.startswith("tinyprof")}


def test_cli_and_tune_do_not_import_each_other():
    assert "tinyprof.tune" in _imports("tinyprof.commands.tune")
    assert not {m for m in _imports("tinyprof.tune") if m.startswith("tinyprof.cli")}
    assert {m for m in _imports("tinyprof.tune") if m.startswith("tinyprof.commands")} == {
        "tinyprof.commands", "tinyprof.commands.exit"}
