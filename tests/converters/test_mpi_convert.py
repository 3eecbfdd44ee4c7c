"""MPI data in the converters and the ``tinyprof mpi`` command.

The profile is real files: three ranks recorded through the annotation API
with a deterministic clock, written by the flush's own ``build_file`` as two
files (ranks 0-1, rank 2; rank 2 never enters ``halo``, so the files number
their lines differently), each with an ``mpi`` section encoded by the codec
from the rows of :data:`CALLS`. Every expected number below is written out.
"""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from typing import List, Optional, Tuple

import pytest
from test_convert import callpaths, record_ranks, write_profile

import tinyprof
from tinyprof import annotate
from tinyprof.cli import convert_main, main
from tinyprof.converters import ConvertError
from tinyprof.format.mpi_section import NONE, Communicator, bucket, encode
from tinyprof.runtime import collect as _collect
from tinyprof.views import mpi_text

pd = pytest.importorskip("pandas")
ht = pytest.importorskip("hatchet")

impl = annotate.impl
Event = tinyprof.Event
NRANKS = 3
Callpath = Tuple[str, ...]
MAIN, HALO, SOLVE, REDUCE = ("main",), ("main", "halo"), ("main", "solve"), ("main", "solve", "reduce")
WORLD, SPLIT, SELF = "COMM_WORLD", "COMM_WORLD.split1@0", "COMM_SELF"

# (callpath, rank, comm, op, bytes per call, calls, time in ns)
CALLS = [
    ((), 0, WORLD, "Barrier", 0, 1, 500),
    ((), 1, WORLD, "Barrier", 0, 1, 700),
    ((), 2, WORLD, "Barrier", 0, 1, 900),
    (MAIN, 0, WORLD, "Comm_split", 0, 1, 2000),
    (MAIN, 1, WORLD, "Comm_split", 0, 1, 2100),
    (MAIN, 2, WORLD, "Comm_split", 0, 1, 2200),
    (HALO, 0, WORLD, "Sendrecv", 1024, 4, 40000),
    (HALO, 1, WORLD, "Sendrecv", 1500, 4, 50000),
    (HALO, 0, WORLD, "Isend", 100, 2, 600),
    (HALO, 0, "", "Waitall", 0, 2, 9000),
    (HALO, 1, "", "Waitall", 0, 3, 8000),
    (SOLVE, 0, SPLIT, "Bcast", 2048, 1, 3000),
    (SOLVE, 1, SPLIT, "Bcast", 2048, 1, 3500),
    (SOLVE, 2, SELF, "Bcast", 4, 1, 100),
    (REDUCE, 0, WORLD, "Allreduce", 8, 10, 30000),
    (REDUCE, 1, WORLD, "Allreduce", 8, 10, 31000),
    (REDUCE, 2, WORLD, "Allreduce", 8, 10, 32000),
    (REDUCE, 2, WORLD, "Allreduce", 16, 5, 16000),
]
# (comm, size, members, creating callpath or None)
COMMS = [(WORLD, 3, (0, 1, 2), None), (SELF, 1, (), None), (SPLIT, 2, (0, 1), MAIN),
         ("COMM_WORLD.split1@2", 1, (2,), MAIN)]


def _record_rank(rank: int, clock) -> List[_collect.LocalEvent]:
    with Event("main"):
        clock.tick(100)
        if rank < 2:
            with Event("halo"):
                clock.tick(10)
        with Event("solve"):
            with Event("reduce"):
                clock.tick(20)
    return _collect.collect(impl.root())


def _section(lines: List[Callpath], ranks: range) -> bytes:
    """The mpi section of the file holding ``ranks`` whose event lines are ``lines``."""
    def line(path: Callpath) -> int:
        return lines.index(path) if path else NONE
    comms = [Communicator(name, size, members, NONE if made is None else line(made))
             for name, size, members, made in COMMS if rank_knows(name, ranks)]
    index = {c.name: i for i, c in enumerate(comms)}
    index[""] = NONE
    ops = [(rank, line(path), index[comm], op, bucket(size), calls, calls * size, t)
           for path, rank, comm, op, size, calls, t in CALLS if rank in ranks]
    peers = [(0, line(HALO), index[WORLD], 1, 4, 4096), (0, line(HALO), index[WORLD], 2, 2, 200),
             (1, line(HALO), index[WORLD], 0, 4, 6000)] if 0 in ranks else []
    return encode(comms, ops, peers)


