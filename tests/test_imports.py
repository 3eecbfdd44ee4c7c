"""The package's imports flow one way: down the layers of
docs/architecture.md, with no private name crossing a layer, and no module
importing another that (directly or through others) imports it back. Lazy
imports count as much as the ones at the top."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest
from helpers.mpi import MPIEXEC, needs_mpiexec

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


def _edges(module: str, path: str, known: Set[str], tree: Optional[ast.AST] = None) -> Iterator[Tuple[str, str, str]]:
    """(imported module, imported name or "", local name) for every import of
    the package in ``module``'s source (or in ``tree``, a part of it), anywhere in it."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    if not path:
        return
    for node in ast.walk(tree or ast.parse(open(path, encoding="utf-8").read(), path)):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in known:
                    yield a.name, "", a.asname or a.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                local = alias.asname or alias.name
                if sub in known:
                    yield sub, "", local
                elif base in known:
                    yield base, alias.name, local


def _imports(module: str, path: str, known: Set[str]) -> Set[str]:
    """Modules of the package that ``module`` imports, anywhere in its source."""
    return {m for m, _, _ in _edges(module, path, known) if m != module}


# Each subpackage is one layer and imports only the layers listed for it; the
# modules at the top (what a user runs: cli, tune, demo, __main__ and their
# helpers) may import any layer, and no layer imports them, except _version;
# commands/ (one module per command) runs any of them, and only the top imports it.
LAYERS = {
    "annotate": set(),
    "format": set(),
    "runtime": {"annotate", "format"},
    "analysis": {"format"},
    "views": {"analysis", "format"},
    "converters": {"analysis", "format"},
    "commands": {"annotate", "format", "runtime", "analysis", "views", "converters", "top"},
}
LEAVES = {"tinyprof._version", "tinyprof._env", "tinyprof.errors"}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else "top"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _violations() -> List[str]:
    modules = _modules()
    known = set(modules)
    found = []
    for module, path in sorted(modules.items()):
        layer = _layer(module)
        package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
        imported = {}
        for target, name, local in _edges(module, path, known):
            there = _layer(target)
            if target == module:
                continue
            if layer != "top" and there != layer and target not in LEAVES and there not in LAYERS[layer]:
                found.append(f"{module} ({layer}) imports {target} ({there})")
            # a leading underscore means "this module only" (or, on a module, "this package only")
            if _private(name) or (target.rpartition(".")[0] != package and target not in LEAVES
                                  and any(_private(p) for p in target.split(".")[1:])):
                found.append(f"{module} imports the private {target} {name}".rstrip())
            if not name:
                imported[local] = target
        # module._name on a module of another layer
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)) if path else ():
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in imported and _private(node.attr)
                    and imported[node.value.id] != module):
                found.append(f"{module} reads {imported[node.value.id]}.{node.attr}")
    return found


def test_layers_import_only_the_layers_below():
    assert _violations() == []


def test_the_errors_leaf_imports_nothing_and_every_layer_uses_it():
    """Issue 47: the errors and message helpers live in one leaf, so that no
    layer keeps a copy (annotate/args.py had its own ``excerpt``)."""
    modules = _modules()
    assert _imports("tinyprof.errors", modules["tinyprof.errors"], set(modules)) == set()
    users = {_layer(m) for m, p in modules.items() if "tinyprof.errors" in _imports(m, p, set(modules))}
    assert users == set(LAYERS) | {"top"}, users
    import tinyprof.errors
    from tinyprof import analysis, converters, format
    assert tinyprof.FormatError is format.FormatError is tinyprof.errors.FormatError
    assert converters.ConvertError is analysis.ConvertError is tinyprof.errors.ConvertError


def test_the_top_holds_only_what_a_user_runs():
    modules = _modules()
    top = [m for m in modules if _layer(m) == "top" and m.count(".") == 1]
    assert len(top) <= 12, sorted(top)
    assert {_layer(m) for m in modules} == set(LAYERS) | {"top"}


