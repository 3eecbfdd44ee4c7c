"""The converters (tinyprof.converters, ``tinyprof-convert``): every converted
number is checked against the Profile it came from, per rank and per node.

The profiles are real files: four ranks recorded one after the other through
the annotation API with a deterministic clock, written by the flush's own
``build_file`` as two files. They hold non-common events, 2 or 3 executions
per rank, loop modes 0, 1 and 2, a consistent and an inconsistent metric with
missing values, names that need quoting, and a callpath with no values.
"""
from __future__ import annotations

import csv
import math
import os
import re
import subprocess
import sys
from typing import Dict, List, Tuple

import pytest

import tinyprof
from tinyprof import annotate
from tinyprof.cli import convert_main, main
from tinyprof.converters import ConvertError
from tinyprof.format import encoding as _format
from tinyprof.format import output_dir
from tinyprof.runtime import assemble
from tinyprof.runtime import collect as _collect

pd = pytest.importorskip("pandas")
ht = pytest.importorskip("hatchet")

impl = annotate.impl
Event = tinyprof.Event
NRANKS = 4
STATISTICS = ("sum", "mean", "min", "max")
Callpath = Tuple[str, ...]


def _record_rank(rank: int, clock) -> List[_collect.LocalEvent]:
    """One rank's run; returns its event map as the flush copies it."""
    for ex in range(2 + rank % 2):
        with Event("main"):
            clock.tick(7 + rank)
            for it in range(3 + rank):
                mem = {"mem": 100.0 * rank + it} if it % 2 == 0 else {}    # missing on odd
                with Event("compute", loop=1, **mem):
                    clock.tick(1000 * (rank + 1) + 10 * it + ex)
            with Event("halo, exchange", loop=2, tag=7):
                for it in range(4):
                    with Event("comm", loop=2, mem=0.5 * (rank + 1)):
                        clock.tick(300 + 17 * rank + it)
                    clock.tick(3)
            if rank % 2:
                with Event('update <x> "q"', is_common=False, tag=2.5):
                    clock.tick(50 + ex)
            if rank == 2 and ex == 1:
                with Event("données", is_common=False, mem=-1e300):
                    clock.tick(9)
    tail = Event("tail")                 # still open at the snapshot: no values of its own
    tail.__enter__()
    with Event("inner"):
        clock.tick(5)
    events = _collect.collect(impl.root())
    tail.__exit__(None, None, None)
    return events


def make_profile(outdir, clock, selfkeys: str = "tag:0,mem:1", name: str = "conv") -> str:
    """Record NRANKS ranks serially and write them as a two-file profile in ``outdir``."""
    prof = tinyprof.Profiler(name, selfkeys=selfkeys, outdir=outdir)
    ranks, executions = record_ranks(NRANKS, _record_rank, clock)
    half = NRANKS // 2
    return write_profile(outdir, name, prof.metrics, ranks, executions, [(0, half), (half, NRANKS)])


def record_ranks(nranks: int, record_rank, clock):
    """``record_rank(rank, clock)`` on a fresh event map for each rank, serially:
    each rank's events and executions."""
    ranks, executions = [], []
    for rank in range(nranks):
        impl.reset()
        ranks.append(record_rank(rank, clock))
        executions.append(impl.executions())
    impl.reset()
    return ranks, executions


def write_profile(outdir, name: str, metrics, ranks, executions, bounds,
                  sections=lambda index, lo, hi: ()) -> str:
    """Write the ranks' events as one file per ``(lo, hi)`` rank range of ``bounds``;
    ``sections(index, lo, hi)`` gives each file's sections."""
    os.makedirs(outdir, exist_ok=True)
    for index, (lo, hi) in enumerate(bounds):
        header = _format.Header(name=name, nranks=len(ranks), first_rank=lo, rank_count=hi - lo,
                                file_index=index, file_count=len(bounds), metrics=list(metrics))
        data = assemble.build_file(header, ranks[lo:hi], executions[lo:hi],
                                    sections=sections(index, lo, hi))
        output_dir.write_atomic(os.path.join(outdir, output_dir.file_name(name, index, len(bounds))), data)
    return str(outdir)


@pytest.fixture
def profile_dir(tmp_path, clock) -> str:
    return make_profile(tmp_path / "prof", clock)


@pytest.fixture
def profile(profile_dir) -> tinyprof.Profile:
    return tinyprof.read(profile_dir)


# -- the expected values, straight from Profile.series / Profile.value ----------

def _flat(series: List[List[float]]) -> List[float]:
    return [v for execution in series for v in execution]


