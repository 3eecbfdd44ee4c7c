"""A callpath argument (issue 45, items 6 and 7): every public entry point
that takes a callpath reads a string as one region or a path written as the
commands print it, never as letters (``Profile.callpath``, in
analysis/callpaths.py); and finding one costs no walk of the depth, so that
20,000 nested levels are looked up one by one in linear time.

The profiles are real files written by the flush's own ``build_file``, read
back by ``tinyprof.read``.
"""
from __future__ import annotations

from typing import List

import pytest
from test_convert import record_ranks, write_profile
from test_hostile import deep_file
from test_mpi_convert import HALO, MAIN, REDUCE, SOLVE, make_profile
from test_pop import NRANKS, _growing, _write_snapshot

import tinyprof
from tinyprof.analysis import mpi_tables
from tinyprof.cli import main
from tinyprof.converters import ConvertError
from tinyprof.format.mpi_section import encode
from tinyprof.runtime import collect as _collect

pd = pytest.importorskip("pandas")

Event = tinyprof.Event
# Names as sampled stacks and scripts make them: "<" and "/" inside names.
SCRIPT, MODULE, READ = "app.py", "<module> (app.py:3)", "io/read"


def _odd(rank: int, clock) -> List[_collect.LocalEvent]:
    with Event(SCRIPT, tag=1.0):
        with Event(MODULE, tag=2.0):
            with Event(READ, loop=2, tag=3.0):
                clock.tick(10 + rank)
    for root, child, ns in (("ab", None, 7), ("a", "b", 5), ("x/y", None, 3), ("x", "y", 2),
                            ("p<q", "r", 11), ("p", "q<r", 13)):
        with Event(root):
            clock.tick(ns)
            if child:
                with Event(child):
                    clock.tick(ns)
    return _collect.collect(tinyprof.annotate.impl.root())


@pytest.fixture
def odd(tmp_path, clock) -> tinyprof.Profile:
    prof = tinyprof.Profiler("odd", selfkeys="tag:0", outdir=tmp_path / "odd")
    ranks, executions = record_ranks(2, _odd, clock)
    write_profile(tmp_path / "odd", "odd", prof.metrics, ranks, executions, [(0, 1), (1, 2)],
                  lambda index, lo, hi: [("mpi", encode([], [], []))])
    return tinyprof.read(tmp_path / "odd")


@pytest.fixture
def mpi_profile(tmp_path, clock) -> tinyprof.Profile:
    return tinyprof.read(make_profile(tmp_path / "prof", clock))


def test_a_string_is_one_region_or_a_path_never_letters(odd):
    assert odd.callpath("ab") == ("ab",)                     # not a<b
    assert odd.callpath("a<b") == odd.callpath("a/b") == odd.callpath(["a", "b"]) == ("a", "b")
    assert odd.callpath(f"{SCRIPT}<{MODULE}") == (SCRIPT, MODULE)
    assert odd.callpath(f"{SCRIPT}<{MODULE}<{READ}") == (SCRIPT, MODULE, READ)
    assert odd.callpath(f"{SCRIPT}/{MODULE}/{READ}") == (SCRIPT, MODULE, READ)
    # a whole name before any split: the fewest names that spell it
    assert odd.callpath("x/y") == ("x/y",) and odd.callpath("x<y") == ("x", "y")
    assert odd.callpath("p/q<r") == ("p", "q<r")
    with pytest.raises(KeyError, match="^\"no callpath 'm' in profile 'odd'\"$"):
        odd.callpath("m")
    with pytest.raises(KeyError, match="no callpath 'a<b<c' in profile 'odd'"):
        odd.callpath(("a", "b", "c"))
    with pytest.raises(TypeError, match="sequence of names"):
        odd.callpath(("a", 3))
    assert odd.callpath(odd.callpaths[2]) is odd.callpaths[2]


def test_p_q_r_is_ambiguous_only_between_paths_of_as_many_names(odd):
    with pytest.raises(KeyError, match=r"'p<q<r' is ambiguous: it names .*\('p<q', 'r'\)"):
        odd.callpath("p<q<r")


def test_loop_value_series_read_a_string_as_the_region(odd):
    path = (SCRIPT, MODULE, READ)
    text = f"{SCRIPT}<{MODULE}<{READ}"
    assert odd.loop(text) == odd.loop(path) == 2
    assert odd.loop("ab") == 0
    assert odd.value(text, "tag") == odd.value(path, "tag") == 3.0
    assert odd.value(SCRIPT, "tag") == 1.0
    assert odd.series("ab", 1) == [[7 / 1e9]] and odd.series("a<b", 1) == [[5 / 1e9]]
    assert odd.series(text, 1) == odd.series(path, 1) == [[11 / 1e9]]
    with pytest.raises(KeyError, match="no callpath 'main' in profile 'odd'"):
        odd.loop("main")
    with pytest.raises(KeyError, match="no callpath 'b'"):
        odd.series("b", 0)


