"""The package's imports flow one way: no module imports another that
(directly or through others) imports it back, lazy imports included."""
from __future__ import annotations

import ast
import os
from typing import Dict, List, Set

import tinyprof

PACKAGE_DIR = os.path.dirname(tinyprof.__file__)


def _modules() -> Dict[str, str]:
    """Dotted module name -> source path, for every module of the package."""
    found = {}
    for folder, _, files in os.walk(PACKAGE_DIR):
        rel = os.path.relpath(folder, os.path.dirname(PACKAGE_DIR)).replace(os.sep, ".")
        for name in files:
            stem = name.split(".")[0]
            if name.endswith(".py"):
                module = rel if name == "__init__.py" else f"{rel}.{stem}"
                found[module] = os.path.join(folder, name)
            elif name.endswith((".so", ".pyd")):    # the C core: it imports nothing of ours
                found.setdefault(f"{rel}.{stem}", "")
    return found


def _imports(module: str, path: str, known: Set[str]) -> Set[str]:
    """Modules of the package that ``module`` imports, anywhere in its source."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    out: Set[str] = set()
    if not path:
        return out
    for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    return {m for m in out if m in known and m != module}


def _cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One import cycle of ``graph``, or []."""
    state: Dict[str, int] = {}          # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> List[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_no_module_imports_in_a_circle():
    modules = _modules()
    graph = {m: _imports(m, p, set(modules)) for m, p in modules.items()}
    assert len(graph) > 15 and "tinyprof.runtime.session" in graph["tinyprof.runtime.profiler"]
    assert _cycle(graph) == [], " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_cycles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_import_and_annotating_load_no_numpy_or_pandas(run_python, tmp_path):
    """Issue 16: every rank of every job imports tinyprof; numpy comes with
    the first flush or read, pandas with a converter."""
    out = run_python("""
        import sys
        import tinyprof

        @tinyprof.event
        def solve():
            pass

        with tinyprof.Event("main"):
            with tinyprof.Event("step", loop=1):
                solve()
        before = sorted(m for m in ("numpy", "pandas", "hatchet") if m in sys.modules)
        tinyprof.Profiler("light", outdir="out")
        with tinyprof.Event("main"):
            pass
        tinyprof.flush()
        print(before, "numpy" in sys.modules, "pandas" in sys.modules)
        tinyprof.read("out").series(("main",), 0)
        print("pandas" in sys.modules)
    """, tmp_path)
    assert out.stdout.split("\n")[:2] == ["[] True False", "False"], out.stdout
