"""File size and load time of a profile in tinyprof's format and in the
formats a user would otherwise keep it in.

Every format holds every recorded value (rank, execution, iteration) of the
same synthetic profile: 200 callpaths, 100 iterations each, 19 of them
non-common (odd ranks only). The tinyprof files are written through the real
writer (``encoding.encode_rank_field`` / ``encode_file``, one file per 16
ranks as the flush's default); the others are converted from the profile
read back:

- tinyprof: load = ``tinyprof.read`` + ``tinyprof.to_hatchet`` (a GraphFrame);
- standard CSV (paper Fig. 3(a), ``tinyprof-convert --to csv``): ``pandas.read_csv``;
- Caliper json-split, one row per value: hatchet's ``GraphFrame.from_caliper``
  (``node_ordering=False``: llnl-hatchet's default wants a "Node order" column);
- hatchet's own JSON: ``GraphFrame.to_json`` / ``from_json`` of a GraphFrame
  indexed by (node, rank, execution, iteration).

Load times are measured side by side in one process (imports done, formats
interleaved, ``--repeat`` times; from_caliper and from_json once from 1024
ranks on): median seconds. The same process times the parsing alone, in
values per second: ``reader.parse_file`` over every file with the C parser
and with the pure-Python reference, and ``tinyprof.read`` on one thread and
on two. Peak memory comes from one load per format in a fresh process; for
tinyprof also the growth of the process over its size before loading, as a
multiple of the values' size in int64. hatchet JSON is always loaded in a
fresh process (as when it needed another hatchet than the installed one). Competitor
formats are capped in size (``--cap-*``) to keep within this machine's memory
and the time budget.

    python benchmarks/formats.py                     # 16 64 256 1024 4096 ranks
    python benchmarks/formats.py --ranks 16 64       # a quick run
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional

import numpy as np

NCALLPATHS, ITERATIONS, NPHASES = 200, 100, 10
RANKS_PER_FILE = 16
FORMATS = ("tinyprof", "csv", "caliper", "hatchet-json")


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
    from tinyprof.format import encoding, output_dir
    from tinyprof.runtime import assemble

    paths = _tree()
    names, parents, ids = assemble.name_table(paths)
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
            fields.append([encoding.encode_rank_field(times[i], execs) if ran[i] else b""
                           for i in range(len(paths))])
        header = encoding.Header(name="bench", nranks=nranks, first_rank=first, rank_count=last - first,
                                file_index=index, file_count=nfiles, executions=[1] * (last - first),
                                created="2026-01-01T00:00:00Z")
        data = encoding.encode_file(header, names, parents, ids, [1] * len(paths), [b""] * len(paths),
                                   fields)
        output_dir.write_atomic(os.path.join(outdir, output_dir.file_name("bench", index, nfiles)), data)


# -- the other formats, from the profile read back ------------------------------

def write_caliper(profile, path: str) -> None:
    """json-split with one row per value: path, rank, execution, iteration, inclusive time."""
    from tinyprof.analysis.values import occurrences
    from tinyprof.converters import _jsonsplit

    occ = occurrences(profile)
    _jsonsplit.write(path, profile.callpaths, occ.callpath,
                     [(_jsonsplit.RANK, occ.rank), ("execution", occ.execution),
                      ("iteration", occ.iteration), (_jsonsplit.TIME_INC, occ.time_ns / 1e9)], {})


def write_hatchet_json(profile, path: str) -> None:
    """hatchet's ``to_json`` of a GraphFrame holding every value."""
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

def loaders() -> Dict[str, Callable[[str], object]]:
    """Per format, what loads a file into memory for analysis (a DataFrame)."""
    import hatchet
    import pandas as pd

    import tinyprof

    read, to_hatchet = tinyprof.read, tinyprof.to_hatchet     # lazy names: imported here
    return {"tinyprof": lambda path: to_hatchet(read(path)).dataframe,
            "csv": pd.read_csv,
            "caliper": lambda path: hatchet.GraphFrame.from_caliper(path, node_ordering=False).dataframe,
            "hatchet-json": lambda path: hatchet.GraphFrame.from_json(_text(path)).dataframe}


