"""Build and run helpers of the native (C++) tests: programs are compiled once
per session with the mpicxx of the mpich wheel, into pytest's tmp dirs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MPICXX = BIN / "mpicxx"
MPIEXEC = BIN / "mpiexec"
FLAGS = ["-std=c++17", "-Wall", "-Wextra", "-Werror", "-O2", "-pthread"]
EPOCH = "1700000000"


# Every program the tests run; compiled together, in parallel, on first need.
PROGRAMS = ["tests/native/scenario.cpp", "tests/native/values.cpp", "tests/native/threads.cpp",
            "tests/native/snapshot.cpp", "tests/native/flush_threads.cpp", "tests/native/names.cpp",
            "tests/native/mpi_encode.cpp", "tests/native/mpi_capture.cpp", "native/examples/heat.cpp",
            "tests/native/trace_encode.cpp", "tests/native/traced.cpp", "tests/native/stuck.cpp",
            "tests/native/snapshot_threads.cpp"]


class Builder:
    """Compiles each program once: ``build("tests/native/x.cpp")`` -> executable."""

    def __init__(self, outdir: Path) -> None:
        self.outdir = outdir
        self.done: Dict[str, Path] = {}

    def __call__(self, source: str) -> Path:
        if not self.done:
            self.compile(PROGRAMS)
        if source not in self.done:
            self.compile([source])
        return self.done[source]

    def compile(self, sources: Sequence[str]) -> None:
        jobs = []
        for source in sources:
            exe = self.outdir / Path(source).stem
            cmd = [str(MPICXX), *FLAGS, "-I", str(ROOT / "native" / "include"),
                   str(ROOT / source), "-o", str(exe)]
            jobs.append((source, exe, cmd, subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)))
        for source, exe, cmd, proc in jobs:
            _, err = proc.communicate()
            assert proc.returncode == 0, f"{' '.join(cmd)}\n{err}"
            self.done[source] = exe


@pytest.fixture(scope="session")
def build(tmp_path_factory) -> Builder:
    if not MPICXX.exists():
        pytest.skip(f"no mpicxx at {MPICXX} (make install)")
    return Builder(tmp_path_factory.mktemp("native-build"))


def env(**extra: str) -> Dict[str, str]:
    e = dict(os.environ, SOURCE_DATE_EPOCH=EPOCH)
    e.pop("TINYPROF_AGGREGATORS", None)
    e.update(extra)
    return e


def run(cmd: Sequence[str], nranks: int = 0, check: bool = True, timeout: int = 120,
        **extra: str) -> subprocess.CompletedProcess:
    """Run ``cmd``, under ``mpiexec -n nranks`` unless nranks is 0."""
    full: List[str] = [str(MPIEXEC), "-n", str(nranks), *map(str, cmd)] if nranks else list(map(str, cmd))
    result = subprocess.run(full, capture_output=True, text=True, timeout=timeout, env=env(**extra))
    if check:
        assert result.returncode == 0, f"{' '.join(full)}\n{result.stdout}\n{result.stderr}"
    return result
