"""Issue 47: every boolean TINYPROF_* variable is read by one rule
(docs/api.md, "Environment variables"): on with 1/on/true/yes, off with
0/off/false/no, in any case and spacing; unset or empty, the default; any
other value warns once and is the default."""
from __future__ import annotations

import os
import re
import sys
import warnings

import pytest

import tinyprof
from tinyprof import annotate
from tinyprof.format import reader
from tinyprof.runtime.settings import Settings


def _pure() -> bool:
    engine = reader.engine("auto") == "python"
    impl = annotate._load_impl().__name__.endswith("pyevent")
    assert engine == impl or reader._parse is None
    return impl


# name -> (default, what it decides)
VARIABLES = {
    "TINYPROF": (True, annotate.enabled),
    "TINYPROF_PURE": (False, _pure),
    "TINYPROF_MPI": (False, lambda: Settings.create().mpi),
    "TINYPROF_UCX": (False, lambda: Settings.create().ucx),
    "TINYPROF_TRACE": (False, lambda: Settings.create().trace),
    "TINYPROF_AUTO_METADATA": (True, lambda: Settings.create().auto_metadata),
}
ON = ["1", "on", "true", "yes", " On ", "TRUE", "Yes\n"]
OFF = ["0", "off", "false", "no", " OFF", "False", "\tno "]


@pytest.mark.parametrize("name", sorted(VARIABLES))
def test_every_boolean_variable_reads_the_same_words(name, monkeypatch):
    default, read = VARIABLES[name]
    if name == "TINYPROF_PURE" and annotate._load_impl().__name__.endswith("pyevent") \
            and not os.environ.get(name):
        pytest.skip("the C core is not built")
    if "tinyprof._env" in sys.modules:     # warned once per process: afresh here
        monkeypatch.setattr(sys.modules["tinyprof._env"], "_warned", set())
    for value in ON + OFF + [""]:
        monkeypatch.setenv(name, value)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert read() is (value in ON or (value == "" and default)), repr(value)
    monkeypatch.delenv(name)
    assert read() is default
    monkeypatch.setenv(name, "maybe")
    with pytest.warns(RuntimeWarning, match=f"{name}='maybe' is neither on"):
        assert read() is default
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # warned once
        assert read() is default


def test_every_boolean_variable_is_tested():
    """A TINYPROF_* variable read as a boolean anywhere is read by ``_env.flag``
    and listed above; the others hold numbers, ids, paths or metadata."""
    root = os.path.dirname(tinyprof.__file__)
    flags, others = set(), set()
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".py"):
                text = open(os.path.join(folder, name), encoding="utf-8").read()
                flags |= set(re.findall(r'\bflag\("(TINYPROF\w*)"', text))
                others |= set(re.findall(r'environ(?:\.get\(|\[)"(TINYPROF\w*)"', text))
    assert flags == set(VARIABLES)
    assert others <= {"TINYPROF_AGGREGATORS", "TINYPROF_METADATA", "TINYPROF_RUN_ID",
                      "TINYPROF_CALLFLOW_ENV", "TINYPROF_CALLFLOW_PYTHON", "TINYPROF_MPI"}, others
