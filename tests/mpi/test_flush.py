"""The collective flush on real MPI ranks: every aggregator count, both phase-1
paths (hints right, hints wrong), communicators, write failures.

Run at several sizes: ``mpiexec -n N python -m pytest --with-mpi tests/mpi``.
Every test compares the profile read back with what each rank recorded:
exact counts, exact values. Failures are gathered to all ranks before any
assert, so that no rank waits forever in a collective.
"""
from __future__ import annotations

import os
import warnings

import pytest
from _workload import SELFKEYS, all_errors, record, snapshot, verify
from mpi4py import MPI

import tinyprof
from tinyprof.format import hostlist
from tinyprof.format.output_dir import file_name
from tinyprof.runtime import session, settings

pytestmark = [pytest.mark.mpi, pytest.mark.filterwarnings("error")]


def _flush(over, outdir, **options) -> tuple:
    """Flush with a fresh Profiler; returns (errors, aggregator count over ``over``)."""
    prof = tinyprof.Profiler("wl", selfkeys=SELFKEYS, outdir=outdir, **options)
    naggs = min(max(1, prof.aggregators or over.Get_size() // 16), over.Get_size())
    got = tinyprof.flush()
    return ([] if got == str(outdir) else [f"flush returned {got!r}"]), naggs


def test_every_aggregator_count_gives_what_each_rank_recorded(world, mpi_tmp_path):
    record(world)
    mine = snapshot()
    errors = []
    for naggs in range(1, world.Get_size() + 1):
        # Same directory each time: the set of the previous count must be gone.
        errs, _ = _flush(world, mpi_tmp_path, aggregators=naggs)
        errors += errs + verify(world, mpi_tmp_path, mine, naggs)
    assert not all_errors(world, errors)
    # and the marker of the newest run, the directory being there when it started
    assert sorted(os.listdir(mpi_tmp_path)) == [file_name("wl", i, naggs) for i in range(naggs)] \
        + ["wl.run"]


@pytest.mark.parametrize("aggregators", [1, 2])
def test_the_run_metadata_names_every_rank_and_host(world, mpi_tmp_path, aggregators):
    tinyprof.Profiler("md", outdir=mpi_tmp_path, aggregators=aggregators, metadata={"k": 1})
    with tinyprof.Event("main"):
        pass
    tinyprof.flush()
    per_rank = world.allgather(MPI.Get_processor_name())
    hosts = sorted(set(per_rank))
    got = tinyprof.read(mpi_tmp_path).metadata
    want = {"k": 1, "nranks": world.Get_size(), "nodes": len(hosts), "hostnames": ",".join(hosts),
            "mpi_library": MPI.Get_library_version().split("\n")[0].strip()}
    errors = [] if {k: got.get(k) for k in want} == want else [f"metadata {got}"]
    if got.get("rank_hosts") != hostlist.encode(per_rank):      # each rank's host, in rank order
        errors.append(f"rank_hosts {got.get('rank_hosts')!r}, not {per_rank}")
    assert not all_errors(world, errors)


@pytest.mark.parametrize("hint", ["right", "wrong_hint", "swap_order", "loop_clash"])
def test_phase_one_falls_back_to_full_sync_only_on_wrong_hints(world, mpi_tmp_path, hint):
    record(world, **({} if hint == "right" else {hint: True}))
    errs, naggs = _flush(world, mpi_tmp_path, aggregators=2)
    errors = errs + verify(world, mpi_tmp_path, snapshot(), naggs)
    assert not all_errors(world, errors)
    # One rank cannot disagree with itself.
    assert session.current().last_flush.sync_path == ("common" if hint == "right" or world.Get_size() == 1 else "full")


@pytest.mark.parametrize("hints", ["right", "wrong"])
def test_the_callpath_list_is_every_ranks_in_rank_order(world, mpi_tmp_path, hints):
    """Phase 1 merges the ranks' lists up a tree: the result must be the
    lists of ranks 0, 1, 2, ... one after the other, each callpath at its
    first occurrence (behind the common ones when the hints hold), and the
    lowest rank's loop mode, but 2 giving way (checked by ``verify``)."""
    rank = world.Get_rank()
    tinyprof.Profiler("order", outdir=mpi_tmp_path, aggregators=2)
    mine = [("main",)]                      # this rank's callpaths in pre-order, as recorded
    with tinyprof.Event("main"):
        for k in range(rank % 3 + 1):       # ranks list their own callpaths in their own order
            name, child = f"n{(rank + 2 * k) % 5}", f"c{rank % 2}"
            mine += [("main", name), ("main", name, child)]
            with tinyprof.Event(name, is_common=False):
                with tinyprof.Event(child):
                    pass
        mine.append(("main", "shared"))
        with tinyprof.Event("shared", is_common=False, loop=2 if rank % 2 == 0 else 1):
            pass
        if hints == "wrong" and rank % 2:
            mine.append(("main", "odd"))
            with tinyprof.Event("odd"):        # said common, on odd ranks only
                pass
    recorded = snapshot()
    tinyprof.flush()
    full = hints == "wrong" and world.Get_size() > 1
    want = dict.fromkeys([] if full else [("main",)])
    for theirs in world.allgather(mine):
        want.update(dict.fromkeys(theirs))
    errors = verify(world, mpi_tmp_path, recorded, min(2, world.Get_size()))
    got = tinyprof.read(mpi_tmp_path).callpaths
    if got != list(want):
        errors.append(f"callpaths in the order {got}, not {list(want)}")
    assert not all_errors(world, errors)


def test_a_rank_without_events(world, mpi_tmp_path):
    record(world)
    if world.Get_rank() == 0:
        tinyprof.annotate.impl.reset()
    errs, naggs = _flush(world, mpi_tmp_path, aggregators=3)
    errors = errs + verify(world, mpi_tmp_path, snapshot(), naggs)
    assert not all_errors(world, errors)
    assert session.current().last_flush.sync_path == ("common" if world.Get_size() == 1 else "full")


def test_no_events_anywhere(world, mpi_tmp_path):
    tinyprof.annotate.impl.reset()
    errs, naggs = _flush(world, mpi_tmp_path)
    errors = errs + verify(world, mpi_tmp_path, snapshot(), naggs)
    assert not all_errors(world, errors)
    assert tinyprof.read(mpi_tmp_path).callpaths == []


def test_recording_goes_on_after_a_flush(world, mpi_tmp_path):
    record(world)
    errs, _ = _flush(world, mpi_tmp_path, aggregators=2)
    with tinyprof.Event("main"):                   # a third execution, new callpath
        with tinyprof.Event("after", is_common=world.Get_rank() != 1):
            pass
    errs2, naggs = _flush(world, mpi_tmp_path, aggregators=2)
    errors = errs + errs2 + verify(world, mpi_tmp_path, snapshot(), naggs)
    assert not all_errors(world, errors)


def test_aggregators_from_the_environment_and_default(world, mpi_tmp_path, monkeypatch):
    record(world)
    mine = snapshot()
    monkeypatch.setenv("TINYPROF_AGGREGATORS", "3")
    errs, naggs = _flush(world, mpi_tmp_path / "env")
    errors = errs + verify(world, mpi_tmp_path / "env", mine, min(3, world.Get_size()))
    monkeypatch.delenv("TINYPROF_AGGREGATORS")
    errs, naggs = _flush(world, mpi_tmp_path / "default")
    errors += errs + verify(world, mpi_tmp_path / "default", mine, max(1, world.Get_size() // 16))
    assert not all_errors(world, errors)


def test_flush_over_a_subcommunicator(world, mpi_tmp_path):
    half = world.Split(world.Get_rank() % 2, world.Get_rank())
    record(half)
    outdir = mpi_tmp_path / f"half{world.Get_rank() % 2}"
    errs, naggs = _flush(half, outdir, comm=half, aggregators=2)
    errors = errs + verify(half, outdir, snapshot(), naggs)
    assert not all_errors(world, errors)


def test_flush_over_comm_self_writes_one_profile_per_rank(world, mpi_tmp_path):
    record(world)
    outdir = mpi_tmp_path / f"self{world.Get_rank()}"
    errs, naggs = _flush(MPI.COMM_SELF, outdir, comm=MPI.COMM_SELF)
    errors = errs + verify(MPI.COMM_SELF, outdir, snapshot(), naggs)
    assert not all_errors(world, errors)


@pytest.mark.mpi(min_size=2)
def test_an_aggregator_that_cannot_write_warns_and_nobody_hangs(world, mpi_tmp_path):
    rank, size = world.Get_rank(), world.Get_size()
    good, blocker = mpi_tmp_path / "good", mpi_tmp_path / "blocker"
    record(world)
    errs, _ = _flush(world, good, aggregators=1)       # an older, complete set
    if rank == 0:
        blocker.write_text("a file where rank 1 wants a directory")
    world.Barrier()
    outdir = blocker / "sub" if rank == 1 else good
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        errs += _flush(world, outdir, aggregators=size)[0]
    world.Barrier()
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    if rank == 1:
        failed = str(blocker / "sub" / file_name("wl", 1, size))
        if not (len(messages) == 1 and failed in messages[0]):
            errs.append(f"warnings {messages}")
    elif messages:
        errs.append(f"unexpected warnings {messages}")
    # The new set is incomplete, so the older one was not removed.
    listing = sorted(os.listdir(good))
    expected = sorted(["wl.0-of-1.tp", "wl.run"] +
                      [file_name("wl", i, size) for i in range(size) if i != 1])
    if listing != expected:
        errs.append(f"{good} holds {listing}, expected {expected}")
    assert not all_errors(world, errs)


def test_groups_are_contiguous_and_even(world):
    if world.Get_rank() != 0:
        return
    for nranks in range(1, 70):
        for naggs in range(1, nranks + 1):
            groups = [settings.group_of(r, nranks, naggs) for r in range(nranks)]
            sizes = {}
            for r, (index, first, size) in enumerate(groups):
                assert first <= r < first + size and groups[first][1] == first
                sizes[index] = size
            assert sorted(sizes) == list(range(naggs))
            assert sum(sizes.values()) == nranks and max(sizes.values()) - min(sizes.values()) <= 1
            indices = [index for index, _, _ in groups]
            assert indices == sorted(indices)


@pytest.mark.mpi(min_size=2)
def test_files_of_two_flushes_or_runs_are_never_read_as_one(world, mpi_tmp_path):
    """A kill between two aggregators' renames, or a rank that failed to write
    in a later run, leaves files of different sets side by side: refused."""
    record(world)
    tinyprof.Profiler("wl", selfkeys=SELFKEYS, outdir=mpi_tmp_path, aggregators=2)
    first, second = (str(mpi_tmp_path / file_name("wl", i, 2)) for i in (0, 1))
    errors = []
    for kind in ("flush", "run"):
        tinyprof.flush()
        if world.Get_rank() == 0:
            with open(second, "rb") as f:
                old = f.read()
        if kind == "run":           # a new session: a new run id
            tinyprof.Profiler("wl", selfkeys=SELFKEYS, outdir=mpi_tmp_path, aggregators=2)
        tinyprof.flush()
        if world.Get_rank() == 0:
            if tinyprof.read(mpi_tmp_path).nranks != world.Get_size():
                errors.append("the complete set does not read")
            with open(second, "wb") as f:
                f.write(old)
            try:
                tinyprof.read(mpi_tmp_path)
                errors.append(f"a set mixing files of two {kind}s was read")
            except tinyprof.FormatError as e:
                if e.path != second or first == second:
                    errors.append(f"{kind}: the error names {e.path}, not {second}")
        world.Barrier()
    assert not all_errors(world, errors)
