"""The screenshots of CallFlow in docs/convert.md: ``tinyprof callflow``
serving a profile, its Super Graph and CCT in headless Chromium.

    .venv/bin/python tools/screenshots/callflow_screenshot.py PROFILE OUT-PREFIX
    (writes OUT-PREFIX-supergraph.png and OUT-PREFIX-cct.png)
"""
from __future__ import annotations

import os
import sys
import tempfile

# the headless Chromium driver of the browser tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "tests"))

from helpers.browser import Browser, free_port, serving

VIEWS = (("supergraph", "#/super_graph", "#ensemble-supergraph-overview g.callsite"),
         ("cct", "#/cct", "#cct-overview g.node.cct-node"))


def main() -> None:
    profile, prefix = sys.argv[1:3]
    port = free_port()
    tinyprof = os.path.join(os.path.dirname(sys.executable), "tinyprof")
    with tempfile.TemporaryDirectory() as tmp, \
            serving([tinyprof, "callflow", profile, "-o", os.path.join(tmp, "flow"),
                     "--host", "127.0.0.1", "--port", str(port)], port):
        for name, route, drawn in VIEWS:
            with Browser(1600, 900) as b:
                b.open(f"http://127.0.0.1:{port}/{route}")
                b.wait_for(f"document.querySelectorAll({drawn!r}).length")
                b.evaluate("new Promise(r => setTimeout(r, 1500))")   # d3's transitions
                b.screenshot(f"{prefix}-{name}.png")
            print(f"wrote {prefix}-{name}.png")


if __name__ == "__main__":
    main()
