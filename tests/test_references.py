"""Docs that stay true: every path of the repository (``tests/…``,
``tinyprof/…``, ``native/…``, ``docs/…``, ``benchmarks/…``, ``tools/…``) and
every dotted module name of the package (and the name after it) cited in the
docs, the README, the Python files' comments and docstrings, the Makefile,
``.ci/run`` and the native sources exists. Include paths
(``<tinyprof/detail/…>``) are read against native/include."""
from __future__ import annotations

import ast
import glob
import io
import os
import re
import subprocess
import tokenize
from typing import Dict, Iterator, List, Set, Tuple

import pytest

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), os.pardir))
INCLUDE = os.path.join("native", "include")
THIRD_PARTY = ("tests/mpi4py_demo/",)       # mpi4py's demos, as they came
# What the build and the runs make: cited, never tracked.
MADE = re.compile(r"^native/build(/|$)|\.so$|\.tinyprof(/|$)")

PATH = re.compile(r"(?<![\w./-])((?:tests|tinyprof|native|docs|benchmarks|tools)/[\w./-]*\w)")
MODULE = re.compile(r"(?<![\w./-])tinyprof(?:\.\w+)+")
# A path followed by one of these is a pattern (a glob, a template), not a path.
PATTERN_NEXT = set("*?[{<$%")
# tinyprof.hpp, tinyprof.cpp: files, not modules.
FILE_SUFFIXES = {"hpp", "h", "c", "cpp", "py", "so", "tp", "md", "txt", "json", "html", "toml"}


def _tracked() -> List[str]:
    """The repository's files (git's list when there is one)."""
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
        return [f for f in out.stdout.splitlines() if os.path.isfile(os.path.join(ROOT, f))]
    except (OSError, subprocess.CalledProcessError):
        return [os.path.relpath(os.path.join(d, f), ROOT).replace(os.sep, "/")
                for d, _, files in os.walk(ROOT) if ".git" not in d for f in files]


def _cited_in(name: str) -> bool:
    if name.startswith(THIRD_PARTY):
        return False
    return (name in ("README.md", "Makefile", ".ci/run", "CONTRIBUTING.md", "CHANGELOG.md")
            or (name.startswith("docs/") and name.endswith(".md")) or name.endswith(".py")
            or (name.startswith("native/") and name.endswith((".c", ".h", ".cpp", ".hpp", "CMakeLists.txt"))))


def _prose(path: str, text: str) -> Iterator[Tuple[int, str]]:
    """(line, text) of what ``path`` says to a reader: a Python file's comments
    and docstrings, any other file whole."""
    if not path.endswith(".py"):
        yield from enumerate(text.splitlines(), 1)
        return
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(text, path)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                for offset, line in enumerate(body[0].value.value.splitlines()):
                    yield body[0].lineno + offset, line


def _path_exists(cited: str) -> bool:
    """``cited`` exists, is made by the build, or is the prefix of files (a
    command's output name, such as docs/images/callflow-demo)."""
    return (bool(MADE.search(cited)) or any(glob.glob(os.path.join(base, glob.escape(cited)) + "*")
                                            for base in (ROOT, os.path.join(ROOT, INCLUDE))))


def _names(module: str, path: str) -> Set[str]:
    """The names a module defines at its top, and those of its ``__all__``."""
    names: Set[str] = set()
    if not path:
        return names
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Name):
                        names.add(sub.id)
            if any(isinstance(t, ast.Name) and t.id == "__all__"
                   for t in (node.targets if isinstance(node, ast.Assign) else [node.target])):
                names |= {e.value for e in ast.walk(node) if isinstance(e, ast.Constant)
                          and isinstance(e.value, str)}
    return names


def _modules() -> Dict[str, str]:
    """Dotted name -> path of every module and package of tinyprof (built ones included)."""
    found = {}
    for folder, _, files in os.walk(os.path.join(ROOT, "tinyprof")):
        package = os.path.relpath(folder, ROOT).replace(os.sep, ".")
        for name in files:
            stem = name.split(".")[0]
            if name == "__init__.py":
                found[package] = os.path.join(folder, name)
            elif name.endswith(".pyi") or (name.endswith(".py") and f"{stem}.pyi" not in files):
                found[f"{package}.{stem}"] = os.path.join(folder, name)    # a stub says a C module's names
            elif name.endswith(".c") and f"{stem}.pyi" not in files:
                found[f"{package}.{stem}"] = ""                             # a C module without a stub
    return found


def _keys() -> Set[str]:
    """The metadata keys the package writes (``"tinyprof.name"``): names, not modules."""
    keys = set()
    for path in filter(None, _modules().values()):
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and MODULE.fullmatch(node.value):
                keys.add(node.value)
    return keys


def _module_dead(cited: str, modules: Dict[str, str], names: Dict[str, Set[str]]) -> bool:
    parts = cited.split(".")
    if "" not in names:
        names[""] = _keys()
    if parts[-1] in FILE_SUFFIXES or cited in names[""]:
        return False
    longest = max(n for n in range(1, len(parts) + 1) if ".".join(parts[:n]) in modules)
    if longest == len(parts):
        return False
    module = ".".join(parts[:longest])
    if module not in names:
        names[module] = _names(module, modules[module])
    attribute = parts[longest]
    return not (attribute in names[module] or f"{module}.{attribute}" in modules
                or (attribute.startswith("__") and attribute.endswith("__")))


def _dead_in(said: str, modules: Dict[str, str], names: Dict[str, Set[str]]) -> List[str]:
    """The paths and modules cited in the text ``said`` that do not exist."""
    return ([m[1] for m in PATH.finditer(said)
             if said[m.end():m.end() + 1] not in PATTERN_NEXT and not _path_exists(m[1])]
            + [m[0] for m in MODULE.finditer(said) if _module_dead(m[0], modules, names)])


def dead_references(files: List[str]) -> List[str]:
    """``file:line: reference`` for every cited path or module that does not exist."""
    modules: Dict[str, str] = _modules()
    names: Dict[str, Set[str]] = {}
    return [f"{name}:{line}: {cited}" for name in sorted(filter(_cited_in, files))
            for line, said in _prose(name, open(os.path.join(ROOT, name), encoding="utf-8",
                                                errors="replace").read())
            for cited in _dead_in(said, modules, names)]


def test_every_cited_path_and_module_exists():
    dead = dead_references(_tracked())
    assert not dead, "dead references (file:line: what it cites):\n" + "\n".join(dead)


@pytest.mark.parametrize("said, dead", [
    ("# see tests/format/test_golden.py and tinyprof/format/reader.py", False),
    ("# see tests/test_perfetto.py", True),
    ("#include <tinyprof/detail/assemble.hpp>", False),
    ("#include <tinyprof/detail/nothing.hpp>", True),
    ("# the glob tinyprof/*/*.so, tinyprof/annotate/_core*.so and native/build/x", False),
    ("# tinyprof.read, tinyprof.format.reader.parse_file, python -m tinyprof.tune", False),
    ("# tinyprof._args, at the end of a sentence: tinyprof.format.", True),
    ("# tinyprof._trace.Trace", True),
    ("# tinyprof.analysis.profile.Nothing", True),
    ("# tinyprof.hpp, heat.tinyprof, docs/guide.md#comparing-runs.", False),
])
def test_the_check_finds_dead_references(said, dead):
    found = _dead_in(said, _modules(), {})
    assert bool(found) == dead, found
