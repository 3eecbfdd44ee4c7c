"""The settings of a profiling session: one frozen, validated object.

Everything configurable lives here: the ``Profiler(...)`` arguments, the
environment variables that change them, and the rules derived from them
(the aggregator count). Nothing here has side effects or mutable state.
"""
from __future__ import annotations

import math
import numbers
import os
import re
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from .._env import flag
from ..errors import excerpt
from ..format import meta_section

Metrics = Tuple[Tuple[str, bool], ...]      # (key, consistent?) in declaration order

KEEP_POLICIES = ("last", "all")
TRACE_LIMIT = 2_000_000     # occurrences (and MPI calls) kept per rank: 64 MB each
CHAIN = 32                  # deltas after the first full snapshot (then twice as many each time)
MAX_SITE_DEPTH = 8          # frames of a call site (_frames.c's MAX_DEPTH)
MAX_SAMPLE = 10_000         # samples per second
SAMPLE_HZ = 100.0           # sample=True


def parse_selfkeys(selfkeys: str) -> List[Tuple[str, bool]]:
    """``"tag:0,mem:1"`` -> ``[("tag", True), ("mem", False)]``.

    As in the paper's Fig. 2, flag 0 marks a consistent metric (one value per
    callpath) and 1 an inconsistent one (a value per occurrence).
    """
    if not isinstance(selfkeys, str):
        raise TypeError(f"tinyprof: selfkeys must be a str such as 'tag:0,mem:1', "
                        f"not {type(selfkeys).__name__}")
    keys: List[Tuple[str, bool]] = []
    for item in filter(None, (s.strip() for s in selfkeys.split(","))):
        name, sep, flag = item.rpartition(":")
        if not sep or flag not in ("0", "1") or not name:
            raise ValueError(f"tinyprof: bad selfkeys item {excerpt(item)}: expected name:0 "
                             "(consistent) or name:1 (inconsistent)")
        if name == "time" or name in dict(keys):
            raise ValueError(f"tinyprof: metric {excerpt(name)} declared twice (or reserved)")
        keys.append((name, flag == "0"))
    return keys


_PCT = re.compile("%([0-9A-Fa-f]{2})?")
_PCT_B = re.compile(b"%([0-9A-Fa-f]{2})")


def parse_metadata(text: str) -> Tuple[Dict[str, str], List[str]]:
    """``TINYPROF_METADATA`` (``key=value,key=value``) as entries, and what was
    wrong with the items left out. A value is percent-encoded as in a URL
    (``%2C`` a comma, ``%25`` a percent sign): a ``%`` not followed by two
    hex digits, a bad key, a key given twice or an item without ``=`` is a
    problem; empty items are ignored."""
    entries: Dict[str, str] = {}
    problems: List[str] = []
    for item in text.split(","):
        if not item:
            continue
        key, sep, raw = item.partition("=")
        if not sep:
            problems.append(f"item {excerpt(item)} is not key=value")
            continue
        if any(m.group(1) is None for m in _PCT.finditer(raw)):
            problems.append(f"value of {excerpt(key)} has a '%' not followed by two hex digits")
            continue
        # the decoded bytes are UTF-8 ('caf%C3%A9' is 'café'), kept as the environment's are
        value = _PCT_B.sub(lambda m: bytes([int(m[1], 16)]), raw.encode("utf-8", "surrogateescape")
                           ).decode("utf-8", "surrogateescape")
        why = meta_section.problem(key, value) or (
            f"key {excerpt(key)} given twice" if key in entries else None)
        if why:
            problems.append(why)
            continue
        entries[key] = value
    return entries, problems


