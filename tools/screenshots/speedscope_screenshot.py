"""The screenshot of speedscope in docs/convert.md: a ``--to pprof`` export
opened in speedscope's offline build (the npm package), in headless Chromium.

    npm install speedscope        # its build is node_modules/speedscope/dist/release
    .venv/bin/python tools/screenshots/speedscope_screenshot.py \\
        node_modules/speedscope/dist/release demo.pb.gz OUT.png
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile

# the headless Chromium driver of the browser tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "tests"))

from helpers.browser import Browser, free_port, serving


def main() -> None:
    release, profile, out = sys.argv[1:4]
    name = os.path.basename(profile)
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        site = os.path.join(tmp, "site")
        shutil.copytree(release, site)
        shutil.copy(profile, os.path.join(site, name))
        with serving([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1",
                      "--directory", site], port), Browser(1400, 330) as b:
            # speedscope loads the file named in its address (#profileURL=...)
            b.open(f"http://127.0.0.1:{port}/index.html#profileURL=http://127.0.0.1:{port}/{name}")
            b.wait_for(f"document.title.startsWith({name!r})")
            b.evaluate("[...document.querySelectorAll('div')].find(d => d.textContent.trim()"
                       " .endsWith('Left Heavy') && d.children.length === 1).click()")
            b.evaluate("new Promise(r => setTimeout(r, 1000))")
            assert b.console == [] and b.blocked == [], (b.console, b.blocked)
            b.screenshot(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
