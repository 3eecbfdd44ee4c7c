"""Hostile file shapes through the converters (issue 34): the work follows the
values recorded and the file's bytes, not the executions a header declares
times the callpaths, and sparse values stay sparse (absent is not zero)."""
from __future__ import annotations

import csv as std_csv

import numpy as np
import pytest
from helpers.files import deep_file, many_executions_file, peak_of

import tinyprof
from tinyprof.analysis import ConvertError
from tinyprof.converters import csv, hatchet
from tinyprof.converters.dataframe import to_dataframe

pytest.importorskip("pandas")


@pytest.mark.slow           # 10^5 executions on 1,000 callpaths
def test_declared_executions_cost_nothing_without_values(tmp_path):
    """10^5 executions on 1,000 callpaths in 200 KB, the children with one
    value each: the converters built an offsets array per callpath and
    execution (8·10^8 bytes)."""
    nexec, ncallpaths = 100_000, 1_000
    size = many_executions_file(tmp_path / "p", nexec, ncallpaths)
    out = tmp_path / "values.csv"
    profile = tinyprof.read(tmp_path / "p")
    frame, peak = peak_of(lambda: (csv.write(profile, out), to_dataframe(profile))[1])
    assert peak < 200 * size
    assert len(frame) == nexec + ncallpaths - 1          # one row per recorded value, none for absent ones
    root = frame[frame["callpath"] == "r"]
    assert root["execution"].tolist() == list(range(nexec))
    assert root["time"].tolist() == [1e-9] * (nexec - 1) + [5e-9]
    children = frame[frame["callpath"] != "r"]
    assert set(children["execution"]) == {0} and np.allclose(children["time"], 3e-9)
    with open(out, newline="") as f:
        rows = list(std_csv.reader(f))
    assert len(rows) == 1 + nexec + ncallpaths - 1
    assert rows[nexec][:4] == ["0", str(nexec - 1), "0", "r"]
    assert rows[nexec + 1][:4] == ["0", "0", "0", "r<e1"]
    series, peak = peak_of(lambda: profile.series(("r", "e7"), 0))
    assert series[0] == [3e-9] and series[1:] == [[]] * (nexec - 1)
    assert peak < 200 * size


def test_hatchet_says_when_the_depth_is_beyond_its_recursion(tmp_path):
    deep_file(tmp_path, 3000)
    with pytest.raises(ConvertError, match="3000 levels deep .* recursion limit"):
        hatchet.to_hatchet(tinyprof.read(tmp_path))
