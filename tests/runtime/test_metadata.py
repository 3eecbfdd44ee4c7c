"""Run metadata (docs/api.md, "Run metadata"): recorded by real runs, alone
and under a real mpiexec, read back with ``read(P).metadata``; the user's
keys from ``Profiler(metadata=...)`` and ``TINYPROF_METADATA``; the git
commit of a real repository; snapshots carry it too."""
from __future__ import annotations

import os
import platform
import re
import shlex
import shutil
import socket
import subprocess
import sys
import textwrap
import warnings

import pytest
from helpers.mpi import MPIEXEC, needs_mpiexec

import tinyprof
from tinyprof.format import meta_section
from tinyprof.runtime import metadata as _metadata
from tinyprof.runtime.settings import Settings, parse_metadata

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _run(tmp_path, code: str, nranks: int = 0, env=None):
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(code))
    cmd = [sys.executable, str(script), "an arg", "x'y"]
    if nranks:
        cmd = [MPIEXEC, "-n", str(nranks), *cmd]
    full = {k: v for k, v in os.environ.items()
            if k not in ("TINYPROF", "TINYPROF_METADATA", "TINYPROF_AUTO_METADATA")}
    full.update(env or {})
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=full)
    assert proc.returncode == 0, f"rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


APP = """
    import tinyprof
    tinyprof.Profiler("app", outdir="out", metadata={"size": 64, "eps": 0.25,
                                                     "case": "line\\nbreak | 100%"})
    with tinyprof.Event("main"):
        pass
    tinyprof.flush()
"""


def test_a_run_reads_back_its_metadata(tmp_path):
    _run(tmp_path, APP, env={"TINYPROF_METADATA": "queue=debug,note=a%2Cb=c,size=1"})
    meta = tinyprof.read(tmp_path / "out").metadata
    start = meta.pop("start")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", start)
    assert meta == {
        "size": 64, "eps": 0.25, "case": "line\nbreak | 100%",     # typed, the program's word
        "queue": "debug", "note": "a,b=c",
        "command": shlex.join([sys.executable, str(tmp_path / "app.py"), "an arg", "x'y"]),
        "hostnames": socket.gethostname(), "rank_hosts": socket.gethostname(), "nranks": 1, "nodes": 1,
        "python": platform.python_version(), "tinyprof": tinyprof.__version__,
        "writer": "python",
    }                                   # tmp_path is in no git work tree: no "git" key


@needs_mpiexec
@pytest.mark.parametrize("aggregators", [1, 3])
def test_an_mpi_run_records_its_ranks_hosts_and_library(tmp_path, aggregators):
    proc = _run(tmp_path, """
        from mpi4py import MPI
        import tinyprof
        tinyprof.Profiler("app", outdir="out", aggregators=%d)
        with tinyprof.Event("main"):
            pass
        tinyprof.flush()
        if MPI.COMM_WORLD.rank == 0:
            print(MPI.Get_library_version().split("\\n")[0].strip())
            print(MPI.Get_processor_name())
    """ % aggregators, nranks=3)
    version, host = proc.stdout.split("\n")[:2]        # as rank 0 saw them
    p = tinyprof.read(tmp_path / "out")
    assert len(p.files) == aggregators
    m = p.metadata
    assert (m["nranks"], m["nodes"], m["hostnames"], m["rank_hosts"]) == (3, 1, host, f"{host}*3")
    assert m["mpi_library"] == version and version.startswith(("MPICH", "Open MPI", "Intel"))
    # file 0 alone holds it
    assert [b"\nsection meta " in open(f, "rb").read() for f in p.files] == \
        [True] + [False] * (aggregators - 1)


