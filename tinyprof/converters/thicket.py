"""Thicket: several profiles as one ensemble, each a profile of ``th.profile``.

Each profile becomes the GraphFrame of :func:`.hatchet.to_hatchet` (the same
values per (node, rank)) with its metadata, and Thicket concatenates them on
the union of their call trees: ``th.dataframe`` is indexed by
``(node, profile, rank)``, ``th.metadata`` has one row per profile.

Thicket 2026.1's ``groupby``, ``filter_metadata`` and ``squash`` (so
``query`` unless ``squash=False``) take the index to be ``(node, profile)``
and raise on a rank level (``TypeError: object of type 'int' has no len()``,
``Profiles ... are not the same``): ``across_ranks`` reduces the ranks first,
for them.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Union

from ..analysis.values import as_profile
from .hatchet import ProfileOrPath, to_hatchet

if TYPE_CHECKING:                       # thicket is imported when a function needs it
    import thicket

REDUCTIONS = ("mean", "min", "max", "sum")
Metadata = Union[Mapping[str, Any], Sequence[Mapping[str, Any]], None]


def to_thicket(profiles: Sequence[ProfileOrPath], metadata: Metadata = None,
               statistic: str = "sum", across_ranks: Optional[str] = None) -> thicket.Thicket:
    """A ``thicket.Thicket`` of several profiles (Profiles or paths), one
    Thicket profile per tinyprof profile.

    Per (node, profile, rank), ``th.dataframe`` holds the values of
    :func:`to_hatchet` of that profile (``statistic`` as there). With
    ``across_ranks`` (``mean``, ``min``, ``max`` or ``sum``) each profile's
    ranks are reduced first, as ``gf.drop_index_levels(function=across_ranks)``
    does: the index is ``(node, profile)``, on which every Thicket operation
    works (``groupby``, ``filter_metadata`` and ``query`` with its default
    ``squash=True`` need it). ``th.metadata`` has one row per profile: the
    GraphFrame's metadata (``tinyprof.name``, ``tinyprof.created``,
    ``mpi.world.size``, ...), ``tinyprof.run``, the run's own
    ``Profile.metadata`` (``start``, ``command``, ``hostnames``, ``nranks``,
    ``nodes``, versions, the user's keys: docs/api.md), then ``metadata``: a
    dict applied to every profile, or a list of dicts, one per profile, whose
    keys add to or override those. A profile's key in
    ``th.profile_mapping`` is the path of its first file.
    Needs the ``tinyprof[thicket]`` extra.
    """
    from thicket import Thicket

    if across_ranks not in (None, *REDUCTIONS):
        raise ValueError(f"across_ranks must be one of {', '.join(REDUCTIONS)}, not {across_ranks!r}")
    if isinstance(profiles, (str, os.PathLike)):
        raise TypeError("to_thicket takes a list of profiles (or paths); for one, give [profile]")
    items = list(profiles)
    if not items:
        raise ValueError("to_thicket needs at least one profile")
    extras = _per_profile(metadata, len(items))
    parts = []
    for item, extra in zip(items, extras):
        profile = as_profile(item)
        gf = to_hatchet(profile, statistic)
        gf.metadata = {**gf.metadata, "tinyprof.run": profile.run, **profile.metadata, **extra}
        if across_ranks is not None:
            gf.drop_index_levels(function=across_ranks)
            gf.metadata["tinyprof.across_ranks"] = across_ranks
        parts.append(Thicket.thicketize_graphframe(gf, os.path.abspath(profile.files[0])))
    if len({p.profile[0] for p in parts}) < len(parts):
        raise ValueError("to_thicket: the same profile is given twice")
    if len(parts) == 1:
        return parts[0]
    # fill_perfdata=False: no NaN rows for the ranks that only another profile has
    return Thicket.concat_thickets(parts, axis="index", calltree="union", fill_perfdata=False,
                                   disable_tqdm=True)


def _per_profile(metadata: Metadata, count: int) -> List[Dict[str, Any]]:
    """``metadata`` as one dict per profile."""
    if metadata is None:
        return [{} for _ in range(count)]
    if isinstance(metadata, Mapping):
        return [dict(metadata) for _ in range(count)]
    given = [dict(m) for m in metadata]
    if len(given) != count:
        raise ValueError(f"to_thicket: {len(given)} metadata dicts for {count} profiles")
    return given
