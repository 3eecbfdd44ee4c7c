"""The C++ writer's automatic run metadata, read back by the Python reader:
a real program under a real mpiexec, and one inside a git work tree."""
from __future__ import annotations

import re
import shlex
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest
from helpers.native import run
from helpers.scenarios import SCENARIO_CPP, common_only, write_scripts
from hypothesis import given, settings
from hypothesis import strategies as st

import tinyprof
from tinyprof.format import hostlist


def _scenario(build, tmp_path: Path, nranks: int, exe: Optional[Path] = None, **extra: str):
    prefix, out = tmp_path / "script", tmp_path / "out"
    write_scripts(prefix, max(nranks, 1), common_only)
    exe = exe or build(SCENARIO_CPP)
    cmd = [exe, prefix, out, *([] if nranks else ["--no-mpi"])]
    result = run(cmd, nranks, TINYPROF_METADATA="queue=debug,%bad", **extra)
    return tinyprof.read(str(out)), [str(c) for c in cmd], result


def test_cxx_records_ranks_hosts_library_and_command(build, tmp_path):
    # what mpi4py (the library the programs link too) says, in a process of its own:
    # importing it here would make the serial suite's flushes collective
    host, library = run([sys.executable, "-c", "from mpi4py import MPI; print(MPI.Get_processor_name());"
                         "print(MPI.Get_library_version().split('\\n')[0].strip())"]).stdout.split("\n")[:2]
    p, cmd, result = _scenario(build, tmp_path, 3)
    m = p.metadata
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", m.pop("start"))
    assert m == {"command": shlex.join(cmd), "hostnames": host, "rank_hosts": f"{host}*3", "nranks": 3,
                 "nodes": 1, "mpi_library": library,
                 "tinyprof": tinyprof.__version__, "writer": "c++", "queue": "debug"}
    assert result.stderr.count("TINYPROF_METADATA") == 3     # each rank warns once, and goes on


def test_cxx_without_mpi(build, tmp_path):
    m = _scenario(build, tmp_path, 0)[0].metadata
    assert (m["nranks"], m["nodes"], m["hostnames"], m["rank_hosts"]) == (1, 1, socket.gethostname(),
                                                                           socket.gethostname())
    assert "mpi_library" not in m and "git" not in m


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_cxx_records_the_git_commit_of_its_directory(build, tmp_path):
    repo = tmp_path / "repo"
    (repo / "bin").mkdir(parents=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
    exe = repo / "bin" / "scenario"
    shutil.copy(build(SCENARIO_CPP), exe)
    subprocess.run([*git, "add", "bin"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=repo, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True,
                          text=True).stdout.strip()
    assert _scenario(build, tmp_path, 0, exe)[0].metadata["git"] == head


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_cxx_and_python_read_the_same_commit(build, tmp_path):
    """A branch, a subdirectory, packed refs, a detached HEAD, a worktree and
    broken repositories: both sides read the same commit (or none)."""
    from tinyprof.runtime.metadata import git_commit
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    repo = tmp_path / "repo"
    (repo / "src" / "deep").mkdir(parents=True)
    exe = build("tests/native/git_commit.cpp")
    seen = set()

    def same(*dirs: Path) -> None:
        want = [git_commit(str(d)) or "" for d in dirs]
        assert run([exe, *dirs]).stdout.split("\n")[:-1] == want, dirs
        seen.update(want)

    def step(*args: str, where: Path = repo) -> None:
        subprocess.run([*git, *args], cwd=repo, check=True, capture_output=True)
        same(where, repo / "src" / "deep", tmp_path)

    subprocess.run([*git, "init", "-q", "-b", "trunk"], cwd=repo, check=True)
    step("commit", "-q", "--allow-empty", "-m", "one")
    step("pack-refs", "--all")
    step("commit", "-q", "--allow-empty", "-m", "two")
    step("checkout", "-q", "HEAD~1")
    step("worktree", "add", "-q", "-b", "side", str(tmp_path / "wt"), "trunk", where=tmp_path / "wt")
    for i, head in enumerate(["", "ref: refs/heads/../../x", "ref: refs/heads/none", "zz"]):
        broken = tmp_path / "broken" / str(i)
        (broken / ".git" / "refs").mkdir(parents=True)
        (broken / ".git" / "HEAD").write_text(head)
        same(broken)
    assert len(seen - {""}) == 2 and "" in seen       # both commits, and none


# Names that the run-length text must escape or refuse (`,`, `*`, `%`, empty),
# and bytes the meta section escapes after it (newline, non-ASCII).
_HOSTS = st.lists(st.sampled_from(["n1", "n2", "a,b", "*", "x*2", "%", "%2C", "", "é", "l\nb|"]),
                  max_size=12)


def test_cxx_encodes_rank_hosts_as_python_does(build):
    exe = build("tests/native/rank_hosts.cpp")

    def cxx(hosts) -> bytes:
        return subprocess.run([str(exe)], input="".join(h + "\0" for h in hosts).encode(),
                              capture_output=True, check=True, timeout=30).stdout

    assert cxx(["vm"] * 3 + ["a,b", "a,b", "%", "x*2", "é"]) == b"vm*3,a%2Cb*2,%25,x%2A2,\xc3\xa9"
    assert cxx([]) == cxx(["n1", ""]) == b""         # nothing to name: the key is left out

    @settings(max_examples=100, deadline=None, database=None)
    @given(_HOSTS)
    def same(hosts):
        assert cxx(hosts) == hostlist.encode(hosts).encode()
    same()
