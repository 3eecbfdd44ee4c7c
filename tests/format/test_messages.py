"""Messages quote input capped and escaped (issue 34): a 10 MB name makes no
10 MB error or warning, and no control character reaches a terminal raw."""
from __future__ import annotations

import os
import warnings

import pytest

import tinyprof
from tinyprof import FormatError
from tinyprof.analysis import ConvertError
from tinyprof.converters import csv
from tinyprof.format import encoding
from tinyprof.format.encoding import Header
from tinyprof.format.output_dir import write_atomic

HUGE = "\x1b]52;c;" + "n" * 10_000_000          # an OSC 52 clipboard write, then 10 MB
LIMIT = 1000                                    # characters a message may take, generously


def test_excerpt_caps_and_escapes():
    from tinyprof.errors import excerpt
    assert excerpt("main") == "'main'"
    assert excerpt("a\x1b[2Jb\n") == "'a\\x1b[2Jb\\n'"
    shown = excerpt(HUGE)
    assert len(shown) < 120 and "\x1b" not in shown and shown.endswith(f"... ({len(HUGE)} characters)")
    assert excerpt(b"\x00" * 100, 4) == "b'\\x00\\x00\\x00\\x00'... (100 bytes)"


def test_a_huge_profile_name_is_capped_in_errors(tmp_path):
    h = Header(name=HUGE, nranks=1, first_rank=0, rank_count=1, executions=[1], created="2000-01-01T00:00:00Z")
    data = encoding.encode_file(h, ["main"], [-1], [0], [0], [b""], [[b"5"]])
    write_atomic(str(tmp_path / "p.0-of-1.tp"), data)
    profile = tinyprof.read(tmp_path)
    assert profile.name == HUGE
    problems = [repr(profile)]
    for call in (lambda: profile.series(("main",), 0, HUGE), lambda: profile.series((HUGE,), 0),
                 lambda: csv.write(profile, tmp_path / "x.csv", table="mpi"),
                 lambda: profile.comm_matrix(metric=HUGE)):
        with pytest.raises((KeyError, ValueError, ConvertError)) as e:
            call()
        problems.append(str(e.value))
    assert all(len(p) < LIMIT and "\x1b" not in p for p in problems), [p[:200] for p in problems]


def test_a_path_with_control_characters_is_escaped(tmp_path):
    bad = tmp_path / "\x1b[2J"
    bad.mkdir()
    (bad / "p.0-of-1.tp").write_bytes(b"tinyprof 2\n")
    with pytest.raises(FormatError) as e:
        tinyprof.read(bad)
    assert e.value.path == str(bad / "p.0-of-1.tp")           # the attribute as it is
    assert "\x1b" not in str(e.value) and "\\x1b[2J" in str(e.value)


def test_warnings_quote_names_capped(tmp_path, monkeypatch):
    """A misused event, an undeclared metric key and a profile file that
    cannot be written (its name is the profile's) warn in a few hundred
    characters, whatever the names."""
    monkeypatch.chdir(tmp_path)
    name = "x" * 10_000_000
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tinyprof.Profiler(name)
        with tinyprof.Event(name, **{HUGE: 1.0}):
            e = tinyprof.Event(HUGE)
            e.__exit__(None, None, None)              # exited without being entered
        tinyprof.flush()
    messages = [str(w.message) for w in caught if "tinyprof" in str(w.message)]
    assert len(messages) >= 3, [m[:100] for m in messages]
    assert all(len(m) < LIMIT and "\x1b" not in m for m in messages), [m[:200] for m in messages]
    assert not os.listdir(tmp_path)


def test_settings_and_directory_errors_quote_capped(tmp_path, monkeypatch):
    """A bad environment value, a bad selfkeys item and a directory of
    several profiles with huge names give short, escaped errors."""
    from tinyprof.runtime.settings import env_count, parse_selfkeys
    monkeypatch.setenv("TINYPROF_CHAIN", HUGE)
    problems = []
    for call in (lambda: env_count("TINYPROF_CHAIN"), lambda: parse_selfkeys(HUGE),
                 lambda: parse_selfkeys(f"{HUGE}:0,{HUGE}:1")):
        with pytest.raises(ValueError) as e:
            call()
        problems.append(str(e.value))
    for n in ("a" * 5000, "b" * 5000):
        (tmp_path / f"{n[:200]}.0-of-1.tp").write_bytes(b"")
    with pytest.raises(FormatError) as f:
        tinyprof.read(tmp_path)
    problems.append(str(f.value))
    assert all(len(p) < LIMIT and "\x1b" not in p for p in problems), [p[:200] for p in problems]