def rank_knows(comm: str, ranks: range) -> bool:
    members = next(m for name, _, m, _ in COMMS if name == comm)
    return not members or any(r in members for r in ranks)


def make_profile(outdir, clock, name: str = "mpiconv", mpi: bool = True,
                 section: Optional[bytes] = None) -> str:
    """Record the ranks serially; write them as two files, with mpi sections if ``mpi``
    (``section``: the payload of the first file's instead)."""
    prof = tinyprof.Profiler(name, outdir=outdir)
    ranks, executions = record_ranks(NRANKS, _record_rank, clock)

    def sections(index: int, lo: int, hi: int):
        lines = [e.path for e in ranks[lo]]        # the lowest rank of each file has all its lines
        payload = section if section is not None and index == 0 else _section(lines, range(lo, hi))
        return [("mpi", payload)] if mpi else []
    return write_profile(outdir, name, prof.metrics, ranks, executions, [(0, 2), (2, 3)], sections)


@pytest.fixture
def profile_dir(tmp_path, clock) -> str:
    return make_profile(tmp_path / "prof", clock)


@pytest.fixture
def profile(profile_dir) -> tinyprof.Profile:
    p = tinyprof.read(profile_dir)
    assert p.callpaths == [MAIN, HALO, SOLVE, REDUCE] and p.mpi_recorded
    return p


# -- to_hatchet -----------------------------------------------------------------

# Per callpath: (calls, bytes, time ns) on ranks 0, 1, 2; exclusive, then inclusive.
EXCLUSIVE = {MAIN: [(1, 0, 2000), (1, 0, 2100), (1, 0, 2200)],
             HALO: [(8, 4296, 49600), (7, 6000, 58000), (0, 0, 0)],
             SOLVE: [(1, 2048, 3000), (1, 2048, 3500), (1, 4, 100)],
             REDUCE: [(10, 80, 30000), (10, 80, 31000), (15, 160, 48000)]}
INCLUSIVE = {MAIN: [(20, 6424, 84600), (19, 8128, 94600), (17, 164, 50300)],
             HALO: EXCLUSIVE[HALO],
             SOLVE: [(11, 2128, 33000), (11, 2128, 34500), (16, 164, 48100)],
             REDUCE: EXCLUSIVE[REDUCE]}


def test_expected_values_are_the_calls_summed():
    """The literal tables above agree with CALLS (a check of the test itself)."""
    for path, per_rank in EXCLUSIVE.items():
        for rank, want in enumerate(per_rank):
            rows = [c for c in CALLS if c[0] == path and c[1] == rank]
            assert want == (sum(c[5] for c in rows), sum(c[4] * c[5] for c in rows),
                            sum(c[6] for c in rows))
            below = [c for c in CALLS if c[0][:len(path)] == path and c[1] == rank]
            assert INCLUSIVE[path][rank] == (sum(c[5] for c in below),
                                             sum(c[4] * c[5] for c in below), sum(c[6] for c in below))


def test_to_hatchet_has_mpi_columns(profile):
    gf = tinyprof.to_hatchet(profile)
    assert gf.exc_metrics == ["time", "count", "mpi.time", "mpi.bytes", "mpi.calls"]
    assert gf.inc_metrics == ["time (inc)", "mpi.time (inc)", "mpi.bytes (inc)", "mpi.calls (inc)"]
    frame = gf.dataframe
    assert len(frame) == 4 * NRANKS
    paths = callpaths(gf.graph)
    for (node, rank), row in frame.iterrows():
        path = paths[id(node)]
        for suffix, want in (("", EXCLUSIVE), (" (inc)", INCLUSIVE)):
            calls, nbytes, ns = want[path][rank]
            got = (row[f"mpi.calls{suffix}"], row[f"mpi.bytes{suffix}"], row[f"mpi.time{suffix}"])
            assert got == (calls, nbytes, ns / 1e9), (path, rank, suffix)
    assert frame["mpi.calls"].dtype == "int64" and frame["mpi.bytes (inc)"].dtype == "int64"
    # The Barrier outside any event (3 calls) has no node: only the others are summed.
    assert frame["mpi.calls"].sum() == sum(c[5] for c in CALLS) - 3