def _stat(values: List[float], statistic: str, empty: float) -> float:
    if not values:
        return empty
    return {"sum": sum, "min": min, "max": max,
            "mean": lambda v: sum(v) / len(v)}[statistic](values)


def expected(profile: tinyprof.Profile, statistic: str) -> Dict[Tuple[Callpath, int], Dict[str, float]]:
    """Per (callpath, rank): count, time (inc), time and every custom metric."""
    out = {}
    for path in profile.callpaths:
        for rank in range(profile.nranks):
            times = _flat(profile.series(path, rank))
            row = {"count": len(times),
                   "time (inc)": _stat(times, statistic, 0.0 if statistic == "sum" else math.nan)}
            for key, consistent in profile.metrics:
                if consistent:
                    value = profile.value(path, key)
                    row[key] = math.nan if value is None else value
                else:
                    given = [v for v in _flat(profile.series(path, rank, key)) if not math.isnan(v)]
                    row[key] = _stat(given, statistic, math.nan)
            out[path, rank] = row
    for (path, rank), row in out.items():
        children = [out[p, rank]["time (inc)"] for p in profile.callpaths
                    if len(p) == len(path) + 1 and p[:-1] == path]
        row["time"] = row["time (inc)"] - sum(0.0 if math.isnan(c) else c for c in children)
    return out


def assert_same(got: float, want: float, what: str) -> None:
    if math.isnan(want):
        assert math.isnan(got), what
    else:
        assert got == pytest.approx(want, rel=1e-12, abs=1e-18), what


def callpaths(graph) -> Dict[int, Callpath]:
    """{id(node): callpath} of a hatchet graph, walked down from its roots
    (llnl-hatchet's ``from_caliper`` links children only: its nodes have no parents)."""
    found: Dict[int, Callpath] = {}
    todo = [(root, ()) for root in graph.roots]
    while todo:
        node, above = todo.pop()
        path = found[id(node)] = above + (node.frame["name"],)
        todo += [(child, path) for child in node.children]
    return found


def assert_graphframe(gf, profile: tinyprof.Profile, statistic: str) -> None:
    """``gf`` has one node per callpath, a row per (node, rank), and the expected values."""
    want = expected(profile, statistic)
    paths = callpaths(gf.graph)
    assert sorted(paths.values()) == sorted(profile.callpaths)
    frame = gf.dataframe
    assert list(frame.index.names) == ["node", "rank"]
    assert len(frame) == len(want)
    columns = ["count", "time (inc)", "time", *(k for k, _ in profile.metrics)]
    for (node, rank), row in zip(frame.index, frame[columns + ["name"]].itertuples(index=False)):
        path = paths[id(node)]
        assert row[-1] == path[-1]
        for column, got in zip(columns, row):
            assert_same(float(got), want[path, rank][column], f"{path} rank {rank} {column}")


# -- to_hatchet and the hatchet file -------------------------------------------

@pytest.mark.parametrize("statistic", STATISTICS)
def test_to_hatchet_matches_profile(profile, statistic):
    gf = tinyprof.to_hatchet(profile, statistic=statistic)
    assert isinstance(gf, ht.GraphFrame)
    assert gf.exc_metrics == ["time", "count", "mem"] and gf.inc_metrics == ["time (inc)"]
    assert gf.metadata["tinyprof.statistic"] == statistic
    assert_graphframe(gf, profile, statistic)


def test_to_hatchet_reads_a_path_and_works_in_hatchet(profile_dir, profile):
    gf = tinyprof.to_hatchet(profile_dir)
    assert_graphframe(gf, profile, "sum")
    assert "compute" in gf.tree(metric_column="time (inc)")
    gf.drop_index_levels(function="sum")                     # hatchet's own cross-rank reduction
    total = gf.dataframe.set_index("name").loc["main"]
    want = expected(profile, "sum")
    for column in ("time (inc)", "count"):
        assert total[column] == pytest.approx(sum(want[("main",), r][column] for r in range(NRANKS)))


@pytest.mark.parametrize("statistic", ["sum", "max"])
def test_hatchet_file_reads_back_in_hatchet(profile_dir, profile, tmp_path, statistic):
    out = tmp_path / "conv.json"
    assert convert_main([profile_dir, "--to", "hatchet", "-o", str(out),
                         "--statistic", statistic]) == 0
    gf = ht.GraphFrame.from_caliper(str(out), node_ordering=False)  # hatchet's own reader
    assert gf.metadata["tinyprof.name"] == "conv" and gf.metadata["mpi.world.size"] == NRANKS
    assert_graphframe(gf, profile, statistic)


