"""docs/architecture.md's flush flow against a recorded flush.

record_flush.py runs a real ``tinyprof.flush()`` (alone, and under
``mpiexec -n 2`` with ``mpi=True``) under ``sys.setprofile``; the modules it
enters and its callbacks (a call into a module the caller does not import)
must be the ones the doc's flow blocks name.
"""
from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

from test_mpi_large import MPIEXEC, needs_mpi

ROOT = Path(__file__).resolve().parents[2]
RECORDER = Path(__file__).with_name("record_flush.py")
DOC = ROOT / "docs" / "architecture.md"
HEADING = "### A flush: `tinyprof.flush()`"
MODULE = re.compile(r"\b(runtime|format|annotate|analysis)/([a-z_]+)")
# Above the session: the front and the signal mask it flushes under.
TOP = {"runtime/profiler", "runtime/lifecycle", "runtime/session"}


def _short(module: str) -> str:
    """``tinyprof.runtime.session`` -> ``runtime/session``."""
    return "/".join(module.split(".")[1:3])


def _imported(module: str) -> Set[str]:
    """The tinyprof modules that ``module``'s source imports, lazily or not."""
    path = ROOT / (module.replace(".", "/") + ".py")
    package = module.rsplit(".", 1)[0].split(".")
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[:len(package) - node.level + 1]) if node.level else ""
            stem = ".".join(p for p in (base, node.module) if p)
            out.add(stem)
            out.update(f"{stem}.{a.name}" for a in node.names)
    return out


def _doc_flows() -> Tuple[List[str], str]:
    """The fenced blocks of the flush section (under MPI, then alone) and its prose."""
    text = DOC.read_text()
    start = text.index(HEADING)
    section = text[start:text.index("\n### ", start + 1)]
    return re.findall(r"```\n(.*?)```", section, re.S), section


def _named(block: str) -> Tuple[Set[str], Set[Tuple[str, str]]]:
    """The modules a flow block names, and its callbacks: the lines with ``↩``
    name the caller, then the module called back."""
    modules = {f"{a}/{b}" for a, b in MODULE.findall(block)}
    callbacks = set()
    for line in block.splitlines():
        if "↩" in line:
            caller, callee = [f"{a}/{b}" for a, b in MODULE.findall(line)][:2]
            callbacks.add((caller, callee))
    return modules, callbacks


def _record(tmp_path: Path, mode: str, nranks: int) -> Tuple[Set[str], Set[Tuple[str, str]], List[str]]:
    """The modules a real flush enters on any rank, its callbacks, and each call."""
    out = tmp_path / "calls"
    cmd = [sys.executable, str(RECORDER), str(tmp_path / "profile"), mode, str(out)]
    if mode == "mpi":
        cmd = [MPIEXEC, "-n", str(nranks), *cmd]
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    modules, callbacks, seen = set(), set(), []
    imports: Dict[str, Set[str]] = {}
    for rank in range(nranks):
        for caller, caller_fn, callee, callee_fn in json.loads((tmp_path / f"calls.{rank}").read_text()):
            modules.add(_short(callee))
            seen.append(f"{caller}.{caller_fn} -> {callee}.{callee_fn}")
            if caller.startswith("tinyprof.") and \
                    callee not in imports.setdefault(caller, _imported(caller)):
                callbacks.add((_short(caller), _short(callee)))
    return modules, callbacks, seen


def _compare(doc: Tuple[Set[str], Set[Tuple[str, str]]],
             recorded: Tuple[Set[str], Set[Tuple[str, str]], List[str]], flow: str) -> None:
    (named, named_back), (modules, callbacks, calls) = doc, recorded
    problems = []
    if modules - named:
        problems.append(f"the flush runs {sorted(modules - named)}, which the doc does not name")
    if named - modules:
        problems.append(f"the doc names {sorted(named - modules)}, which the flush does not run")
    if callbacks != named_back:
        problems.append(f"callbacks recorded {sorted(callbacks)}, the doc's (lines with ↩) "
                        f"{sorted(named_back)}")
    assert not problems, (f"docs/architecture.md's flow of a flush {flow} differs from a recorded "
                          f"one:\n  " + "\n  ".join(problems) + "\nrecorded calls:\n  " +
                          "\n  ".join(calls))


def test_the_doc_names_the_modules_a_flush_alone_runs(tmp_path):
    blocks, prose = _doc_flows()
    modules = _record(tmp_path, "serial", 1)
    _compare(_named(blocks[1]), modules, "in one process")
    counted = re.search(r"(\d+) modules below the session, (\d+) in one process", prose)
    assert counted and int(counted[2]) == len(modules[0] - TOP), "the prose's count of modules"


@needs_mpi
def test_the_doc_names_the_modules_an_mpi_flush_runs(tmp_path):
    blocks, prose = _doc_flows()
    modules = _record(tmp_path, "mpi", 2)
    _compare(_named(blocks[0]), modules, "under MPI")
    counted = re.search(r"(\d+) modules below the session", prose)
    assert counted and int(counted[1]) == len(modules[0] - TOP), "the prose's count of modules"


@needs_mpi
def test_a_gathered_row_gives_each_field_once_in_line_order():
    """The Fields contract (format/encoding.Fields) as the MPI flush's rows keep
    it: their buffer is freed with the last line's field, and a later access
    raises rather than read an empty field."""
    code = """
from tinyprof.runtime import mpi_flush
order = [("a",), ("a", "b"), ("c",)]
row = mpi_flush._encode_row(order, {p: p[-1].encode() * 2 for p in order}, None, 3, (b"", b""))
gathered = mpi_flush.np.frombuffer(bytes(row), mpi_flush.np.uint8), [0]
taken = mpi_flush._Row(gathered, 0, len(order), False)
print([bytes(taken[i]) for i in range(len(order))])
for again in (0, 2):
    try:
        print(bytes(taken[again]))
    except IndexError:
        print("raises")
"""
    proc = subprocess.run([MPIEXEC, "-n", "1", sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:3] == ["[b'aa', b'bb', b'cc']", "raises", "raises"]