def load(fmt: str, path: str) -> Dict[str, float]:
    """One load in this (fresh) process: seconds, the process's peak memory, and
    its growth over its size before loading. Imports happen before the clock."""
    loader = loaders()[fmt]
    before = _rss()
    start = time.perf_counter()
    assert len(loader(path))
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"s": seconds, "rss": peak, "growth": peak - before}


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def side_by_side(paths: Dict[str, str], repeat: int, once: List[str]) -> Dict[str, float]:
    """Median seconds of each load in ``paths``, interleaved in this process
    (the formats in ``once`` load only in the first round), and of parsing
    the tinyprof files: C parser, reference parser, read on 1 and 2 threads."""
    import tinyprof
    from tinyprof.format import reader

    files = [os.path.join(paths["tinyprof"], f) for f in sorted(os.listdir(paths["tinyprof"]))]
    cases = {fmt: functools.partial(loader, paths[fmt]) for fmt, loader in loaders().items()
             if fmt in paths}
    cases.update({
        "parse_c": lambda: [reader.parse_file(f, "c") for f in files],
        "parse_python": lambda: [reader.parse_file(f, "python") for f in files],
        "read_1": lambda: tinyprof.read(paths["tinyprof"], threads=1),
        "read_2": lambda: tinyprof.read(paths["tinyprof"], threads=2)})
    times: Dict[str, List[float]] = {name: [] for name in cases}
    for round_ in range(repeat):
        for name, case in cases.items():
            if round_ and name in once:
                continue
            start = time.perf_counter()
            case()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def _text(path: str) -> str:
    with open(path) as f:
        return f.read()


def _worker(args: List[str]) -> str:
    done = subprocess.run([sys.executable, os.path.abspath(__file__), *args], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout.strip()


# -- the run --------------------------------------------------------------------

def _size(path: str) -> int:
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path))
    return os.path.getsize(path)


def run(ranks: List[int], repeat: int, caps: Dict[str, int], workdir: str) -> List[dict]:
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
            _worker(["--write", fmt, paths["tinyprof"], paths[fmt]])
            print(f"{nranks} ranks: {fmt} written after {time.perf_counter() - start:.0f} s",
                  file=sys.stderr, flush=True)
        built = time.perf_counter() - start
        print(f"{nranks} ranks: loading side by side", file=sys.stderr, flush=True)
        side_paths = {f: paths[f] for f in todo if f != "hatchet-json"}
        slow = [f for f in ("caliper", "hatchet-json") if nranks >= 1024]
        times = json.loads(_worker(["--side", json.dumps(side_paths), str(repeat), ",".join(slow)]))
        loads: Dict[str, List[dict]] = {}
        for fmt in todo:                   # memory; hatchet JSON's time too
            reps = repeat if fmt == "hatchet-json" and fmt not in slow else 1
            loads[fmt] = [json.loads(_worker(["--load", fmt, paths[fmt]])) for _ in range(reps)]
            print(f"{nranks} ranks: {fmt} loaded in {loads[fmt][-1]['s']:.1f} s in a fresh process",
                  file=sys.stderr, flush=True)
        values = value_count(nranks)
        row = {"ranks": nranks, "values": values, "build_s": round(built, 1), "repeat": repeat,
               "parse": {k[len("parse_"):]: values / v for k, v in times.items() if k.startswith("parse_")},
               "read_threads": {k[len("read_"):]: v for k, v in times.items() if k.startswith("read_")},
               "growth_per_int64": loads["tinyprof"][0]["growth"] / (8 * values)}
        for fmt in FORMATS:
            row[fmt] = ({"bytes": _size(paths[fmt]),
                         "load_s": times.get(fmt) or statistics.median(x["s"] for x in loads[fmt]),
                         "peak_rss": max(x["rss"] for x in loads[fmt])} if fmt in todo else None)
        results.append(row)
        print(json.dumps(row), flush=True)
        shutil.rmtree(base)
    return results


