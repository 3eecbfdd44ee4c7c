"""The pprof export (``tinyprof-convert --to pprof``), opened in Go's own
``go tool pprof`` (Debian's golang-go; .ci/run installs it): the numbers it
prints against ``tinyprof show`` and the profile, per callpath and per rank.

Profiles: the demo on 3 real MPI ranks with MPI capture (``traced_demo``),
the converters' deterministic 4-rank profile in two files with a callpath
still open at the snapshot (tests/converters/test_convert.py), and a
demo-shaped profile recorded with an injected clock, so that which event
comes first is exact.
"""
from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

import numpy as np
import pytest
from test_convert import make_profile, record_ranks, write_profile
from test_hostile import deep_file, peak_of

import tinyprof
from tinyprof import annotate
from tinyprof.analysis.values import aggregate, run_times
from tinyprof.cli import convert_main, main
from tinyprof.converters import ConvertError, convert
from tinyprof.runtime import collect as _collect

pytest.importorskip("google.protobuf")
from tinyprof.converters.pprof import message_class

Event = tinyprof.Event


def go() -> str:
    path = shutil.which("go")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("no go on PATH: .ci/run installs Debian's golang-go")
        pytest.skip("no go on PATH (apt-get install golang-go)")
    return path


# Go's build cache and module path, writable, shared by the runs (a Go that builds
# its pprof tool on first use builds it once); no toolchain download, no user GOFLAGS.
GO_ENV = {"GOCACHE": os.path.join(tempfile.gettempdir(), f"tinyprof-go-{os.getuid()}", "cache"),
          "GOPATH": os.path.join(tempfile.gettempdir(), f"tinyprof-go-{os.getuid()}", "path"),
          "GOFLAGS": "", "GOTOOLCHAIN": "local"}