def check_metadata(metadata: Any) -> Dict[str, meta_section.Value]:
    """``Profiler(metadata=...)``: a mapping of keys to str, int or float;
    TypeError/ValueError otherwise, at once."""
    if not isinstance(metadata, dict):
        raise TypeError(f"tinyprof.Profiler: metadata must be a dict, "
                        f"not {type(metadata).__name__}")
    for key, value in metadata.items():
        why = meta_section.problem(key, value)
        if why:
            bad_type = not isinstance(key, str) or isinstance(value, bool) or \
                not isinstance(value, (str, int, float))
            raise (TypeError if bad_type else ValueError)(f"tinyprof.Profiler: {why}")
    if len(metadata) > meta_section.MAX_ENTRIES:
        raise ValueError(f"tinyprof.Profiler: more than {meta_section.MAX_ENTRIES} metadata keys")
    return dict(metadata)


def env_count(name: str) -> Optional[int]:
    """Environment variable ``name`` as an integer >= 1, or None if unset."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"tinyprof: {name} must be an integer >= 1, not {excerpt(text)}")
    return int(text)


def env_aggregators() -> Optional[int]:
    """``TINYPROF_AGGREGATORS``, if set (an integer >= 1)."""
    return env_count("TINYPROF_AGGREGATORS")


def clamp_aggregators(wanted: Optional[int], nranks: int) -> int:
    """``wanted`` aggregators (None: the default P // 16) clamped to [1, P]."""
    return min(max(1, wanted if wanted is not None else nranks // 16), nranks)


@dataclass(frozen=True)
class Settings:
    """What one session records and where it writes; see ``Profiler`` for the meaning.

    Build it with :meth:`create`, which validates every value; a Settings
    object is immutable, so every component of a session reads the same.
    """

    name: str = "profile"
    frequency: float = 0.0
    metrics: Metrics = ()
    outdir: str = "profile.tinyprof"
    aggregators: Optional[int] = None
    keep: str = "last"
    mpi: bool = False
    ucx: bool = False
    trace: bool = False
    trace_limit: int = TRACE_LIMIT
    chain: int = CHAIN
    metadata: Tuple[Tuple[str, meta_section.Value], ...] = ()    # user keys, sorted
    auto_metadata: bool = True
    sites: int = 0              # frames of an MPI call's site (0: no sites)
    sample: float = 0.0         # stack samples per second (0: none)

    @classmethod
    def create(cls, name: str = "profile", frequency: float = 0, selfkeys: str = "",
               outdir: Optional[str] = None, aggregators: Optional[int] = None,
               keep: str = "last", mpi: Optional[bool] = None, trace: Optional[bool] = None,
               trace_limit: Optional[int] = None, chain: Optional[int] = None,
               ucx: Optional[bool] = None, metadata: Optional[dict] = None,
               sites: object = False, sample: Optional[float] = None) -> Settings:
        if not isinstance(name, str):
            raise TypeError(f"tinyprof.Profiler: name must be a str, not {type(name).__name__}")
        # Checked as any object: callers may pass what the annotation rules out
        # (and typeshed's float is no numbers.Real).
        given: object = frequency
        if isinstance(given, bool) or not isinstance(given, numbers.Real):
            raise TypeError(f"tinyprof.Profiler: frequency must be a number of seconds, "
                            f"not {frequency!r}")
        freq = float(given)
        if not math.isfinite(freq) or freq < 0:
            raise ValueError(f"tinyprof.Profiler: frequency must be a finite number of "
                             f"seconds >= 0, not {frequency!r}")
        if aggregators is None:
            aggregators = env_aggregators()
        elif isinstance(aggregators, bool) or not isinstance(aggregators, int) or aggregators < 1:
            raise ValueError(f"tinyprof.Profiler: aggregators must be an integer >= 1, "
                             f"not {aggregators!r}")
        if keep not in KEEP_POLICIES:
            raise ValueError(f"tinyprof.Profiler: keep must be 'last' or 'all', not {keep!r}")
        if mpi is None:
            mpi = flag("TINYPROF_MPI", False)
        elif not isinstance(mpi, bool):
            raise TypeError(f"tinyprof.Profiler: mpi must be True or False, not {mpi!r}")
        if ucx is None:
            ucx = flag("TINYPROF_UCX", False)
        elif not isinstance(ucx, bool):
            raise TypeError(f"tinyprof.Profiler: ucx must be True or False, not {ucx!r}")
        mpi = mpi or ucx            # the transport view is part of MPI capture
        if trace is None:
            trace = flag("TINYPROF_TRACE", False)
        elif not isinstance(trace, bool):
            raise TypeError(f"tinyprof.Profiler: trace must be True or False, not {trace!r}")
        if trace_limit is None:
            trace_limit = env_count("TINYPROF_TRACE_LIMIT") or TRACE_LIMIT
        elif isinstance(trace_limit, bool) or not isinstance(trace_limit, int) or trace_limit < 1:
            raise ValueError(f"tinyprof.Profiler: trace_limit must be an integer >= 1, "
                             f"not {trace_limit!r}")
        if chain is None:
            chain = env_count("TINYPROF_CHAIN") or CHAIN
        elif isinstance(chain, bool) or not isinstance(chain, int) or chain < 1:
            raise ValueError(f"tinyprof.Profiler: chain must be an integer >= 1, not {chain!r}")
        given_meta = check_metadata(metadata) if metadata is not None else {}
        from_env, problems = parse_metadata(os.environ.get("TINYPROF_METADATA", ""))
        if problems:        # the job's environment: warned, never raised into the application
            warnings.warn(f"tinyprof: TINYPROF_METADATA: {problems[0]}"
                          + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
                          + "; those items are left out", RuntimeWarning, stacklevel=3)
        entries = {**from_env, **given_meta}    # the program's own word wins
        if sites is True:
            sites = 1
        elif sites is False or sites is None:
            sites = 0
        elif not isinstance(sites, int) or not 0 <= sites <= MAX_SITE_DEPTH:
            raise ValueError(f"tinyprof.Profiler: sites must be True, False or a frame count "
                             f"in [0, {MAX_SITE_DEPTH}], not {sites!r}")
        hz: object = 0.0 if sample is None or sample is False else SAMPLE_HZ if sample is True else sample
        if isinstance(hz, bool) or not isinstance(hz, numbers.Real) or not math.isfinite(float(hz)) \
                or not 0 <= float(hz) <= MAX_SAMPLE:
            raise ValueError(f"tinyprof.Profiler: sample must be a number of samples per second "
                             f"in [0, {MAX_SAMPLE}], not {sample!r}")
        return cls(name=name, frequency=freq, metrics=tuple(parse_selfkeys(selfkeys)),
                   outdir=os.fspath(outdir) if outdir is not None else f"{name}.tinyprof",
                   aggregators=aggregators, keep=keep, mpi=mpi, ucx=ucx, trace=trace,
                   trace_limit=trace_limit, chain=chain,
                   metadata=tuple(sorted(entries.items())[:meta_section.MAX_ENTRIES]),
                   auto_metadata=flag("TINYPROF_AUTO_METADATA", True),
                   sites=sites, sample=float(hz))

    def aggregator_count(self, nranks: int) -> int:
        """Number of aggregators (files) of a flush over ``nranks`` ranks."""
        return clamp_aggregators(self.aggregators, nranks)

    @property
    def selfkeys(self) -> str:
        """The metrics in ``Profiler(selfkeys=...)`` spelling."""
        return ",".join(f"{k}:{0 if c else 1}" for k, c in self.metrics)


def group_of(rank: int, nranks: int, naggs: int) -> Tuple[int, int, int]:
    """``(index, first rank, size)`` of the group of ``rank`` when ``nranks``
    ranks form ``naggs`` contiguous groups whose sizes differ by at most one."""
    small, extra = divmod(nranks, naggs)        # the first `extra` groups hold one more
    edge = extra * (small + 1)
    index = rank // (small + 1) if rank < edge else extra + (rank - edge) // small
    return index, index * small + min(index, extra), small + (index < extra)
