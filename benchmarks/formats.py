"""File size and load time of a profile in tinyprof's format and in the
formats a user would otherwise keep it in.

Every format holds every recorded value (rank, execution, iteration) of the
same synthetic profile: 200 callpaths, 100 iterations each, 19 of them
non-common (odd ranks only). The tinyprof files are written through the real
writer (``_format.encode_rank_field`` / ``encode_file``, one file per 16
ranks as the flush's default); the others are converted from the profile
read back:

- tinyprof: load = ``tinyprof.read`` + ``tinyprof.to_hatchet`` (a GraphFrame);
- standard CSV (paper Fig. 3(a), ``tinyprof-convert --to csv``): ``pandas.read_csv``;
- Caliper json-split, one row per value: hatchet's ``GraphFrame.from_caliper``;
- hatchet's own JSON: ``GraphFrame.to_json`` / ``from_json`` of a GraphFrame
  indexed by (node, rank, execution, iteration). Only the ``llnl-hatchet``
  distribution has them (``hatchet`` 1.4.1, which CallFlow needs, does not),
  so this one runs on an llnl-hatchet wheel unpacked into ``--cache``.

Each load runs in a fresh process, formats interleaved, ``--repeat`` times
(once at 1024 ranks and more); the median is reported. Competitor formats
are capped in size (``--cap-*``) to keep within this machine's memory and
the time budget.

    python benchmarks/formats.py                     # 16 64 256 1024 4096 ranks
    python benchmarks/formats.py --ranks 16 64       # a quick run
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from typing import Dict, List, Optional

import numpy as np

NCALLPATHS, ITERATIONS, NPHASES = 200, 100, 10
RANKS_PER_FILE = 16
FORMATS = ("tinyprof", "csv", "caliper", "hatchet-json")
LLNL_HATCHET = "llnl-hatchet==2026.2.0"


# -- the synthetic profile ------------------------------------------------------

def _tree() -> List[tuple]:
    """main, NPHASES phases under it, the remaining callpaths as kernels under the phases."""
    phases = [("main", f"phase{p}") for p in range(NPHASES)]
    kernels = [phases[k % NPHASES] + (f"kernel{k}",) for k in range(NCALLPATHS - 1 - NPHASES)]
    return [("main",)] + [c for p in phases for c in [p] + [k for k in kernels if k[:2] == p]]


def _noncommon(paths: List[tuple]) -> np.ndarray:
    """Every tenth callpath runs on odd ranks only (a kernel, so its tree stays whole)."""
    return np.array([len(p) == 3 and i % 10 == 0 for i, p in enumerate(paths)])


def value_count(nranks: int) -> int:
    """Values recorded by ``nranks`` ranks: even ranks skip the non-common callpaths."""
    skipped = int(_noncommon(_tree()).sum()) * ((nranks + 1) // 2)
    return (nranks * NCALLPATHS - skipped) * ITERATIONS


def _rank_times(rng: np.random.Generator, paths: List[tuple], parent: np.ndarray,
                ran: np.ndarray) -> np.ndarray:
    """(callpath, iteration) int64 ns: log-normal own times (median 22 us), and a
    parent's time includes its children's."""
    times = rng.lognormal(10, 1, (len(paths), ITERATIONS)).astype(np.int64) + 1
    times[~ran] = 0
    depth = np.array([len(p) for p in paths])
    for d in range(depth.max(), 1, -1):                 # deepest children first
        np.add.at(times, parent[depth == d], times[depth == d])
    return times


def write_tinyprof(outdir: str, nranks: int, seed: int = 1) -> None:
    """The profile of ``nranks`` ranks, one file per RANKS_PER_FILE ranks."""
    from tinyprof import _assemble, _format, _layout

    paths = _tree()
    names, parents, ids = _assemble.name_table(paths)
    noncommon = _noncommon(paths)
    parent = np.array([paths.index(p[:-1]) if len(p) > 1 else -1 for p in paths])
    rng = np.random.default_rng(seed)
    nfiles = max(1, nranks // RANKS_PER_FILE)
    execs = np.array([0, 0])                            # one execution, from value 0
    os.makedirs(outdir, exist_ok=True)
    for index in range(nfiles):
        first, last = index * nranks // nfiles, (index + 1) * nranks // nfiles
        fields = []
        for rank in range(first, last):
            ran = ~noncommon | (rank % 2 == 1)
            times = _rank_times(rng, paths, parent, ran)
            fields.append([_format.encode_rank_field(times[i], execs) if ran[i] else b""
                           for i in range(len(paths))])
        header = _format.Header(name="bench", nranks=nranks, first_rank=first, rank_count=last - first,
                                file_index=index, file_count=nfiles, executions=[1] * (last - first),
                                created="2026-01-01T00:00:00Z")
        data = _format.encode_file(header, names, parents, ids, [1] * len(paths), [b""] * len(paths),
                                   fields)
        _layout.write_atomic(os.path.join(outdir, _layout.file_name("bench", index, nfiles)), data)


# -- the other formats, from the profile read back ------------------------------

def write_caliper(profile, path: str) -> None:
    """json-split with one row per value: path, rank, execution, iteration, inclusive time."""
    from tinyprof.converters import _jsonsplit
    from tinyprof.converters._values import occurrences

    occ = occurrences(profile)
    _jsonsplit.write(path, profile.callpaths, occ.callpath,
                     [(_jsonsplit.RANK, occ.rank), ("execution", occ.execution),
                      ("iteration", occ.iteration), (_jsonsplit.TIME_INC, occ.time_ns / 1e9)], {})


def write_hatchet_json(profile, path: str) -> None:
    """hatchet's ``to_json`` of a GraphFrame holding every value (runs under llnl-hatchet)."""
    import hatchet

    from tinyprof.converters.dataframe import to_dataframe
    from tinyprof.converters.hatchet import build_graph

    graph, nodes = build_graph(profile.callpaths)
    frame = to_dataframe(profile)
    frame["node"] = np.array(nodes, dtype=object)[frame["callpath_id"].to_numpy()]
    frame = frame.rename(columns={"time": "time (inc)"})
    frame = frame.set_index(["node", "rank", "execution", "iteration"])[["time (inc)"]]
    with open(path, "w") as f:
        f.write(hatchet.GraphFrame(graph, frame, [], ["time (inc)"]).to_json())