def test_the_layer_check_finds_climbs(tmp_path, monkeypatch):
    """A view importing the runtime, and a private name across layers, are found."""
    pkg = tmp_path / "tinyprof"
    for sub in list(LAYERS) + [""]:
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "runtime" / "session.py").write_text("_hidden = 1\n")
    (pkg / "views" / "bad.py").write_text("from ..runtime import session\nfrom ..format import _x\n"
                                         "print(session._hidden)\n")
    (pkg / "format" / "_x.py").write_text("")
    monkeypatch.setattr(__import__(__name__), "PACKAGE_DIR", str(pkg))
    assert _violations() == ["tinyprof.views.bad (views) imports tinyprof.runtime.session (runtime)",
                             "tinyprof.views.bad imports the private tinyprof.format._x",
                             "tinyprof.views.bad reads tinyprof.runtime.session._hidden"]


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


def _eager_commands() -> List[str]:
    """Imports of the package that a module of commands/ makes at its top
    (not inside a function) beyond commands/ itself and the leaves."""
    modules = _modules()
    found = []
    for module, path in sorted(modules.items()):
        if _layer(module) != "commands" or not path:
            continue
        tree = ast.parse(open(path, encoding="utf-8").read(), path)
        found += [f"{module}:{node.lineno} imports {target}" for node in tree.body
                  if isinstance(node, (ast.Import, ast.ImportFrom))
                  for target, _, _ in _edges(module, path, set(modules), node)
                  if _layer(target) != "commands" and target not in LEAVES]
    return found


def test_commands_import_their_layers_only_when_they_run():
    """Building the parsers loads no layer: each command imports what it runs inside its run."""
    assert _eager_commands() == []


def test_the_commands_check_finds_eager_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "tinyprof"
    for sub in list(LAYERS) + [""]:
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "_version.py").write_text("")
    (pkg / "commands" / "options.py").write_text("")
    (pkg / "commands" / "show.py").write_text("from .. import _version\nfrom . import options\n"
                                              "from ..views import text\n\n"
                                              "def run():\n    from ..analysis import profile\n")
    for layer, name in (("views", "text"), ("analysis", "profile")):
        (pkg / layer / f"{name}.py").write_text("")
    monkeypatch.setattr(__import__(__name__), "PACKAGE_DIR", str(pkg))
    assert _eager_commands() == ["tinyprof.commands.show:3 imports tinyprof.views.text"]


# ids "tinyprof CMD": a bare "mpi" would be a keyword pytest-mpi skips (tests/conftest.py)
@pytest.mark.parametrize("command", ["", "show", "report", "mpi", "pop", "compare", "callflow",
                                     "critical-path", "wait-states", "run", "tune", "convert"],
                         ids=lambda command: f"tinyprof {command}".strip())
def test_help_loads_no_numpy(command):
    """``tinyprof --help``, ``tinyprof CMD --help`` and ``tinyprof-convert --help``
    load neither numpy nor a layer beyond what ``import tinyprof`` loads."""
    main = "convert_main([" if command == "convert" else f"main({[command] if command else []} + ["
    out = subprocess.run([sys.executable, "-c", f"""
import io, sys, contextlib
import tinyprof
before = set(sys.modules)
from tinyprof.commands import main, convert_main
with contextlib.redirect_stdout(io.StringIO()) as help:
    try:
        {main}"--help"])
    except SystemExit:
        pass
assert "usage:" in help.getvalue()
print(sorted(m for m in set(sys.modules) - before
             if m == "numpy" or m.startswith("tinyprof.") and not m.startswith("tinyprof.commands")))
"""], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("[]", "['tinyprof.tune']"), out.stdout   # tune: its options


def test_the_parsers_constants_are_the_layers():
    """commands/options.py holds copies, so that the parsers load no layer: they agree."""
    from tinyprof import converters
    from tinyprof.analysis import compare, mpi_tables, values
    from tinyprof.commands import options
    from tinyprof.views import mpi_text

    assert (options.THRESHOLD, options.FLOOR) == (compare.THRESHOLD, compare.FLOOR)
    assert (options.KEYS, options.DEFAULT_BY) == (mpi_tables.KEYS, mpi_tables.DEFAULT_BY)
    assert options.STATISTICS == values.STATISTICS
    assert options.SORTS == mpi_text.SORTS
    assert options.TARGETS == converters.TARGETS


def test_no_module_imports_in_a_circle():
    modules = _modules()
    graph = {m: _imports(m, p, set(modules)) for m, p in modules.items()}
    assert len(graph) > 15 and "tinyprof.runtime.session" in graph["tinyprof.runtime.profiler"]
    assert _cycle(graph) == [], " -> ".join(_cycle(graph))


def test_the_cycle_finder_finds_cycles():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


# The parser's internals: ``Profile.parsed`` (the files as read), the fields
# of a ``ParsedFile`` and of its ``Values`` (the flat arrays) that only the
# parser and the analyses know, and the modules that make ParsedFiles.
PARSED = {"parsed", "exec_base", "line_slots", "line_values", "section_lines"}
VALUES_FIELDS = {"times", "counts", "slots", "loops", "consistent", "metrics"}
PARSERS = {"tinyprof.format.reader", "tinyprof.format.parsed", "tinyprof.format.pyparser",
           "tinyprof.format.snapshot_chain"}


def _parser_reads() -> List[str]:
    """Where a module outside format/ and analysis/ reads the parser's
    internals: numbers are computed in analysis/, from what it reads."""
    modules = _modules()
    found = []
    for module, path in sorted(modules.items()):
        if _layer(module) in ("format", "analysis") or not path:
            continue
        found += [f"{module} imports {target}" for target, _, _ in _edges(module, path, set(modules))
                  if target in PARSERS]
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read(), path)):
            if isinstance(node, ast.Attribute) and (node.attr in PARSED or (
                    node.attr in VALUES_FIELDS and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "values")):
                found.append(f"{module}:{node.lineno} reads .{node.attr}")
    return found


