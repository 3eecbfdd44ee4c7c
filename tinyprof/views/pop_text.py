"""``tinyprof pop``: the POP efficiencies per callpath as a tree, the worst
first among siblings, and per snapshot interval (docs/pop.md)."""
from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from ..analysis.pop import Columns, several_hosts, worst_first
from .text import UNITS, align, shown, tree_label

EFFICIENCIES = (("load_balance", "LB"), ("communication_efficiency", "comm eff"),
                ("parallel_efficiency", "par eff"))
HOSTS = (("load_balance_in", "LB in"), ("load_balance_out", "LB out"))
SPLIT = (("serialization_efficiency", "ser eff"), ("transfer_efficiency", "trf eff"))
LEGEND = ("LB = useful mean / useful max; comm eff = useful max / runtime (= ser eff x trf eff, "
          "traced); par eff = LB x comm eff; useful = time outside MPI calls (docs/pop.md)")


def basis(nranks: int) -> str:
    """What the columns are over, as the heads of ``tinyprof pop`` say it."""
    return (f"useful mean: mean over all {nranks} ranks of the run (a rank that did not run a "
            f"callpath counts 0); runtime, useful max: max over ranks; ranks: how many ran it")


def efficiency(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}"


def _unit(frame: Columns) -> Tuple[str, float]:
    biggest = max([v for v in frame["runtime"] if not math.isnan(v)], default=0.0)
    return next(((u, s) for u, s in UNITS if biggest >= s), UNITS[-1])


def _ratios(frame: Columns) -> Tuple[Tuple[str, str], ...]:
    """The efficiency columns of ``frame`` to print: the split of
    communication efficiency when traced, the nodes' when on several."""
    return EFFICIENCIES[:2] + (SPLIT if "transfer_efficiency" in frame else ()) + \
        EFFICIENCIES[2:] + (HOSTS if several_hosts(frame) else ())


def _rows(frame: Columns, order: Sequence[Tuple[str, ...]], nranks: int, scale: float,
          lead: Sequence[str] = ()) -> List[Tuple[str, ...]]:
    at = {path: i for i, path in enumerate(frame["callpath"])}
    ratios = _ratios(frame)
    out = []
    for path in order:
        r = {name: value[at[path]] for name, value in frame.items()}
        if not r["ranks"]:
            out.append((*lead, tree_label(path), f"0/{nranks}", *["-"] * (3 + len(ratios))))
            continue
        out.append((*lead, tree_label(path), f"{r['ranks']}/{nranks}",
                    *(f"{r[c] / scale:.3f}" for c in ("runtime", "useful_mean", "useful_max")),
                    *(efficiency(r[c]) for c, _ in ratios)))
    return out


def _head(frame: Columns, unit: str, lead: Sequence[str] = ()) -> Tuple[str, ...]:
    return (*lead, "callpath", "ranks", f"runtime ({unit})", "useful mean", "useful max",
            *(h for _, h in _ratios(frame)))


def table(profile: Any, frame: Columns) -> str:
    """The metrics of ``frame`` (the columns of ``Profile.pop``) as a tree."""
    unit, scale = _unit(frame)
    lines = align([_head(frame, unit), *_rows(frame, worst_first(frame), profile.nranks, scale)])
    head = (f"{shown(profile.name)}: {profile.nranks} ranks; POP efficiencies per callpath, "
            f"inclusive of the regions below it, worst parallel efficiency first among "
            f"siblings; {basis(profile.nranks)}; times in {unit}")
    return "\n".join([head, *lines, "", LEGEND])


def history(name: str, nranks: int, frame: Columns, limit: Optional[int] = None) -> str:
    """The metrics of ``frame`` (the columns of ``pop_history``) per snapshot
    interval, each as a tree."""
    unit, scale = _unit(frame)
    body: List[Tuple[str, ...]] = [_head(frame, unit, ("snapshot",))]
    for k in sorted(set(frame["snapshot"].tolist())):
        mine = frame["snapshot"] == k
        part = {name: value[mine] if isinstance(value, np.ndarray) else
                [v for v, m in zip(value, mine) if m] for name, value in frame.items()}
        body += _rows(part, worst_first(part), nranks, scale, (str(k),))
    head = (f"{shown(name)}: {nranks} ranks; POP efficiencies per interval between kept "
            f"snapshots (a row: what ran between the previous snapshot and this one); "
            f"{basis(nranks)}; times in {unit}")
    lines = align(body)
    shown_lines = lines if limit is None else lines[:limit + 1]
    more = len(lines) - len(shown_lines)
    tail = [f"({more} more rows not shown: --limit)"] if more else []
    return "\n".join([head, *shown_lines, *tail, "", LEGEND])

