"""The screenshots of the demo's report in docs/guide.md: the report of a
profile rendered in headless Chromium, the page's top (call tree, selected
callpath) and its whole length.

    .venv/bin/python tools/screenshots/report_screenshot.py PROFILE OUT-PREFIX
    (writes OUT-PREFIX-top.png and OUT-PREFIX-full.png)
"""
from __future__ import annotations

import os
import sys
import tempfile

# the headless Chromium driver of the browser tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "tests"))

from _browser import Browser

from tinyprof.views import report_page


def main() -> None:
    profile, prefix = sys.argv[1:3]
    with tempfile.TemporaryDirectory() as tmp:
        page = report_page.write(profile, os.path.join(tmp, "report.html"))
        for name, height in (("top", 1000), ("full", 3000)):
            with Browser(1400, height) as b:
                b.open(f"file://{page}")
                b.wait_for("document.body && document.body.dataset.ready === '1'")
                b.evaluate("new Promise(r => setTimeout(r, 800))")    # plotly's transitions
                b.screenshot(f"{prefix}-{name}.png")
            print(f"wrote {prefix}-{name}.png")


if __name__ == "__main__":
    main()