def test_only_format_and_analysis_read_the_parsers_internals():
    assert _parser_reads() == []


def test_the_parser_check_finds_reads(tmp_path, monkeypatch):
    pkg = tmp_path / "tinyprof"
    for sub in list(LAYERS) + [""]:
        (pkg / sub).mkdir(parents=True, exist_ok=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "format" / "reader.py").write_text("")
    (pkg / "analysis" / "ok.py").write_text("x = p.parsed[0].values.times\n")
    (pkg / "views" / "bad.py").write_text("from ..format import reader\n"
                                         "for f in p.parsed:\n    f.values.slots, f.exec_base\n"
                                         "d.values(), e.values\n")
    monkeypatch.setattr(__import__(__name__), "PACKAGE_DIR", str(pkg))
    assert _parser_reads() == ["tinyprof.views.bad imports tinyprof.format.reader",
                               "tinyprof.views.bad:2 reads .parsed", "tinyprof.views.bad:3 reads .slots",
                               "tinyprof.views.bad:3 reads .exec_base"]


def test_the_zero_code_launcher_loads_no_numpy(run_python, tmp_path):
    """``python -m tinyprof app.py`` starts the script before anything heavy."""
    out = run_python("""
        import sys
        import tinyprof.__main__
        print(sorted(m for m in ("numpy", "mpi4py", "tinyprof.runtime.session") if m in sys.modules))
    """, tmp_path)
    assert out.stdout.strip() == "[]", out.stdout


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


def test_a_zero_code_run_reaches_the_script_without_numpy(tmp_path):
    """Issue 35: ``python -m tinyprof`` starts the profiler and runs the
    script before numpy is loaded; the flush at exit loads it."""
    _zero_code_run(tmp_path, launched=False)


@needs_mpiexec
def test_a_launched_zero_code_run_reaches_the_script_without_numpy(tmp_path):
    """The same under mpiexec, with MPI capture: the same profile, and its communicators."""
    _zero_code_run(tmp_path, launched=True)


def _zero_code_run(tmp_path, launched: bool) -> None:
    app = tmp_path / "app.py"
    app.write_text("import sys\n"
                   "print(sorted(m for m in ('numpy', 'pandas', 'tinyprof.runtime.session') if m in sys.modules))\n")
    cmd = [sys.executable, "-m", "tinyprof", "-o", str(tmp_path / "out"), str(app)]
    proc = subprocess.run(([MPIEXEC, "-n", "1"] if launched else []) + cmd, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['tinyprof.runtime.session']", proc.stdout
    prof = tinyprof.read(tmp_path / "out")
    assert prof.callpaths == [("app.py",)]
    assert ("COMM_WORLD" in set(prof.communicators.comm)) == launched
