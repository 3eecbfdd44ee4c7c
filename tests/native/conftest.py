"""Build and run helpers of the native (C++) tests: programs are compiled once
per session with the mpicxx of the mpich wheel, into pytest's tmp dirs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

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
            "tests/native/snapshot_threads.cpp", "tests/native/pop.cpp"]

# The implementation (TINYPROF_IMPLEMENTATION), compiled once with the programs
# and linked into each as an archive, as the CMake target tinyprof::tinyprof
# is: a program that includes tinyprof.hpp takes it; the codec drivers (detail
# headers only) and heat.cpp (which compiles the implementation itself) do not.
IMPLEMENTATION = "native/src/tinyprof.cpp"


class Builder:
    """Compiles each source once and links programs from the objects:
    ``build("tests/native/values.cpp")`` -> executable; ``build(source, *libs)``
    links ``libs`` too, into an executable of its own."""

    def __init__(self, outdir: Path) -> None:
        self.outdir = outdir
        self.archive = outdir / "libtinyprof_impl.a"
        self.objects: Dict[str, Path] = {}
        self.done: Dict[Tuple[str, ...], Path] = {}

    def __call__(self, source: str, *libs: str) -> Path:
        if not self.objects:
            self.compile([IMPLEMENTATION, *PROGRAMS])
            self.check([["ar", "rcs", str(self.archive), str(self.objects[IMPLEMENTATION])]])
        if source not in self.objects:
            self.compile([source])
        key = (source, *libs)
        if key not in self.done:
            exe = self.outdir / (Path(source).stem + ("-linked" if libs else ""))
            self.check([[str(MPICXX), *FLAGS, str(self.objects[source]), str(self.archive), *libs,
                         "-o", str(exe)]])
            self.done[key] = exe
        return self.done[key]

    def compile(self, sources: Sequence[str]) -> None:
        cmds = []
        for source in sources:
            self.objects[source] = self.outdir / (Path(source).stem + ".o")
            cmds.append([str(MPICXX), *FLAGS, "-I", str(ROOT / "native" / "include"), "-c",
                         str(ROOT / source), "-o", str(self.objects[source])])
        self.check(cmds)

    @staticmethod
    def check(cmds: Sequence[Sequence[str]]) -> None:
        """Runs ``cmds`` in parallel; each must succeed."""
        procs = [(cmd, subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)) for cmd in cmds]
        for cmd, proc in procs:
            _, err = proc.communicate()
            assert proc.returncode == 0, f"{' '.join(cmd)}\n{err}"


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
