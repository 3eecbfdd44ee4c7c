"""The screenshot of a traced profile's timeline in the Perfetto UI, as in
docs/trace.md: served offline by vizviewer, rendered in headless Chromium,
every rank expanded, one MPI call selected so that its message arrows show.

    .venv/bin/python tools/screenshots/perfetto_screenshot.py PROFILE OUT.png [--select NAME] [--rank R]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

# the headless Chromium driver of the browser tests
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, "tests"))

from test_perfetto import open_in_perfetto

import tinyprof
from tinyprof.converters import convert


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile")
    ap.add_argument("out")
    ap.add_argument("--select", default="MPI_Sendrecv", help="slice name to select")
    ap.add_argument("--rank", type=int, default=1, help="rank of the selected slice")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = convert(tinyprof.read(args.profile), "perfetto", os.path.join(tmp, "trace.json"))
        browser, viz = open_in_perfetto(path, 1600, 900)
        try:
            browser.evaluate("app.commands.runCommand('dev.perfetto.ExpandAllGroups')")
            browser.evaluate("""[...document.querySelectorAll('.pf-cookie-consent button')]
                                .filter(b => b.textContent === 'OK').forEach(b => b.click())""")
            browser.evaluate(f"""(async () => {{
                const it = (await app.trace.engine.query(
                    "select s.id as id from slice s join thread_track t on s.track_id = t.id " +
                    "join thread using (utid) where s.name = '{args.select}' " +
                    "and thread.name = 'rank {args.rank}' order by s.ts")).iter({{}});
                const ids = [];
                for (; it.valid(); it.next()) ids.push(Number(it.get('id')));
                app.trace.selection.selectSqlEvent('slice', ids[Math.floor(ids.length / 2)]);
                return ids.length; }})()""")
            browser.wait_for("new Promise(r => setTimeout(() => r(1), 1000))")
            browser.evaluate("app.commands.runCommand('dev.perfetto.ToggleDrawer')")   # the details
            browser.wait_for("new Promise(r => setTimeout(() => r(1), 1000))")
            browser.screenshot(args.out)
        finally:
            browser.close()
            viz.kill()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
