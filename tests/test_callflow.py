"""``tinyprof callflow``: CallFlow 1.3.0 really processes a converted 4-rank
profile, and what it wrote matches the Profile per rank and per node."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import tinyprof
from test_convert import NRANKS, assert_same, expected, make_profile

pd = pytest.importorskip("pandas")
pytest.importorskip("callflow")


def _script(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


def test_callflow_processes_a_converted_profile(tmp_path, clock):
    profile_dir = make_profile(tmp_path / "prof", clock)
    profile = tinyprof.read(profile_dir)
    data = tmp_path / "flow"
    done = subprocess.run([_script("tinyprof"), "callflow", profile_dir, "-o", str(data),
                           "--process-only"], capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"wrote {data / 'conv.json'}" in done.stdout

    saved = data / ".callflow" / "conv"
    frame = pd.read_pickle(saved / "df.pkl")
    want = expected(profile, "sum")
    # CallFlow drops callsites whose inclusive time is 0 on every rank ("tail",
    # open at the snapshot); every other (callpath, rank) is there, unchanged.
    kept = [p for p in profile.callpaths if p != ("tail",)]
    got = {(profile.callpaths[row["nid"]], row["rank"]): row for row in frame.to_dict("records")}
    assert set(got) == {(p, r) for p in kept for r in range(NRANKS)}
    for (path, rank), row in got.items():
        for column in ("time (inc)", "time", "count"):
            assert_same(float(row[column]), want[path, rank][column], f"{path} rank {rank} {column}")

    names = json.loads((saved / "maps.json").read_text(encoding="utf-8"))["c2idx"]
    assert set(names) - {"null"} == {p[-1] for p in profile.callpaths}
    by_index = {i: n for n, i in names.items()}
    assert all(by_index[row["name"]] == path[-1] for (path, _), row in got.items())

    graph = json.loads((saved / "nxg.json").read_text(encoding="utf-8"))
    edges = {(e["source"], e["target"]) for e in graph["edges"]}
    assert edges == {(p[-2], p[-1]) for p in kept if len(p) > 1 and p[:-1] in kept}


def test_callflow_without_the_fix_fails(tmp_path, clock):
    """The break the fix works around: plain ``callflow --process`` on the same data."""
    profile_dir = make_profile(tmp_path / "prof", clock)
    data = tmp_path / "flow"
    assert subprocess.run([_script("tinyprof-convert"), profile_dir, "--to", "callflow",
                           "-o", str(data)], capture_output=True).returncode == 0
    done = subprocess.run([_script("callflow"), "--data_path", str(data), "--profile_format",
                           "caliper_json", "--process"], capture_output=True, text=True, timeout=180)
    assert done.returncode != 0 and "from_htframe" in done.stderr and "AssertionError" in done.stderr