def test_statistic_is_checked(profile):
    with pytest.raises(ValueError, match="median"):
        tinyprof.to_hatchet(profile, statistic="median")


# -- to_dataframe and the standard CSV: every single value -------------------

def test_to_dataframe_holds_every_value(profile):
    frame = tinyprof.to_dataframe(profile)
    assert list(frame.columns) == ["callpath_id", "callpath", "rank", "execution", "iteration",
                                   "time", "mem", "tag"]
    groups = {key: g for key, g in frame.groupby(["callpath_id", "rank"], observed=True)}
    for i, path in enumerate(profile.callpaths):
        for rank in range(NRANKS):
            series = profile.series(path, rank)
            group = groups.get((i, rank))
            if group is None:
                assert not _flat(series), (path, rank)
                continue
            assert set(group["callpath"]) == {"<".join(path)}
            executions = [[] for _ in series]
            for row in group.itertuples():
                assert row.iteration == len(executions[row.execution])
                executions[row.execution].append(row.time)
            assert executions == series, (path, rank)
            mem = _flat(profile.series(path, rank, "mem"))
            assert [m if m == m else None for m in group["mem"]] == [m if m == m else None for m in mem]
            tag = profile.value(path, "tag")
            assert all((t == tag) if tag is not None else math.isnan(t) for t in group["tag"])
    assert len(frame) == sum(len(_flat(profile.series(p, r)))
                             for p in profile.callpaths for r in range(NRANKS))


def test_csv_holds_every_value(profile_dir, profile, tmp_path):
    out = tmp_path / "conv.csv"
    assert convert_main([profile_dir, "--to", "csv", "-o", str(out)]) == 0
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["rank", "execution", "iteration", "callpath", "time", "tag", "mem"]
    by_path = {"<".join(p): p for p in profile.callpaths}
    got: Dict[Tuple[Callpath, int], List[List[float]]] = {}
    for row in rows:
        path, rank, execution = by_path[row["callpath"]], int(row["rank"]), int(row["execution"])
        series = got.setdefault((path, rank), [[] for _ in range(profile.executions(rank))])
        assert int(row["iteration"]) == len(series[execution])
        series[execution].append(float(row["time"]))
        index = len(series[execution]) - 1
        mem = profile.series(path, rank, "mem")[execution][index]
        assert_same(float(row["mem"]) if row["mem"] else math.nan, mem, f"{path} mem")
        tag = profile.value(path, "tag")
        assert row["tag"] == ("" if tag is None else repr(tag))
    for path in profile.callpaths:
        for rank in range(NRANKS):
            series = profile.series(path, rank)
            assert got.get((path, rank), [[] for _ in series]) == series, (path, rank)


def test_converting_an_empty_profile(tmp_path):
    outdir = tinyprof.flush()                              # nothing recorded: no callpath
    profile = tinyprof.read(outdir)
    assert len(tinyprof.to_dataframe(profile)) == 0
    assert len(tinyprof.to_hatchet(profile).dataframe) == 0
    assert convert_main([outdir, "--to", "csv", "-o", str(tmp_path / "e.csv")]) == 0


# -- the command line -----------------------------------------------------------

