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

The file format is specified in docs/format.md.
"""
from ._annotate import Event, event
from ._format import FormatError
from ._profile import Profile, read, snapshots
from ._profiler import Profiler, flush
from ._version import __version__

__all__ = ["Event", "event", "Profiler", "flush", "read", "snapshots", "Profile", "FormatError",
           "to_hatchet", "to_dataframe", "__version__"]

# The converters need pandas (and hatchet): load them only when first used.
_CONVERTERS = {"to_hatchet": "hatchet", "to_dataframe": "dataframe"}


def __getattr__(name: str):
    if name in _CONVERTERS:
        import importlib

        return getattr(importlib.import_module(f".converters.{_CONVERTERS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
