"""Issue 30: no extra of tinyprof pins numpy or pandas below 2 (a user's
``pip install tinyprof[hatchet]`` must not downgrade them), and the
environment ``make install`` builds has the current stack."""
from __future__ import annotations

import os

import pytest

packaging = pytest.importorskip("packaging.requirements")
tomllib = pytest.importorskip("tomllib")

PYPROJECT = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "pyproject.toml")


def _extras():
    with open(PYPROJECT, "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    return {name: [packaging.Requirement(line) for line in lines] for name, lines in extras.items()}


def test_mpi_brings_mpi4py_alone_and_mpich_the_bundled_mpi():
    """Issue 46: on a cluster, tinyprof[mpi] must not put a second MPI beside the system's."""
    extras = _extras()
    assert [r.name for r in extras["mpi"]] == ["mpi4py"]
    assert [r.name for r in extras["mpich"]] == ["mpich"]


def test_no_extra_pins_numpy_or_pandas_below_2():
    extras = _extras()
    assert {"hatchet", "thicket"} <= set(extras) and "callflow" not in extras
    for name, requirements in extras.items():
        for req in requirements:
            if req.name in ("numpy", "pandas"):
                assert req.specifier.contains("2.4.6"), (name, str(req))
    for name in ("hatchet", "thicket"):
        names = {r.name: r for r in extras[name]}
        assert "llnl-hatchet" in names and "hatchet" not in names
        for lib in ("numpy", "pandas"):           # and not 1.x: hatchet's old stack
            assert not names[lib].specifier.contains("1.26.4"), (name, lib)
    assert "llnl-thicket" in {r.name for r in extras["thicket"]}


def test_the_installed_stack_is_current():
    import numpy
    pandas = pytest.importorskip("pandas")
    hatchet = pytest.importorskip("hatchet")
    assert int(numpy.__version__.split(".")[0]) >= 2 and int(pandas.__version__.split(".")[0]) >= 2
    assert not hasattr(hatchet.GraphFrame, "load_imbalance")       # llnl-hatchet, not hatchet 1.4.1