def test_pop_reads_a_string_as_the_region(odd, mpi_profile):
    assert list(odd.pop(callpath="ab")["callpath"]) == [("ab",)]
    assert list(odd.pop(callpath="a")["callpath"]) == [("a",), ("a", "b")]
    assert list(odd.pop(callpath=SCRIPT)["callpath"]) == [
        (SCRIPT,), (SCRIPT, MODULE), (SCRIPT, MODULE, READ)]
    assert mpi_profile.pop(callpath="main<solve").equals(mpi_profile.pop(callpath=SOLVE))
    assert list(mpi_profile.pop(callpath="main")["callpath"]) == [MAIN, HALO, SOLVE, REDUCE]
    with pytest.raises(KeyError, match="no callpath 'mai' in profile 'mpiconv'"):
        mpi_profile.pop(callpath="mai")


def test_comm_matrix_reads_a_string_as_the_region(mpi_profile):
    whole = mpi_profile.comm_matrix()
    assert whole.sum() == 4096 + 200 + 6000
    assert (mpi_profile.comm_matrix("main") == whole).all()          # halo is below main
    assert (mpi_profile.comm_matrix("main<halo") == mpi_profile.comm_matrix(HALO)).all()
    assert (mpi_profile.comm_matrix("main/halo") == whole).all()
    assert mpi_profile.comm_matrix("main<solve").sum() == 0
    assert mpi_profile.comm_matrix("main", metric="messages").tolist() == [[0, 4, 2], [4, 0, 0], [0, 0, 0]]
    with pytest.raises(KeyError, match="no callpath 'halo'"):
        mpi_profile.comm_matrix("halo")


def test_mpi_sums_read_a_string_as_one_region(mpi_profile):
    one = mpi_tables.group(mpi_profile, ("callpath", "op"), "main<solve")
    assert one == mpi_tables.group(mpi_profile, ("callpath", "op"), ["main<solve"])
    assert one == mpi_tables.group(mpi_profile, ("callpath", "op"), [SOLVE])
    assert [key for key, *_ in one] == [(SOLVE, "Bcast"), (REDUCE, "Allreduce")]
    with pytest.raises(ConvertError, match="no callpath 'solve'"):
        mpi_tables.group(mpi_profile, ("op",), "solve")


def test_pop_history_reads_a_string_as_the_region(tmp_path, clock):
    out = tmp_path / "g"
    tinyprof.Profiler("g", outdir=out)
    for k in range(1, 3):
        ranks, executions = record_ranks(NRANKS, lambda r, c: _growing(r, c, k), clock)
        _write_snapshot(out, k, ranks, executions)
    text = tinyprof.pop_history(out, callpath="main<step")
    assert list(text["callpath"]) == [("main", "step"), ("main", "step", "compute"),
                                      ("main", "step", "sync")] * 2
    assert text.equals(tinyprof.pop_history(out, callpath=("main", "step")))
    with pytest.raises(KeyError, match="no callpath 'main<nope' in the snapshots of"):
        tinyprof.pop_history(out, callpath="main<nope")


def test_the_cli_reads_callpaths_with_names_holding_separators(odd, tmp_path, capsys):
    assert main(["pop", odd.files[0], "--callpath", f"{SCRIPT}<{MODULE}"]) == 0
    out = capsys.readouterr().out
    assert MODULE in out and READ in out and "ab" not in out.split()
    assert main(["pop", odd.files[0], "--callpath", "x/y"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert any(line.split()[0] == "x/y" for line in shown[1:]) and not any(
        line.split()[0] == "y" for line in shown[1:] if line.split())


def test_twenty_thousand_levels_are_looked_up_one_by_one(tmp_path):
    """Every callpath of a 20,000-level chain, by loop, value-free series
    and its own text: each is O(1) (its hash is kept, the files share it),
    not a walk of its depth (20 s before, quadratic)."""
    depth = 20_000
    deep_file(tmp_path, depth)
    p = tinyprof.read(tmp_path)
    assert len(p.callpaths) == depth
    assert [p.loop(c) for c in p.callpaths] == [0] * depth
    assert [p.series(c, 0) for c in p.callpaths] == [[[(depth - i) / 1e9]] for i in range(depth)]
    deepest = p.callpaths[-1]
    assert p.callpath("<".join("abc"[i % 3] for i in range(depth))) is deepest
    assert p.callpath(tuple(deepest)) is deepest