def test_rank_hosts_of_a_huge_round_robin_run_is_left_out():
    """120 000 ranks alternating between two hosts: 1.2 MB of `rank_hosts`,
    over the 2^20-byte bound, so the writer leaves it out; the rest stays,
    and a block placement of as many ranks is two items."""
    round_robin = ["node00000", "node00001"] * 60_000
    entries = _metadata.automatic(0.0, round_robin, None)
    assert len(entries["rank_hosts"]) == 1_200_000 - 1
    got = meta_section.parse(meta_section.encode(entries), "m.tp", 1)
    assert "rank_hosts" not in got and (got["nranks"], got["nodes"]) == (120_000, 2)
    blocks = _metadata.automatic(0.0, sorted(round_robin), None)["rank_hosts"]
    assert blocks == "node00000*60000,node00001*60000"


@needs_mpiexec
def test_per_rank_snapshots_carry_the_metadata(tmp_path):
    """Below MPI_THREAD_MULTIPLE each rank writes its own snapshot file, with
    no MPI call: rank 0's file has the hosts gathered at start."""
    _run(tmp_path, """
        from mpi4py import MPI
        import tinyprof
        p = tinyprof.Profiler("app", outdir="out", frequency=3600, metadata={"k": "v"})
        with tinyprof.Event("main"):
            pass
        assert p.snapshot(60)
        MPI.COMM_WORLD.Barrier()
        p.close()
    """, nranks=2, env={"TINYPROF_METADATA": "from_env=1"})
    assert tinyprof.snapshots(tmp_path / "out") == [1]
    m = tinyprof.read(tmp_path / "out").metadata
    assert (m["k"], m["from_env"], m["nranks"], m["nodes"]) == ("v", "1", 2, 1)


def test_delta_snapshots_keep_the_metadata(tmp_path):
    _run(tmp_path, """
        import tinyprof
        p = tinyprof.Profiler("app", outdir="out", frequency=3600, keep="all",
                              metadata={"k": 7})
        for i in range(3):
            with tinyprof.Event("main"):
                pass
            assert p.snapshot(60)
        p.close()
    """)
    out = tmp_path / "out"
    assert tinyprof.snapshots(out) == [1, 2, 3]
    assert b" over " in next((out / "snapshots" / "000003").glob("*.tp")).read_bytes()
    for k in (1, 2, 3):
        assert tinyprof.read(out, snapshot=k).metadata["k"] == 7
    assert tinyprof.read(out).metadata["nranks"] == 1


def test_auto_metadata_off_leaves_the_user_keys_alone(tmp_path):
    _run(tmp_path, APP, env={"TINYPROF_AUTO_METADATA": "0"})
    assert tinyprof.read(tmp_path / "out").metadata == \
        {"size": 64, "eps": 0.25, "case": "line\nbreak | 100%"}


def test_no_metadata_writes_no_section(tmp_path):
    _run(tmp_path, """
        import tinyprof
        tinyprof.Profiler("app", outdir="out")
        with tinyprof.Event("main"):
            pass
    """, env={"TINYPROF_AUTO_METADATA": "0"})
    assert b"section meta" not in (tmp_path / "out" / "app.0-of-1.tp").read_bytes()
    assert tinyprof.read(tmp_path / "out").metadata == {}


# -- TINYPROF_METADATA and Profiler(metadata=...) ----------------------------------------

@pytest.mark.parametrize("text,entries,problems", [
    ("", {}, 0),
    ("a=1,b=x=y,,c=", {"a": "1", "b": "x=y", "c": ""}, 0),
    ("v=caf%C3%A9%2c%25", {"v": "café,%"}, 0),
    ("a=1,bad,b=2", {"a": "1", "b": "2"}, 1),
    ("a=50%,b=%4,c=%zz,d=ok", {"d": "ok"}, 3),
    ("1a=x,a b=y,=z,k=v", {"k": "v"}, 3),
    ("a=1,a=2", {"a": "1"}, 1),
    ("k=" + "x" * (1 << 20 + 1), {}, 1),
])
def test_env_metadata_parsing(text, entries, problems):
    got, why = parse_metadata(text)
    assert (got, len(why)) == (entries, problems)