def pprof(path: str, *options: str) -> str:
    """The output of ``go tool pprof OPTIONS PATH`` (pprof's own files beside PATH)."""
    where = os.path.dirname(os.path.abspath(path))
    env = dict(os.environ, **GO_ENV, PPROF_TMPDIR=where, HOME=where)
    done = subprocess.run([go(), "tool", "pprof", "-symbolize=none", *options, path], cwd=where,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def top(path: str, *options: str) -> Tuple[List[Tuple[str, int, int]], int, int]:
    """``-top`` in exact units: (name, flat, cum) per row in pprof's order, the
    sum of the rows shown, and the total."""
    out = pprof(path, "-top", "-nodefraction=0", "-edgefraction=0", *options)
    shown, total = map(int, re.search(r"accounting for (\d+)\w*, [\d.]+% of (\d+)\w* total", out).groups())
    rows = re.findall(r"^ *(\d+)[a-zA-Z]* +[\d.]+% +[\d.]+% +(\d+)[a-zA-Z]* +[\d.]+% +(.*)$", out, re.M)
    return [(name, int(flat), int(cum)) for flat, cum, name in rows], shown, total


def export(profile_dir: str, out: str) -> str:
    assert convert_main([profile_dir, "--to", "pprof", "-o", out]) == 0
    return out


def flat_by_name(profile: tinyprof.Profile, per_callpath: np.ndarray) -> Dict[str, int]:
    """Per event name, a per-callpath quantity summed over callpaths and ranks."""
    out: Dict[str, int] = {}
    for path, row in zip(profile.callpaths, per_callpath):
        out[path[-1]] = out.get(path[-1], 0) + int(row.sum())
    return out


def ns(seconds: np.ndarray) -> np.ndarray:
    return np.rint(np.asarray(seconds) * 1e9).astype(np.int64)


# -- the demo on real ranks -----------------------------------------------------------

@pytest.fixture(scope="module")
def demo(traced_demo, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("pprof") / "heat.pb.gz")
    return traced_demo, export(os.path.dirname(traced_demo.files[0]), out)


def test_go_pprof_top_gives_the_demo_numbers_of_tinyprof_show(demo, capsys):
    profile, path = demo
    rows, shown, total = top(path, "-unit=ns")
    agg = aggregate(profile)
    # the total is the run time `tinyprof show` divides by, summed over ranks; exactly
    assert shown == total == int(ns(run_times(profile, agg)).sum())
    # flat per event name: the exclusive time of `tinyprof show` (excl mean, over all ranks) times the ranks
    flat = flat_by_name(profile, ns(agg.time_exc))
    assert {name: f for name, f, _ in rows if f} == {n: f for n, f in flat.items() if f}
    assert [f for _, f, _ in rows] == sorted((f for _, f, _ in rows), reverse=True)
    assert rows[0][0] == max(flat, key=flat.__getitem__)
    # ... and the same seconds as printed by `tinyprof show`, to its 3 decimals
    assert main(["show", os.path.dirname(profile.files[0])]) == 0
    text = capsys.readouterr().out
    scale = {"s": 1e9, "ms": 1e6, "us": 1e3, "ns": 1.0}[re.search(r"times in (\w+) per rank", text)[1]]
    printed = {m[1]: (int(m[2]), float(m[3]), float(m[4]))
               for m in re.finditer(r"^ *(\S+) +(\d+)/\d+ +[\d.]+ +([\d.]+) +[\d.]+ +([\d.]+) ", text, re.M)}
    assert set(printed) == {p[-1] for p in profile.callpaths}
    cum = {name: c for name, _, c in rows}
    ranks = profile.nranks          # show's means are over all ranks of the run
    for name, f, _ in rows:
        _, mean, excl_mean = printed[name]
        assert abs(f - excl_mean * ranks * scale) <= 0.0005 * ranks * scale + 1, name
        assert abs(cum[name] - mean * ranks * scale) <= 0.0005 * ranks * scale + 1, name
    assert abs(total - printed["main"][1] * ranks * scale) <= 0.0005 * ranks * scale + 1


def test_every_rank_is_a_label_that_go_pprof_filters_on(demo):
    profile, path = demo
    tags = pprof(path, "-tags")
    assert sorted(int(r) for r in re.findall(r"\): (\d+)$", tags, re.M)) == list(range(profile.nranks))
    per_rank = ns(run_times(profile, aggregate(profile)))
    for rank in range(profile.nranks):
        _, shown, total = top(path, "-unit=ns", f"-tagfocus=rank={rank}")
        assert shown == per_rank[rank] and total == per_rank.sum()
    # stacks leaf first, each sample with its rank
    traces = pprof(path, "-traces")
    blocks = [b for b in traces.split("-----------+") if "halo" in b]
    assert len(blocks) == profile.nranks
    for block in blocks:
        assert re.search(r"rank: +\d+\n.*halo\n +main\n", block), block


def test_mpi_time_and_bytes_per_callpath(demo):
    profile, path = demo
    assert profile.mpi_recorded
    inside = [r for r in profile.mpi_data.ops if r[0]]          # calls outside events: no stack
    for index, field, unit in (("mpi_time", 7, "ns"), ("mpi_bytes", 6, "B"), ("mpi_calls", 5, "")):
        rows, shown, total = top(path, f"-sample_index={index}", *([f"-unit={unit}"] if unit else []))
        expected: Dict[str, int] = {}
        for r in inside:
            expected[r[0][-1]] = expected.get(r[0][-1], 0) + r[field]
        assert {name: f for name, f, _ in rows if f} == {k: v for k, v in expected.items() if v}
        assert shown == total == sum(r[field] for r in inside), index
    assert top(path, "-sample_index=mpi_bytes", "-unit=B")[0][0][0] == "halo"


# -- deterministic profiles ------------------------------------------------------------

def test_every_sample_holds_the_self_values_of_its_callpath_and_rank(tmp_path, clock):
    """Two files, 4 ranks, a callpath still open (``tail``: no values, ``inner`` inside it)."""
    profile = tinyprof.read(make_profile(tmp_path / "prof", clock))
    out = convert(profile, "pprof", tmp_path / "conv.pb.gz")
    with open(out, "rb") as f:
        message = message_class().FromString(gzip.decompress(f.read()))
    strings = list(message.string_table)
    assert strings[0] == "" and strings[message.default_sample_type] == "time"
    assert [(strings[t.type], strings[t.unit]) for t in message.sample_type] == [
        ("occurrences", "count"), ("time", "nanoseconds")]
    assert strings[message.sample_type[message.default_sample_type].type] == "time"   # speedscope
    names = {loc.id: strings[fn.name] for loc, fn in zip(message.location, message.function)}
    agg = aggregate(profile)
    got = {}
    for s in message.sample:
        (label,) = s.label
        assert strings[label.key] == "rank"
        got[(tuple(names[i] for i in reversed(s.location_id)), label.num)] = list(s.value)
    expected = {}
    for i, path in enumerate(profile.callpaths):
        for rank in range(profile.nranks):
            count = sum(len(x) for x in profile.series(path, rank))
            if path == ("tail",):                   # never closed: no values, no self time
                assert count == 0
            elif count:
                expected[(path, rank)] = [count, int(ns(agg.time_exc[i, rank]))]
    assert got == expected
    assert all(inc > 0 for inc in ns(agg.time_exc[agg.count > 0]))
    # per rank, the self times add up to what `tinyprof show` calls the rank's run time
    total = np.zeros(profile.nranks, dtype=np.int64)
    for (_, rank), (_, t) in got.items():
        total[rank] += t
    assert total.tolist() == ns(run_times(profile, agg)).tolist()
    assert message.duration_nanos == total.max()
    rows, shown, go_total = top(out, "-unit=ns")
    assert shown == go_total == total.sum()
    assert ("inner", 5 * profile.nranks, 5 * profile.nranks) in rows    # counted whole


def _demo_shaped(rank: int, clock) -> List[_collect.LocalEvent]:
    with Event("main"):
        clock.tick(3)
        with Event("init"):
            clock.tick(7)
        for step in range(4):
            with Event("halo", loop=1):
                clock.tick(100 + 10 * rank + step)
            with Event("stencil", loop=1):
                clock.tick(40 + rank)
            if step % 2:
                with Event("residual", loop=2):
                    clock.tick(20)
    return _collect.collect(annotate.impl.root())


def test_go_pprof_lists_halo_first_with_its_exact_time(tmp_path, clock):
    ranks, executions = record_ranks(2, _demo_shaped, clock)
    outdir = write_profile(tmp_path / "heat", "heat", [], ranks, executions, [(0, 2)])
    rows, shown, total = top(export(outdir, str(tmp_path / "heat.pb.gz")), "-unit=ns")
    halo = sum(100 + 10 * r + s for r in range(2) for s in range(4))
    assert rows[0] == ("halo", halo, halo)
    assert rows[1] == ("stencil", 8 * 40 + 4, 8 * 40 + 4)
    assert ("main", 6, total) in rows and shown == total


def test_names_that_are_not_utf8_are_spelt_as_escapes(tmp_path, clock):
    with Event("bad\udcff"):
        with Event("x\ny"):
            clock.tick(12)
    out = convert(tinyprof.read(tinyprof.flush()), "pprof", tmp_path / "names.pb.gz")
    with open(out, "rb") as f:
        message = message_class().FromString(gzip.decompress(f.read()))
    assert [message.string_table[fn.name] for fn in message.function] == ["bad\\udcff", "x\ny"]
    assert re.search(r"\n +bad\\udcff\n", pprof(out, "-traces"))


def test_deep_nesting_is_refused_in_memory_linear_in_the_file(tmp_path):
    """20,000 nested levels in 320 KB: pprof repeats each stack in its sample,
    2*10^8 location ids; the export says so instead of building them."""
    size = deep_file(tmp_path / "deep", 20_000)
    profile = tinyprof.read(tmp_path / "deep")

    def work():
        with pytest.raises(ConvertError, match=r"200010000 location ids .* 20000 levels deep"):
            convert(profile, "pprof", tmp_path / "deep.pb.gz")
    _, peak = peak_of(work)
    assert peak < 200 * size and not os.path.exists(tmp_path / "deep.pb.gz")


def test_nesting_within_the_bound_is_exported_whole(tmp_path):
    deep_file(tmp_path / "deep", 500)
    out = convert(tinyprof.read(tmp_path / "deep"), "pprof", tmp_path / "deep.pb.gz")
    rows, shown, total = top(out, "-unit=ns")
    # line i (depth i + 1) holds 500 - i ns; the self time of a level is its time minus the next's
    assert shown == total == 500 and {name for name, _, _ in rows} == {"a", "b", "c"}
    assert sum(flat for _, flat, _ in rows) == 500
    traces = pprof(out, "-traces")
    assert re.search(r"\n +1ns +[abc]\n(?: +[abc]\n){499}", traces)


# -- bad input: one line, a non-zero status ----------------------------------------------

def _convert_cli(args: List[str], cwd, prelude: str = "") -> subprocess.CompletedProcess:
    code = (f"import sys\n{prelude}\nfrom tinyprof.cli import convert_main\n"
            f"sys.exit(convert_main({args!r}))")
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("case", ["missing", "garbage", "unwritable", "statistic", "no protobuf"])
def test_bad_input_ends_with_one_line(tmp_path, clock, case):
    with Event("main"):
        clock.tick(5)
    good = tinyprof.flush()
    garbage = tmp_path / "garbage.tinyprof"
    garbage.write_bytes(b"\x1f\x8b not a profile\n")
    args = {"missing": [str(tmp_path / "nowhere"), "--to", "pprof", "-o", "x.pb.gz"],
            "garbage": [str(garbage), "--to", "pprof", "-o", "x.pb.gz"],
            "unwritable": [good, "--to", "pprof", "-o", str(tmp_path / "no" / "dir" / "x.pb.gz")],
            "statistic": [good, "--to", "pprof", "--statistic", "mean", "-o", "x.pb.gz"],
            "no protobuf": [good, "--to", "pprof", "-o", "x.pb.gz"]}[case]
    # a Python without protobuf: importing google fails as it would there
    prelude = "sys.modules['google'] = None" if case == "no protobuf" else ""
    done = _convert_cli(args, tmp_path, prelude)
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.returncode == (1 if case == "no protobuf" else 2)
    assert lines[0].startswith("tinyprof-convert: ")
    assert {"missing": "nowhere", "garbage": "garbage.tinyprof", "unwritable": "x.pb.gz",
            "statistic": "--statistic mean", "no protobuf": "pip install 'tinyprof[pprof]'"}[case] in lines[0]
    assert not os.path.exists(tmp_path / "x.pb.gz")


def test_statistic_other_than_sum_is_refused_in_python_too(tmp_path, clock):
    with Event("main"):
        clock.tick(5)
    with pytest.raises(ConvertError, match="adds sample values up"):
        convert(tinyprof.read(tinyprof.flush()), "pprof", tmp_path / "x.pb.gz", statistic="max")