def test_hatchet_file_has_mpi_columns(profile_dir, tmp_path):
    out = tmp_path / "mpi.json"
    assert convert_main([profile_dir, "--to", "hatchet", "-o", str(out)]) == 0
    gf = ht.GraphFrame.from_caliper(str(out), node_ordering=False)  # hatchet's own reader
    assert [m for m in gf.exc_metrics if m.startswith("mpi.")] == ["mpi.time", "mpi.bytes", "mpi.calls"]
    assert sorted(gf.inc_metrics) == ["mpi.bytes (inc)", "mpi.calls (inc)", "mpi.time (inc)", "time (inc)"]
    paths = callpaths(gf.graph)
    for (node, rank), row in gf.dataframe.iterrows():
        path = paths[id(node)]
        for suffix, want in (("", EXCLUSIVE), (" (inc)", INCLUSIVE)):
            calls, nbytes, ns = want[path][rank]
            got = (row[f"mpi.calls{suffix}"], row[f"mpi.bytes{suffix}"], row[f"mpi.time{suffix}"])
            assert got == (calls, nbytes, ns / 1e9), (path, rank, suffix)


def test_callflow_processes_a_profile_with_mpi_columns(profile_dir, tmp_path):
    """The --to hatchet file is also CallFlow's input: the MPI columns must not break it."""
    from test_callflow import callflow_frame, callflow_python
    callflow_python()
    data = tmp_path / "flow"
    done = subprocess.run([_script("tinyprof"), "callflow", profile_dir, "-o", str(data),
                           "--process-only"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = callflow_frame(data / ".callflow" / "mpiconv" / "df.pkl")
    recorded = tinyprof.read(profile_dir).callpaths
    assert len(rows) == 4 * NRANKS
    for row in rows:
        path, rank = recorded[row["nid"]], row["rank"]
        assert (row["mpi.calls (inc)"], row["mpi.bytes"]) == (INCLUSIVE[path][rank][0],
                                                                        EXCLUSIVE[path][rank][1])


def _script(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


def test_mpi_columns_work_in_hatchet(profile):
    gf = tinyprof.to_hatchet(profile, statistic="max")      # MPI columns are sums regardless
    tree = gf.tree(metric_column="mpi.time (inc)")
    assert "halo" in tree and "reduce" in tree
    gf.drop_index_levels(function="sum")                     # hatchet's cross-rank reduction
    totals = gf.dataframe.set_index("name")
    assert totals.loc["main", "mpi.calls (inc)"] == 20 + 19 + 17
    assert totals.loc["halo", "mpi.bytes"] == 4296 + 6000
    assert totals.loc["reduce", "mpi.time"] == pytest.approx((30000 + 31000 + 48000) / 1e9, rel=1e-15)


def test_to_hatchet_without_mpi_has_no_mpi_columns(tmp_path, clock):
    gf = tinyprof.to_hatchet(make_profile(tmp_path / "plain", clock, mpi=False))
    assert not any(c.startswith("mpi.") for c in gf.dataframe.columns)
    assert gf.inc_metrics == ["time (inc)"]


# -- to_dataframe and csv ---------------------------------------------------------

def _label(path: Callpath) -> str:
    return "<".join(path)


def test_to_dataframe_mpi_table(profile):
    frame = tinyprof.to_dataframe(profile, table="mpi")
    assert list(frame.columns) == ["callpath_id", "callpath", "rank", "comm", "op", "bucket",
                                   "size_min", "size_max", "calls", "bytes", "time"]
    got = sorted((row.callpath, row.callpath_id, row.rank, row.comm, row.op, row.bucket,
                  row.size_min, row.size_max, row.calls, row.bytes, row.time)
                 for row in frame.itertuples(index=False))
    ids = {(): -1, MAIN: 0, HALO: 1, SOLVE: 2, REDUCE: 3}
    want = sorted((_label(path), ids[path], rank, comm, op, bucket(size),
                   *((1 << bucket(size) - 1, (1 << bucket(size)) - 1) if size else (0, 0)),
                   calls, calls * size, t / 1e9)
                  for path, rank, comm, op, size, calls, t in CALLS)
    assert got == want
    assert ("", -1, 2, WORLD, "Barrier", 0, 0, 0, 1, 0, 900e-9) in got
    assert (_label(HALO), 1, 1, WORLD, "Sendrecv", 11, 1024, 2047, 4, 6000, 50000e-9) in got
    with pytest.raises(ValueError, match="'bogus'"):
        tinyprof.to_dataframe(profile, table="bogus")


def test_to_dataframe_values_table_is_unchanged(profile):
    frame = tinyprof.to_dataframe(profile)
    assert list(frame["callpath"].cat.categories) == ["main", "main<halo", "main<solve",
                                                      "main<solve<reduce"]
    assert len(frame) == 4 + 4 + 3


def test_csv_mpi_table(profile_dir, tmp_path, capsys):
    out = tmp_path / "mpi.csv"
    assert convert_main([profile_dir, "--to", "csv", "--table", "mpi", "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"{out}\n"
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["rank", "callpath", "comm", "op", "bucket", "size_min", "size_max",
                       "calls", "bytes", "time"]
    assert rows[1] == ["0", "", "COMM_WORLD", "Barrier", "0", "0", "0", "1", "0", "5e-07"]
    assert ["1", "main<halo", "COMM_WORLD", "Sendrecv", "11", "1024", "2047", "4", "6000",
            "5e-05"] in rows
    assert ["1", "main<halo", "", "Waitall", "0", "0", "0", "3", "0", "8e-06"] in rows
    assert ["2", "main<solve<reduce", "COMM_WORLD", "Allreduce", "5", "16", "31", "5", "80",
            "1.6e-05"] in rows
    assert len(rows) == 1 + len(CALLS)
    assert sorted(float(r[-1]) for r in rows[1:]) == sorted(c[6] / 1e9 for c in CALLS)


def test_csv_mpi_table_refusals(tmp_path, clock, profile_dir, capsys):
    plain = make_profile(tmp_path / "plain", clock, mpi=False)
    out = tmp_path / "x.csv"
    assert convert_main([plain, "--to", "csv", "--table", "mpi", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds no MPI data" in err and not out.exists()
    with pytest.raises(SystemExit) as stop:                  # argparse: usage, then the error
        convert_main([profile_dir, "--to", "hatchet", "--table", "mpi", "-o", str(out)])
    assert stop.value.code == 2 and "--table mpi needs --to csv" in capsys.readouterr().err
    with pytest.raises(ConvertError):
        tinyprof.converters.csv.write(tinyprof.read(plain), out, table="mpi")


# -- tinyprof mpi -------------------------------------------------------------------

HEAD = "mpiconv: 3 ranks, 59 MPI calls, 14716 bytes, 231.600 us in MPI (summed over ranks)"


def _run(capsys, *argv: str) -> Tuple[int, List[str], str]:
    code = main(["mpi", *argv])
    out = capsys.readouterr()
    return code, out.out.splitlines(), out.err


def test_cli_default_table(profile_dir, capsys):
    """Per callpath, comm, op and size, largest time first; the time in the unit of the
    whole (231600 ns), percentages of it: 93000 / 231600 = 40.16 %."""
    code, lines, err = _run(capsys, profile_dir)
    assert code == 0 and err == ""
    assert lines == [
        HEAD,
        "callpath           comm                 op          size       calls  bytes  time (us)  avg bytes/call  % MPI time",
        "main<solve<reduce  COMM_WORLD           Allreduce   [8, 16)       30    240     93.000             8.0       40.16",
        "main<halo          COMM_WORLD           Sendrecv    [1K, 2K)       8  10096     90.000          1262.0       38.86",
        "main<halo          -                    Waitall     0              5      0     17.000             0.0        7.34",
        "main<solve<reduce  COMM_WORLD           Allreduce   [16, 32)       5     80     16.000            16.0        6.91",
        "main<solve         COMM_WORLD.split1@0  Bcast       [2K, 4K)       2   4096      6.500          2048.0        2.81",
        "main               COMM_WORLD           Comm_split  0              3      0      6.300             0.0        2.72",
        "-                  COMM_WORLD           Barrier     0              3      0      2.100             0.0        0.91",
        "main<halo          COMM_WORLD           Isend       [64, 128)      2    200      0.600           100.0        0.26",
        "main<solve         COMM_SELF            Bcast       [4, 8)         1      4      0.100             4.0        0.04",
    ]


def test_cli_by_rank_sorted_by_calls(profile_dir, capsys):
    code, lines, _ = _run(capsys, profile_dir, "--by", "rank", "--sort", "calls")
    assert code == 0
    assert lines == [HEAD,
                     "rank  calls  bytes  time (us)  avg bytes/call  % MPI time",
                     "   0     21   6424     85.100           305.9       36.74",
                     "   1     20   8128     95.300           406.4       41.15",
                     "   2     18    164     51.200             9.1       22.11"]
    code, lines, _ = _run(capsys, profile_dir, "--by", "rank", "--sort", "bytes", "--limit", "2")
    assert lines[2:] == ["   1     20   8128     95.300           406.4       41.15",
                         "   0     21   6424     85.100           305.9       36.74",
                         "(1 more row not shown: --limit)"]


def test_cli_callpath_and_comm_filters(profile_dir, capsys):
    # main/solve: the region and below; both spellings; the filters combine
    for spelled in ("main/solve", "main<solve"):
        code, lines, _ = _run(capsys, profile_dir, "--callpath", spelled, "--comm", WORLD,
                              "--by", "op,rank")
        assert code == 0
        assert lines == [HEAD,
                         "op         rank  calls  bytes  time (us)  avg bytes/call  % MPI time",
                         "Allreduce     2     15    160     48.000            10.7       20.73",
                         "Allreduce     1     10     80     31.000             8.0       13.39",
                         "Allreduce     0     10     80     30.000             8.0       12.95"]
    code, lines, _ = _run(capsys, profile_dir, "--callpath", "main<halo",
                          "--callpath", "main<solve<reduce", "--by", "callpath")
    assert code == 0
    assert lines == [HEAD,
                     "callpath           calls  bytes  time (us)  avg bytes/call  % MPI time",
                     "main<solve<reduce     35    320    109.000             9.1       47.06",
                     "main<halo             15  10296    107.600           686.4       46.46"]


def test_cli_comms(profile_dir, capsys):
    code, lines, _ = _run(capsys, profile_dir, "--by", "comm", "--comms")
    assert code == 0
    assert lines == [HEAD,
                     "comm                 calls  bytes  time (us)  avg bytes/call  % MPI time",
                     "COMM_WORLD              51  10616    208.000           208.2       89.81",
                     "-                        5      0     17.000             0.0        7.34",
                     "COMM_WORLD.split1@0      2   4096      6.500          2048.0        2.81",
                     "COMM_SELF                1      4      0.100             4.0        0.04",
                     "",
                          "comm                 size  ranks  created",
                          "COMM_SELF               1  self   -",
                          "COMM_WORLD              3  0-2    -",
                          "COMM_WORLD.split1@0     2  0-1    main",
                          "COMM_WORLD.split1@2     1  2      main"]


def test_cli_no_mpi_data_and_no_match(tmp_path, clock, profile_dir, capsys):
    plain = make_profile(tmp_path / "plain", clock, mpi=False)
    code, lines, err = _run(capsys, plain)
    assert (code, lines) == (1, [])
    assert err == ("tinyprof: profile 'mpiconv' holds no MPI data "
                   "(record with Profiler(mpi=True) or TINYPROF_MPI=1)\n")
    code, lines, err = _run(capsys, profile_dir, "--callpath", "main<halo", "--comm", SPLIT)
    assert code == 1 and len(lines) == 2 and err == "tinyprof: no MPI call matches\n"


@pytest.mark.parametrize("argv, message", [
    (["--callpath", "main<nope"], "tinyprof: no callpath 'main<nope' in profile 'mpiconv'\n"),
    (["--comm", "COMM_NOPE"], "tinyprof: no communicator 'COMM_NOPE' in profile 'mpiconv' (it has "
                              "COMM_SELF, COMM_WORLD, COMM_WORLD.split1@0, COMM_WORLD.split1@2)\n"),
])
def test_cli_unknown_names_are_one_line_exit_2(profile_dir, capsys, argv, message):
    code, lines, err = _run(capsys, profile_dir, *argv)
    assert (code, lines, err) == (2, [], message)


def test_cli_bad_arguments_exit_2(profile_dir, capsys):
    for argv in (["--by", "callpath,size"], ["--sort", "speed"], ["--limit", "-1"]):
        with pytest.raises(SystemExit) as stop:
            main(["mpi", profile_dir, *argv])
        assert stop.value.code == 2
        assert "error:" in capsys.readouterr().err


def test_cli_bad_profile_in_a_real_process(tmp_path, clock):
    section = b"comms 0\nops 1\n0||5|Send|0|1|0|0\npeers 0\n"     # no communicator 5
    bad = os.path.join(make_profile(tmp_path / "bad", clock, section=section), "mpiconv.0-of-2.tp")
    done = subprocess.run([_script("tinyprof"), "mpi", str(bad)], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and bad in done.stderr and "mpi section" in done.stderr


def test_size_ranges():
    assert [mpi_text.size_range(k) for k in (0, 1, 2, 10, 11, 12, 21, 64)] == [
        "0", "[1, 2)", "[2, 4)", "[512, 1K)", "[1K, 2K)", "[2K, 4K)", "[1M, 2M)", "[8E, 16E)"]