def test_bad_env_metadata_warns_once_and_keeps_the_good_items(monkeypatch):
    monkeypatch.setenv("TINYPROF_METADATA", "a=1,%bad,b=50%,c=3")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = Settings.create()
    assert s.metadata == (("a", "1"), ("c", "3"))
    assert len(caught) == 1
    assert "TINYPROF_METADATA" in str(caught[0].message) and "(and 1 more)" in str(caught[0].message)


@pytest.mark.parametrize("given,error", [
    ([("a", 1)], TypeError),
    ({"a": True}, TypeError),
    ({"a": None}, TypeError),
    ({"a": [1]}, TypeError),
    ({3: "x"}, TypeError),
    ({"a b": "x"}, ValueError),
    ({"": "x"}, ValueError),
    ({"x" * 65: "x"}, ValueError),
    ({"a": 2**63}, ValueError),
    ({"a": "x" * ((1 << 20) + 1)}, ValueError),
])
def test_bad_profiler_metadata_raises_at_once(given, error):
    with pytest.raises(error, match="metadata"):
        Settings.create(metadata=given)


def test_profiler_metadata_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("TINYPROF_METADATA", "a=env,b=env")
    assert Settings.create(metadata={"a": 1.5}).metadata == (("a", 1.5), ("b", "env"))


# -- the git commit ------------------------------------------------------------------------

def _git(cwd, *args) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout.strip()


@needs_git
def test_git_commit_of_a_branch_a_packed_ref_a_detached_head_and_a_worktree(tmp_path):
    repo = tmp_path / "repo"
    (repo / "src" / "deep").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "trunk")
    (repo / "f").write_text("1")
    _git(repo, "add", "f")
    _git(repo, "commit", "-qm", "one")
    first = _git(repo, "rev-parse", "HEAD")
    assert _metadata.git_commit(str(repo / "src" / "deep")) == first
    _git(repo, "pack-refs", "--all")
    assert not (repo / ".git" / "refs" / "heads" / "trunk").exists()
    assert _metadata.git_commit(str(repo)) == first
    (repo / "f").write_text("2")
    _git(repo, "commit", "-qam", "two")
    second = _git(repo, "rev-parse", "HEAD")
    assert _metadata.git_commit(str(repo)) == second
    _git(repo, "checkout", "-q", first)
    assert _metadata.git_commit(str(repo)) == first
    _git(repo, "worktree", "add", "-q", "-b", "side", str(tmp_path / "wt"), second)
    assert _metadata.git_commit(str(tmp_path / "wt")) == second


@needs_git
def test_an_app_in_a_git_tree_records_its_commit(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "app.py").write_text("")
    _git(tmp_path, "add", "app.py")
    _git(tmp_path, "commit", "-qm", "app")
    _run(tmp_path, APP)
    assert tinyprof.read(tmp_path / "out").metadata["git"] == _git(tmp_path, "rev-parse", "HEAD")


@pytest.mark.parametrize("head", ["", "ref: refs/heads/../../../etc", "ref: HEAD", "zz",
                                  "ref: refs/heads/missing"])
def test_a_broken_repository_gives_no_commit(tmp_path, head):
    (tmp_path / ".git" / "refs").mkdir(parents=True)
    (tmp_path / ".git" / "HEAD").write_text(head)
    assert _metadata.git_commit(str(tmp_path)) is None


def test_an_unreadable_git_file_gives_no_commit(tmp_path):
    (tmp_path / ".git").write_bytes(b"\xff\xfe garbage")
    assert _metadata.git_commit(str(tmp_path)) is None
    (tmp_path / ".git").write_text("gitdir: /nonexistent/place")
    assert _metadata.git_commit(str(tmp_path)) is None


def test_the_profiler_reads_back_the_users_keys(tmp_path, monkeypatch):
    monkeypatch.setenv("TINYPROF_METADATA", "a=env,b=env")
    p = tinyprof.Profiler("r", outdir=tmp_path / "r", metadata={"a": 2})
    try:
        assert p.metadata == {"a": 2, "b": "env"}
    finally:
        p.close()
