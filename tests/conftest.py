"""Shared fixtures of the serial suite: fresh profiler state per test, a
deterministic clock, helpers to flush, read back and run subprocesses, the
tools a test needs, and the tiers (markers, registered in pyproject.toml):

- ``mpi``: launches ``mpiexec`` (the ``mpiexec`` fixture, ``@needs_mpiexec``), or lives in tests/mpi;
- ``browser``: drives a real Chromium (the ``chromium`` fixture, ``@needs_chromium``);
- ``native``: compiles C or C++ (tests/native, or marked by hand);
- ``slow``: takes tens of seconds alone (by hand, or the ``callflow_env`` fixture);
- ``network``: may reach the network (CallFlow's environment from PyPI, SimGrid from apt-get).

A test is marked ``mpi`` through the fixture, never by hand: pytest-mpi skips
a test it sees marked ``mpi`` in a run without --with-mpi.

``make check`` runs the tests of none of these tiers; ``make test`` runs them all."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from typing import Dict, Optional, Sequence

import pytest
from helpers.browser import find_chromium
from helpers.callflow import callflow_python
from helpers.mpi import require_mpiexec

import tinyprof
from tinyprof import annotate
from tinyprof.runtime import session

# One fuzz seed per run (tests/format/test_fuzz.py), printed at the end of every run.
os.environ.setdefault("TINYPROF_FUZZ_SEED", str(random.randrange(2**32)))


def pytest_terminal_summary(terminalreporter) -> None:
    seed = os.environ["TINYPROF_FUZZ_SEED"]
    terminalreporter.write_line(f"tinyprof fuzz seed: {seed} "
                                f"(replay: TINYPROF_FUZZ_SEED={seed} make test-serial)")


# A test requesting one of these fixtures (directly, through another fixture or
# @pytest.mark.usefixtures) is in that tier.
TIER_OF_FIXTURE = {"mpiexec": ("mpi",), "chromium": ("browser",), "build": ("native",),
                   "callflow_env": ("slow", "network")}
# A test under one of these folders of tests/ is in that tier.
TIER_OF_FOLDER = {"mpi": "mpi", "native": "native"}


def pytest_collection_modifyitems(config, items) -> None:
    # pytest-mpi's hook runs before this one (its plugin registers at configure,
    # after this conftest) and so does not see these marks: the serial tests that
    # launch mpiexec still run, while ``-m "not mpi"`` (the mark plugin runs last)
    # deselects them. tests/test_tiers.py checks both.
    tests = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        folder = os.path.relpath(str(item.path), tests).split(os.sep)[0]
        if folder != "mpi" and "mpi" in item.keywords and item.get_closest_marker("mpi") is None:
            raise pytest.UsageError(f"{item.nodeid}: a name or parameter id 'mpi' makes pytest-mpi skip "
                                    f"the test without --with-mpi; name it otherwise")
        tiers = {TIER_OF_FOLDER.get(folder)} | {t for f, ts in TIER_OF_FIXTURE.items() if f in item.fixturenames
                                                 for t in ts}
        for tier in sorted(tiers - {None} - {m.name for m in item.iter_markers()}):
            item.add_marker(tier)


@pytest.fixture(scope="session")
def mpiexec() -> str:
    """The path of mpiexec (and mpi4py is there); missing: skip, or fail under CI=1."""
    return require_mpiexec()


@pytest.fixture(scope="session")
def callflow_env() -> str:
    """The Python of CallFlow's own environment, made from PyPI on first use
    if ``make install`` did not (about 700 MB)."""
    return callflow_python()


@pytest.fixture(scope="session")
def chromium() -> str:
    """The path of Chromium; missing: skip, or fail under CI=1."""
    return find_chromium()


class FakeClock:
    """A nanosecond clock that only moves when told to: exact event times."""

    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now

    def tick(self, ns: int) -> None:
        self.now += ns


@pytest.fixture
def hot_path():
    """The annotation hot path under test: the one tinyprof chose (the C core
    when built). tests/annotate/test_annotate.py runs every test with each twin."""
    return annotate.impl


@pytest.fixture(autouse=True)
def fresh(tmp_path, hot_path):
    """Every test starts with an empty event map and a Profiler writing to tmp_path."""
    hot_path.reset()
    tinyprof.Profiler("test", outdir=tmp_path / "out")
    yield
    hot_path.set_clock(None)
    hot_path.reset()


@pytest.fixture
def clock(hot_path):
    """Install a FakeClock as the hot path's clock (restored by ``fresh``)."""
    c = FakeClock()
    hot_path.set_clock(c)
    return c


@pytest.fixture
def step_snapshots(clock):
    """``write(out, steps)``: a run kept with keep="all" in ``out`` whose
    snapshot k adds steps[k - 1] executions of main<step of 1000 ticks each
    (and 10 ticks of main's own)."""
    def write(out, steps: Sequence[int]) -> None:
        tinyprof.Profiler("s", frequency=3600, outdir=out, keep="all")
        snap = session.current().snapshotter
        for k, n in enumerate(steps, 1):
            with tinyprof.Event("main"):
                for _ in range(n):
                    with tinyprof.Event("step", loop=1):
                        clock.tick(1000)
                clock.tick(10)
            assert snap.take(k)
    return write


def _flush_read() -> tinyprof.Profile:
    outdir = tinyprof.flush()
    assert outdir is not None
    return tinyprof.read(outdir)


def _assert_ns(profile: tinyprof.Profile, path: str, expected: Sequence[Sequence[int]],
               rank: int = 0) -> None:
    got = profile.series(tuple(path.split("<")), rank)
    assert got == [[t / 1e9 for t in ex] for ex in expected], path


def _run_python(code: str, cwd, env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, **(env or {}))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


# Helpers are fixtures, not imports: tests/mpi has a conftest module of its own.

@pytest.fixture
def flush_read():
    """``flush_read()``: flush what was recorded so far and read it back."""
    return _flush_read


@pytest.fixture
def assert_ns():
    """``assert_ns(profile, "a<b", [[ns, ...], ...], rank=0)``: exact times per execution."""
    return _assert_ns


@pytest.fixture
def run_python():
    """``run_python(code, cwd, env)``: run code in a fresh interpreter, which must succeed."""
    return _run_python


@pytest.fixture(scope="session")
def traced_demo(tmp_path_factory, mpiexec) -> tinyprof.Profile:
    """The demo on 3 real MPI ranks for 20 steps, traced with MPI capture
    (``TINYPROF_TRACE=1 TINYPROF_MPI=1``): read once per session."""
    out = tmp_path_factory.mktemp("traced-demo") / "heat"
    env = dict(os.environ, TINYPROF_MPI="1", TINYPROF_TRACE="1")
    subprocess.run([mpiexec, "-n", "3", sys.executable, "-m", "tinyprof.demo", str(out),
                    "--steps", "20"], env=env, check=True, stdout=subprocess.DEVNULL, timeout=300)
    return tinyprof.read(str(out))
