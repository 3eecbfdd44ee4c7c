"""What CallFlow 1.3.0 (its last release) needs to show a tinyprof run.

Run as a script by the Python of CallFlow's own environment (see
``callflow.environment``): ``python _callflow_fixes.py DIR [--process-only]
[--host H] [--port P]`` applies the fixes, processes ``DIR`` with CallFlow's
command line, then serves its app. It imports nothing of tinyprof.

Each fix patches CallFlow, hatchet or networkx in this process only: the
installed packages stay as they are. Line numbers are CallFlow 1.3.0's.
Its environment has pandas < 2, under which CallFlow's own ``groupby().mean()``
calls work (docs/convert.md); these are the breaks that remain there.
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys
import types
from typing import Any, Dict, List, Tuple


def main() -> None:
    parser = argparse.ArgumentParser(description="CallFlow 1.3.0 with the fixes tinyprof needs")
    parser.add_argument("directory")
    parser.add_argument("--process-only", action="store_true")
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    args = parser.parse_args()
    apply()
    from server import main as app  # CallFlow's command line lives in package "server"

    if args.host is not None:
        app.CALLFLOW_APP_HOST = args.host
    if args.port is not None:
        app.CALLFLOW_APP_PORT = args.port
    argv = ["callflow", "--data_path", args.directory, "--profile_format", "caliper_json"]
    _main(app, argv + ["--process", "--reset"])
    if not args.process_only:
        _main(app, argv)


def _main(app, argv: List[str]) -> None:
    sys.argv = argv                     # CallFlow parses sys.argv itself
    app.main()


def apply() -> None:
    """Apply every fix; call before ``from server import main``. Idempotent."""
    from callflow.layout.sankey import SankeyLayout
    if getattr(SankeyLayout, "_tinyprof_fixed", False):
        return
    SankeyLayout._tinyprof_fixed = True
    _node_to_frame()
    _supergraph_from_short_paths(SankeyLayout)
    _links_not_edges()
    _api_at_own_origin()


def _node_to_frame() -> None:
    """callflow/utils/sanitizer.py: ``Sanitizer.from_htframe`` asserts a
    hatchet Frame, but hatchet >= 1.3's ``Node.paths()`` yields Nodes, so
    ``callflow --process`` dies on every input: unwrap a Node first."""
    from callflow.utils.sanitizer import Sanitizer
    from hatchet.node import Node

    check = Sanitizer.from_htframe

    def from_htframe(frame):
        return check(frame.frame if isinstance(frame, Node) else frame)
    Sanitizer.from_htframe = staticmethod(from_htframe)


def _supergraph_from_short_paths(layout) -> None:
    """callflow/layout/sankey.py:365 builds the Super Graph only from group
    paths of more than two modules (``if len(path) > 2``): a call site right
    under the root (group path [root, callee]) is dropped, so a two-level
    tree, like the demo's, gives an empty Super Graph. The same method with
    ``>= 2`` (it also tests ``has_node`` on the name, not the dict, :379)."""
    import networkx as nx

    def _create_nxg_from_paths(self):
        nxg = nx.DiGraph()
        unique_paths: Dict[Tuple[Any, ...], Any] = {}   # group path -> a call site with it
        for callsite in self.sg.nxg.nodes():
            cs_idx = self.sg.get_idx(callsite, "callsite")
            if cs_idx in self.gp_dict:
                unique_paths.setdefault(tuple(self.gp_dict[cs_idx]), cs_idx)
        flow: Dict[Tuple[Any, Any], Dict[str, Any]] = {}     # edge -> its attributes
        for path, cs_idx in unique_paths.items():
            if len(path) < 2:
                continue
            path = self._break_cycles_in_paths(cs_idx, path)
            for src, tgt in zip(path, path[1:]):
                edge = (self.sg.get_name(src.get("id"), src.get("type")),
                        self.sg.get_name(tgt.get("id"), tgt.get("type")))
                for name, node in zip(edge, (src, tgt)):
                    if not nxg.has_node(name):
                        nxg.add_node(name, attr_dict=self.sg_node_construct(node))
                attrs = flow.setdefault(edge, {"edge_type": "caller", "weight": 0})
                attrs["weight"] += self.sg.get_runtime(tgt, self.time_inc)
                if not nxg.has_edge(*edge) and attrs["weight"] > 0:
                    nxg.add_edge(*edge, attr_dict=attrs)
        return nxg
    layout._create_nxg_from_paths = _create_nxg_from_paths


def _links_not_edges() -> None:
    """server/provider_api.py:139,147,167 send ``node_link_data(nxg)``;
    networkx >= 3.6 names the edge list "edges", and the frontend reads
    ``data.links``: the CCT and the Super Graph stay blank. Ask for "links"."""
    from networkx.readwrite import json_graph
    from server import provider_api

    if "edges" not in inspect.signature(json_graph.node_link_data).parameters:
        return

    def node_link_data(graph, **kwargs):
        kwargs.setdefault("edges", "links")
        return json_graph.node_link_data(graph, **kwargs)
    provider_api.json_graph = types.SimpleNamespace(node_link_data=node_link_data,
                                                    tree_data=json_graph.tree_data)


def _api_at_own_origin() -> None:
    """The built frontend (callflow/app/dist/js/app*.js) sends every request
    to a hard-coded ``http://localhost:5000/``: with any other port or host
    the page loads and shows nothing. Serve app*.js with a relative address
    (the page is always at ``/``, views are hash routes), so the API is the
    page's own origin."""
    from server import provider_api

    app = provider_api.app
    static = app.view_functions["static"]

    def static_file(**kwargs):                  # Flask calls it with filename=...
        name = kwargs["filename"]
        path = os.path.join(app.static_folder, name)
        if name.startswith("js/app") and name.endswith(".js") and os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                text = f.read().replace('"http://localhost:5000/"', '""')
            return app.response_class(text, mimetype="text/javascript",
                                      headers={"Cache-Control": "no-cache"})
        return static(**kwargs)
    app.view_functions["static"] = static_file


if __name__ == "__main__":
    main()
