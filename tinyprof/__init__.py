"""tinyprof: always-on, annotation-based profiling for MPI applications.

Annotate regions, flush, read back::

    import tinyprof
    tinyprof.Profiler("heat", frequency=5, selfkeys="tag:0,mem:1")
    with tinyprof.Event("main"):
        with tinyprof.Event("compute", loop=1):
            ...
    tinyprof.flush()
    profile = tinyprof.read("heat.tinyprof")   # newest complete flush or snapshot
    frame = tinyprof.to_hatchet(profile)   # a hatchet GraphFrame (tinyprof[hatchet])
    th = tinyprof.to_thicket([profile, "other.tinyprof"])   # a Thicket of runs (tinyprof[thicket])

The file format is specified in docs/format.md.
"""
from ._version import __version__
from .annotate import Event, event
from .errors import FormatError
from .runtime.profiler import Profiler, flush

__all__ = ["Event", "event", "Profiler", "flush", "read", "read_many", "snapshots", "Profile", "FormatError",
           "to_hatchet", "to_thicket", "to_dataframe", "pop_history", "compare", "history", "__version__"]

# Loaded when first used, so that importing tinyprof and annotating stay light
# (benchmarks/annotation.py measures it): no numpy (reading does), no pandas or
# hatchet or thicket (the converters do).
_LAZY = {"read": ".analysis.profile", "read_many": ".analysis.profile",
         "snapshots": ".analysis.profile",
         "Profile": ".analysis.profile", "to_hatchet": ".converters.hatchet",
         "to_thicket": ".converters.thicket", "to_dataframe": ".converters.dataframe",
         "pop_history": ".analysis.snapshot_intervals", "compare": ".analysis.compare",
         "history": ".analysis.compare"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
