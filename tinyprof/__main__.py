"""Zero-code runs: ``python -m tinyprof [-o DIR] [--frequency N] [--sample [HZ]]
[--site-depth K] app.py [args]`` or ``python -m tinyprof [options] -m module [args]``.

Runs ``app.py`` as ``python app.py [args]`` would, and a module as
``python -m module [args]`` would: the same ``sys.argv``, ``sys.path[0]``,
``__main__`` module and ``__file__``, the same traceback and exit status. It
runs under one region named after the script or module, and the profile is
flushed at exit. Under an MPI launcher it initialises MPI (mpi4py) before
the script runs, so that the communicators the script makes get their stable
names, and records its MPI communication (``mpi=True``), each call below the
line of the program that made it (``sites``, ``--site-depth``). ``--sample``
adds the program's sampled Python stacks below the region.
"""
from __future__ import annotations

import argparse
import builtins
import importlib
import importlib.machinery
import importlib.util
import io
import os
import sys
import types
from typing import Any, List, NoReturn, Optional, Tuple

from . import annotate
from .annotate import Event
from .runtime.profiler import Profiler
from .runtime.world import launched_rank

_VALUED = ("-o", "--outdir", "--name", "--frequency", "--site-depth")   # tinyprof's options taking a value
SAMPLE_HZ = 100.0           # --sample without a rate, as sample=True


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tinyprof",
        usage="python -m tinyprof [-h] [-o OUTDIR] [--name NAME] [--frequency FREQUENCY] "
              "[--sample [HZ]] [--site-depth K] (script | -m module) [args ...]",
        description="Profile an unannotated Python script or module: one region named after it, "
                    "plus its MPI communication per communicator, operation, size and peer, "
                    "below the lines that made each call, and its sampled Python stacks.")
    p.add_argument("-o", "--outdir", help="output directory (default: <name>.tinyprof)")
    p.add_argument("--name", help="profile name (default: the script's file name without .py, "
                                  "or the module's name)")
    p.add_argument("--frequency", type=float, default=0,
                   help="snapshot interval in seconds (default: 0, none)")
    p.add_argument("--sample", type=float, nargs="?", const=SAMPLE_HZ, default=0, metavar="HZ",
                   help=f"sample the Python stacks HZ times a second (default without HZ: {SAMPLE_HZ:g})")
    p.add_argument("--site-depth", type=int, default=1, metavar="K",
                   help="frames of the program named per MPI call site (default: 1; 0: no sites)")
    p.add_argument("-m", dest="module", help="run a library module as a script, as python -m does")
    p.add_argument("script", nargs="?", help="the Python script to run")
    return p