def _size_ratio(r: dict) -> Optional[float]:
    others = [r[f]["bytes"] for f in FORMATS[1:] if r[f]]
    return min(others) / r["tinyprof"]["bytes"] if others else None


def _ratio(r: dict, top: str, bottom: str) -> Optional[float]:
    return r[top]["load_s"] / r[bottom]["load_s"] if r[top] and r[bottom] else None


def table(results: List[dict]) -> str:
    """The markdown tables of docs/performance.md: size, load time, load memory."""
    out = []
    for title, cell, ratio_name, ratio in [
            ("File size", lambda x: f"{x['bytes'] / 1e6:.1f} MB", "smallest other / tinyprof",
             _size_ratio),
            ("Load time, median", lambda x: f"{x['load_s']:.3f} s",
             "tinyprof / read_csv | from_caliper / tinyprof",
             lambda r: (_ratio(r, "tinyprof", "csv"), _ratio(r, "caliper", "tinyprof"))),
            ("Peak memory of the loading process", lambda x: f"{x['peak_rss'] / 2**30:.2f} GiB",
             None, None)]:
        nratios = ratio_name.count("|") + 1 if ratio_name else 0
        out += [f"{title}:", "",
                "| ranks | values | tinyprof | standard CSV | Caliper json-split | hatchet JSON |"
                + (f" {ratio_name} |" if ratio else ""),
                "| ---: " * (6 + nratios) + "|"]
        for r in results:
            cells = [cell(r[f]) if r[f] else "skipped" for f in FORMATS]
            if ratio:
                values = ratio(r) if nratios > 1 else (ratio(r),)
                cells += ["-" if v is None else (f"{v:.2f}x" if v < 10 else f"{v:.0f}x") for v in values]
            out.append(f"| {r['ranks']} | {r['values']:,} | " + " | ".join(cells) + " |")
        out.append("")
    out += ["Parsing (values per second, all files) and reading on 1 and 2 threads;"
            " tinyprof's memory growth while loading over the values' size in int64:", "",
            "| ranks | files | C parser | reference parser | read, 1 thread | read, 2 threads"
            " | speed-up | memory growth / values in int64 |",
            "| ---: " * 8 + "|"]
    for r in results:
        threads = r["read_threads"]
        out.append(f"| {r['ranks']} | {max(1, r['ranks'] // RANKS_PER_FILE)} "
                   f"| {r['parse']['c'] / 1e6:.0f} M/s | {r['parse']['python'] / 1e6:.1f} M/s "
                   f"| {threads['1']:.3f} s | {threads['2']:.3f} s | {threads['1'] / threads['2']:.2f}x "
                   f"| {r['growth_per_int64']:.2f}x |")
    return "\n".join(out + [""])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[16, 64, 256, 1024, 4096])
    parser.add_argument("--repeat", type=int, default=5,
                        help="rounds of side-by-side loads (median); from_caliper once from 1024 ranks")
    parser.add_argument("--cap-csv", type=int, default=1024, help="largest rank count written as CSV")
    parser.add_argument("--cap-caliper", type=int, default=1024, help="... as Caliper json-split")
    parser.add_argument("--cap-hatchet-json", type=int, default=256, help="... as hatchet JSON")
    parser.add_argument("--json", help="also write the results to this file")
    # internal: the worker processes
    parser.add_argument("--write", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--load", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--side", nargs=3, help=argparse.SUPPRESS)
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
    if args.side:
        paths, repeat, once = args.side
        print(json.dumps(side_by_side(json.loads(paths), int(repeat), once.split(","))))
        return
    caps = {"tinyprof": max(args.ranks), "csv": args.cap_csv, "caliper": args.cap_caliper,
            "hatchet-json": args.cap_hatchet_json}
    with tempfile.TemporaryDirectory(prefix="tinyprof-formats-") as workdir:
        results = run(args.ranks, args.repeat, caps, workdir)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    print(table(results))


if __name__ == "__main__":
    main()