def _script(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


def test_console_script_help_and_success(profile_dir, tmp_path):
    helped = subprocess.run([_script("tinyprof-convert"), "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "--to FORMAT" in helped.stdout
    out = tmp_path / "flow"
    done = subprocess.run([_script("tinyprof-convert"), profile_dir, "--to", "callflow", "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out / "conv.json") and os.path.isfile(out / "conv.json")
    helped = subprocess.run([_script("tinyprof"), "callflow", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "--process-only" in helped.stdout


def _bad_inputs(tmp_path, profile_dir) -> Dict[str, str]:
    good = open(os.path.join(profile_dir, "conv.0-of-2.tp"), "rb").read()
    files = {"truncated.tp": good[:len(good) // 2],
             "corrupted.tp": good.replace(b"|1|", b"|9|", 1),
             "other.txt": b"name,time\nmain,1\n",
             "binary.tp": bytes(range(256))}
    paths = {name: str(tmp_path / name) for name in files}
    for name, data in files.items():
        with open(paths[name], "wb") as f:
            f.write(data)
    paths["missing"] = str(tmp_path / "no-such.tp")
    paths["empty-dir"] = str(tmp_path / "empty")
    os.mkdir(paths["empty-dir"])
    return paths


def test_bad_input_is_one_line_exit_2(profile_dir, tmp_path, capsys):
    for name, path in _bad_inputs(tmp_path, profile_dir).items():
        for target in ("hatchet", "callflow", "csv"):
            code = convert_main([path, "--to", target, "-o", str(tmp_path / f"out-{target}")])
            err = capsys.readouterr().err
            assert code == 2, (name, target)
            assert err.count("\n") == 1 and err.startswith("tinyprof-convert: ") and path in err, err
        assert not any(os.path.exists(tmp_path / f"out-{t}") for t in ("hatchet", "callflow", "csv"))


def test_bad_input_in_a_real_process_has_no_traceback(profile_dir, tmp_path):
    path = _bad_inputs(tmp_path, profile_dir)["truncated.tp"]
    for argv in ([_script("tinyprof-convert"), path, "--to", "hatchet", "-o", str(tmp_path / "x.json")],
                 [_script("tinyprof"), "callflow", path, "-o", str(tmp_path / "flow"), "--process-only"]):
        done = subprocess.run(argv, capture_output=True, text=True)
        assert done.returncode == 2
        assert done.stderr.count("\n") == 1 and path in done.stderr and "Traceback" not in done.stderr


def test_unwritable_output_is_one_line_exit_2(profile_dir, tmp_path, capsys):
    for target in ("hatchet", "csv", "callflow"):
        out = str(tmp_path / "no-dir" / "sub" / "x") if target != "callflow" else "/proc/no-such"
        assert convert_main([profile_dir, "--to", target, "-o", out]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and out in err, err


def test_metric_named_like_a_column_is_refused(tmp_path, clock, capsys):
    outdir = make_profile(tmp_path / "p", clock, selfkeys="tag:0,mem:1,count:1")
    with pytest.raises(ConvertError, match="'count'"):
        tinyprof.to_hatchet(outdir)
    assert convert_main([outdir, "--to", "hatchet", "-o", str(tmp_path / "x.json")]) == 2
    assert "'count'" in capsys.readouterr().err
    assert len(tinyprof.to_dataframe(outdir)) > 0            # no clash there


def test_core_does_not_import_pandas_or_hatchet(profile_dir):
    code = ("import sys, tinyprof, tinyprof.cli\n"
            f"p = tinyprof.read({profile_dir!r})\n"
            "assert tinyprof.Profile is type(p)\n"
            "bad = [m for m in ('pandas', 'hatchet', 'callflow') if m in sys.modules]\n"
            "assert not bad, bad\n"
            "assert callable(tinyprof.to_hatchet) and 'pandas' not in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_tinyprof_main_still_reports_bad_input(tmp_path, capsys):
    assert main(["callflow", str(tmp_path / "nothing.tp"), "--process-only"]) == 2
    assert "nothing.tp" in capsys.readouterr().err


def test_converters_live_inside_the_package():
    import tinyprof.converters

    here = os.path.dirname(tinyprof.__file__)
    assert os.path.dirname(tinyprof.converters.__file__) == os.path.join(here, "converters")


# -- names no spreadsheet or UTF-8 encoder takes as they are --------------------

def _convert_in_a_process(profile_dir: str, target: str, out) -> None:
    """The real ``tinyprof-convert``: success, the path on stdout, nothing on stderr."""
    done = subprocess.run([_script("tinyprof-convert"), profile_dir, "--to", target, "-o", str(out)],
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.strip().startswith(str(out))


def _csv_rows(path) -> List[List[str]]:
    with open(path, newline="", encoding="utf-8") as f:      # strict UTF-8
        return list(csv.reader(f))


def test_lone_surrogates_convert_without_loss(tmp_path, clock):
    """The Python writer writes lone surrogates (surrogatepass); the CSV spells them
    ``\\udcff``, JSON as its own escape of the same code point, pandas keeps them."""
    outdir = tmp_path / "sur"
    tinyprof.Profiler("sur", selfkeys="mem:1,\ud800:0", outdir=outdir)
    with Event("main"):
        with Event("bad\udcff", mem=1.5, **{"\ud800": 2.0}):
            clock.tick(1000)
    profile = tinyprof.read(tinyprof.flush())
    assert ("main", "bad\udcff") in profile.callpaths

    _convert_in_a_process(str(outdir), "csv", tmp_path / "s.csv")
    assert sorted(os.listdir(tmp_path)) == ["s.csv", "sur"]                # no temporary left
    assert _csv_rows(tmp_path / "s.csv") == [
        ["rank", "execution", "iteration", "callpath", "time", "mem", "\\ud800"],
        ["0", "0", "0", "main", "1e-06", "", ""],
        ["0", "0", "0", "main<bad\\udcff", "1e-06", "1.5", "2.0"]]

    _convert_in_a_process(str(outdir), "hatchet", tmp_path / "s.json")
    gf = ht.GraphFrame.from_caliper(str(tmp_path / "s.json"), node_ordering=False)
    assert sorted(gf.dataframe["name"]) == ["bad\udcff", "main"]
    assert list(gf.dataframe.set_index("name").loc["bad\udcff", ["time (inc)", "\ud800"]]) == [1e-6, 2.0]
    frame = tinyprof.to_dataframe(profile)
    assert list(frame["callpath"]) == ["main", "main<bad\udcff"]


def test_output_path_of_non_utf8_bytes_prints_without_traceback(profile_dir, tmp_path):
    out = os.path.join(os.fsdecode(tmp_path), os.fsdecode(b"\xffconv.csv"))    # lone surrogate
    done = subprocess.run([_script("tinyprof-convert"), profile_dir, "--to", "csv", "-o", out],
                          capture_output=True, text=True, env=dict(os.environ, PYTHONIOENCODING="utf-8"))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout == out.replace("\udcff", "\\udcff") + "\n"
    assert b"\xffconv.csv" in os.listdir(os.fsencode(tmp_path))        # the bytes given


FORMULAS = ["=SUM(A1:A2)", "+1", "-2", "@cmd", "\tx", "\rx"]


@pytest.mark.parametrize("names", [FORMULAS[:-1], FORMULAS], ids=["plain", "with-CR"])
def test_csv_quotes_text_cells_a_spreadsheet_would_run(tmp_path, clock, names):
    """A formula-like text cell starts with ``'``; numbers, negative ones too, do not.
    A CR quotes the text cells (the csv module would not), so that rows stay rows."""
    outdir = tmp_path / "inj"
    tinyprof.Profiler("inj", selfkeys="mem:1,=m:0", outdir=outdir)
    for name in names:
        with Event(name, mem=-1.5, **{"=m": -3}):
            clock.tick(2)
            with Event("=child"):
                clock.tick(1)
    tinyprof.flush()
    _convert_in_a_process(str(outdir), "csv", tmp_path / "inj.csv")
    head, *rows = _csv_rows(tmp_path / "inj.csv")
    assert head == ["rank", "execution", "iteration", "callpath", "time", "mem", "'=m"]
    want = []
    for name in names:
        want += [["0", "0", "0", f"'{name}", "3e-09", "-1.5", "-3.0"],
                 ["0", "0", "0", f"'{name}<=child", "1e-09", "", ""]]
    assert sorted(rows) == sorted(want)


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


SPLIT_NAMES = ["x;=1+1", "a,=2", "p|@cmd", "t\t+3", "q;\"=HYPERLINK(1)", "n\n-4", "'=quoted",
               "x;'y", "plain;name", "=1;=2"]


def test_csv_no_cell_starts_a_formula_whatever_a_spreadsheet_splits_on(tmp_path, clock):
    """A spreadsheet may split on ``;``, ``|`` or tab, or ignore quotes that do not
    start a cell: wherever a cell can start, none starts a formula. pandas reads
    the file, and ``original`` gives every name back."""
    from tinyprof.converters.csv import FORMULA_START, original

    outdir = tmp_path / "split"
    tinyprof.Profiler("split", selfkeys="x;=m:0", outdir=outdir)
    for name in SPLIT_NAMES:
        with Event(name, **{"x;=m": -1.0}):
            clock.tick(2)
    tinyprof.flush()
    _convert_in_a_process(str(outdir), "csv", tmp_path / "s.csv")
    text = (tmp_path / "s.csv").read_text(encoding="utf-8")
    for cell in re.split("[,;|\t\n\r]", text):      # where any split may start a cell
        cell = cell.lstrip('"')
        assert not cell.startswith(FORMULA_START) or _number(cell), cell
    frame = pd.read_csv(tmp_path / "s.csv", keep_default_na=False)
    assert [original(c) for c in frame.columns] == ["rank", "execution", "iteration", "callpath",
                                                    "time", "x;=m"]
    assert sorted(map(original, frame.iloc[:, 3])) == sorted(SPLIT_NAMES)
    assert list(frame.iloc[:, 5]) == [-1.0] * len(SPLIT_NAMES)
    assert _csv_rows(tmp_path / "s.csv")[1:] == [
        ["0", "0", "0", cell, "2e-09", "-1.0"] for cell in frame.iloc[:, 3]]