# -- one load, in a fresh process -----------------------------------------------

def load(fmt: str, path: str) -> Dict[str, float]:
    """Seconds to load ``path`` (format ``fmt``) into memory for analysis, and the
    peak memory of this process. Imports happen before the clock starts."""
    import hatchet
    import pandas as pd

    import tinyprof

    loaders = {"tinyprof": lambda: tinyprof.to_hatchet(tinyprof.read(path)).dataframe,
               "csv": lambda: pd.read_csv(path),
               "caliper": lambda: hatchet.GraphFrame.from_caliper(path).dataframe,
               "hatchet-json": lambda: hatchet.GraphFrame.from_json(_text(path)).dataframe}
    start = time.perf_counter()
    assert len(loaders[fmt]())
    seconds = time.perf_counter() - start
    return {"s": seconds, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}


def _text(path: str) -> str:
    with open(path) as f:
        return f.read()


def _worker(args: List[str], env: Optional[Dict[str, str]] = None) -> str:
    done = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True,
                          text=True, env=dict(os.environ, **(env or {})))
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip()


def _llnl_env(cache: str) -> Dict[str, str]:
    """PYTHONPATH putting an unpacked llnl-hatchet wheel before the installed hatchet."""
    target = os.path.join(cache, "llnl-hatchet")
    if not os.path.isdir(os.path.join(target, "hatchet")):
        wheels = os.path.join(cache, "wheels")
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", wheels,
                        LLNL_HATCHET], check=True)
        with zipfile.ZipFile(glob.glob(os.path.join(wheels, "llnl_hatchet-*.whl"))[0]) as z:
            z.extractall(target)
    return {"PYTHONPATH": os.pathsep.join(filter(None, [target, os.environ.get("PYTHONPATH")]))}


# -- the run --------------------------------------------------------------------

def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return os.path.getsize(path)