def _split(argv: List[str]) -> Tuple[List[str], List[str]]:
    """tinyprof's own arguments and the target's, as python splits its command
    line: everything after the script, or after ``-m module``, is the target's."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "-m":
            return argv[:i + 2], argv[i + 2:]
        if arg.startswith("-m") and not arg.startswith("--"):     # -mmodule
            return argv[:i + 1], argv[i + 1:]
        if arg in _VALUED or (arg == "--sample" and _number(argv[i + 1:i + 2])):
            i += 2
        elif arg.startswith("-") and arg != "-":
            i += 1
        else:
            return argv[:i + 1], argv[i + 1:]
    return argv, []


def _number(args: List[str]) -> bool:
    """Whether ``args`` is one number (``--sample``'s optional rate)."""
    try:
        return len(args) == 1 and float(args[0]) is not None
    except ValueError:
        return False


def _run(code: types.CodeType, path: str, loader: Any, spec: Any = None) -> None:
    """Run ``code`` in a fresh ``__main__`` as python makes it: it stays
    ``sys.modules["__main__"]`` after the run, as under python (atexit
    handlers and pickles find it)."""
    main = types.ModuleType("__main__")
    vars(main).update(__file__=path, __loader__=loader, __builtins__=builtins, __spec__=spec,
                      __cached__=spec.cached if spec else None,
                      __package__=spec.parent if spec else None)
    sys.modules["__main__"] = main
    exec(code, vars(main))


def _run_script(script: str) -> None:
    """``python script``: an absolute ``__file__``, no spec."""
    path = os.path.abspath(script)
    with io.open_code(path) as f:
        code = compile(f.read(), path, "exec", dont_inherit=True)
    _run(code, path, importlib.machinery.SourceFileLoader("__main__", path))


def _module_code(name: str) -> Tuple[types.CodeType, Any]:
    """What ``python -m name`` runs: the module's (or its package's
    ``__main__``'s) code and spec; python's message and status 1 if none."""
    def missing(why: str) -> NoReturn:
        print(f"{sys.executable}: {why}", file=sys.stderr)
        sys.exit(1)

    try:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations is not None:
            package, spec = name, importlib.util.find_spec(name + ".__main__")
            if spec is None:
                missing(f"No module named {package}.__main__; {package!r} is a package "
                        "and cannot be directly executed")
    except (ImportError, ValueError) as e:
        missing(f"Error while finding module specification for {name!r} "
                f"({type(e).__name__}: {e})")
    get_code = getattr(spec and spec.loader, "get_code", None)
    code = get_code(spec.name) if spec is not None and get_code else None
    if spec is None or code is None:
        missing(f"No module named {name}")
    return code, spec


def _hide_own_frames(e: BaseException) -> None:
    """Let the traceback an uncaught exception prints start at the script's
    frame, as under python, whoever's ``sys.excepthook`` prints it."""
    if isinstance(e, SystemExit):
        return
    own = e.__traceback__
    while own is not None and own.tb_frame.f_code.co_filename == __file__:
        own = own.tb_next                   # from the script's frame (or runpy's) on
    hook = sys.excepthook

    def excepthook(kind, value, tb):
        sys.excepthook = hook
        if value is e:
            tb = own
            value.__traceback__ = own
        hook(kind, value, tb)

    sys.excepthook = excepthook


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    mine, rest = _split(argv)
    for i, arg in enumerate(mine):      # a bare --sample before the script: the default rate
        if arg == "--sample" and not _number(mine[i + 1:i + 2]):
            mine.insert(i + 1, str(SAMPLE_HZ))
            break
    opts = _parser().parse_args(mine)
    if opts.module is None and opts.script is None:
        _parser().error("a script or -m module is required")
    if opts.module is None and not os.path.isfile(opts.script):
        sys.exit(f"python -m tinyprof: no such script: {opts.script}")
    launched = launched_rank() is not None
    if launched:
        try:
            importlib.import_module("mpi4py.MPI")   # MPI up before the profiler and the script
        except ImportError:
            pass                    # the profiler warns that it records no MPI data
    if opts.module is not None:
        region = name = opts.module
        sys.path[0] = os.getcwd()
        code, spec = _module_code(opts.module)      # its packages imported, as by python -m
        if opts.module.partition(".")[0] == "mpi4py":
            # its runner's abort status, hooked when the profiler starts (runtime/lifecycle.py)
            importlib.import_module("mpi4py.run")
    else:
        region = os.path.basename(opts.script)
        name = os.path.splitext(region)[0]
    # Without a launcher there is no MPI to capture yet (and no warning that
    # there is none): TINYPROF_MPI decides, as for any Profiler.
    try:
        profiler = Profiler(opts.name or name, opts.frequency, outdir=opts.outdir,
                            mpi=True if launched else None, sites=opts.site_depth, sample=opts.sample)
    except (ValueError, TypeError) as e:        # a bad option: one line, as argparse says it
        _parser().error(str(e).replace("tinyprof.Profiler: ", ""))
    try:
        with Event(region):
            if profiler.session.added is not None:      # the program's other threads too
                profiler.session.added.below(annotate.impl.current().id)
            if opts.module is not None:
                sys.argv = [spec.origin, *rest]
                _run(code, spec.origin, spec.loader, spec)
            else:
                sys.argv = [opts.script, *rest]
                sys.path[0] = os.path.dirname(os.path.realpath(opts.script))
                _run_script(opts.script)
    except BaseException as e:
        _hide_own_frames(e)
        raise


if __name__ == "__main__":
    main()