def run(ranks: List[int], repeat: int, caps: Dict[str, int], cache: str, workdir: str) -> List[dict]:
    llnl = _llnl_env(cache) if any(n <= caps["hatchet-json"] for n in ranks) else {}
    results = []
    for nranks in ranks:
        base = os.path.join(workdir, str(nranks))
        paths = {"tinyprof": os.path.join(base, "profile"), "csv": os.path.join(base, "profile.csv"),
                 "caliper": os.path.join(base, "caliper.json"),
                 "hatchet-json": os.path.join(base, "hatchet.json")}
        todo = [f for f in FORMATS if nranks <= caps[f]]
        start = time.perf_counter()
        _worker(["--write", "tinyprof", str(nranks), paths["tinyprof"]])
        for fmt in todo[1:]:
            _worker(["--write", fmt, paths["tinyprof"], paths[fmt]], llnl if fmt == "hatchet-json" else None)
            print(f"{nranks} ranks: {fmt} written after {time.perf_counter() - start:.0f} s",
                  file=sys.stderr, flush=True)
        built = time.perf_counter() - start
        loads: Dict[str, List[dict]] = {f: [] for f in todo}
        reps = repeat if nranks < 1024 else 1
        for _ in range(reps):
            for fmt in todo:
                loads[fmt].append(json.loads(_worker(["--load", fmt, paths[fmt]],
                                                     llnl if fmt == "hatchet-json" else None)))
                print(f"{nranks} ranks: {fmt} loaded in {loads[fmt][-1]['s']:.1f} s",
                      file=sys.stderr, flush=True)
        row = {"ranks": nranks, "values": value_count(nranks), "build_s": round(built, 1), "repeat": reps}
        for fmt in FORMATS:
            row[fmt] = ({"bytes": _size(paths[fmt]),
                         "load_s": statistics.median(x["s"] for x in loads[fmt]),
                         "peak_rss": max(x["rss"] for x in loads[fmt])} if fmt in todo else None)
        results.append(row)
        print(json.dumps(row), flush=True)
        shutil.rmtree(base)
    return results


def _size_ratio(r: dict) -> Optional[float]:
    others = [r[f]["bytes"] for f in FORMATS[1:] if r[f]]
    return min(others) / r["tinyprof"]["bytes"] if others else None


def _load_ratio(r: dict) -> Optional[float]:
    return r["caliper"]["load_s"] / r["tinyprof"]["load_s"] if r["caliper"] else None


def table(results: List[dict]) -> str:
    """The markdown tables of docs/performance.md: size, load time, load memory."""
    out = []
    for title, cell, ratio_name, ratio in [
            ("File size", lambda x: f"{x['bytes'] / 1e6:.1f} MB", "smallest other / tinyprof",
             _size_ratio),
            ("Load time, median", lambda x: f"{x['load_s']:.2f} s", "from_caliper / tinyprof",
             _load_ratio),
            ("Peak memory of the loading process", lambda x: f"{x['peak_rss'] / 2**30:.2f} GiB",
             None, None)]:
        out += [f"{title}:", "",
                "| ranks | values | tinyprof | standard CSV | Caliper json-split | hatchet JSON |"
                + (f" {ratio_name} |" if ratio else ""),
                "| ---: " * (6 + bool(ratio)) + "|"]
        for r in results:
            cells = [cell(r[f]) if r[f] else "skipped" for f in FORMATS]
            if ratio:
                value = ratio(r)
                cells.append("-" if value is None else f"{value:.1f}x")
            out.append(f"| {r['ranks']} | {r['values']:,} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[16, 64, 256, 1024, 4096])
    parser.add_argument("--repeat", type=int, default=3, help="loads per format below 1024 ranks (median)")
    parser.add_argument("--cap-csv", type=int, default=1024, help="largest rank count written as CSV")
    parser.add_argument("--cap-caliper", type=int, default=1024, help="... as Caliper json-split")
    parser.add_argument("--cap-hatchet-json", type=int, default=256, help="... as hatchet JSON")
    parser.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "tinyprof-bench-cache"),
                        help="where the llnl-hatchet wheel is downloaded and unpacked")
    parser.add_argument("--json", help="also write the results to this file")
    # internal: the worker processes
    parser.add_argument("--write", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--load", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.write:
        fmt, source, out = args.write
        if fmt == "tinyprof":
            write_tinyprof(out, int(source))
            return
        import tinyprof
        profile = tinyprof.read(source)
        if fmt == "csv":
            from tinyprof.converters import csv
            csv.write(profile, out)
        else:
            {"caliper": write_caliper, "hatchet-json": write_hatchet_json}[fmt](profile, out)
        return
    if args.load:
        print(json.dumps(load(*args.load)))
        return
    caps = {"tinyprof": max(args.ranks), "csv": args.cap_csv, "caliper": args.cap_caliper,
            "hatchet-json": args.cap_hatchet_json}
    with tempfile.TemporaryDirectory(prefix="tinyprof-formats-") as workdir:
        results = run(args.ranks, args.repeat, caps, args.cache, workdir)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(table(results))


if __name__ == "__main__":
    main()
