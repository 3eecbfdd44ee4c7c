"""A real headless Chromium for the tests, driven over the DevTools protocol
on a pipe (``--remote-debugging-pipe``): no Selenium, no driver binary.

Network requests other than to localhost (or file:, data:, blob:) fail (the Fetch domain intercepts
every request), so a test proves that a page works offline; every request
and console error is recorded. ``find_chromium()`` gives the browser's path, or
skips the test when there is none, unless the environment variable CI is
set (then the test fails: CI installs Debian's ``chromium``, .ci/run). A test
that opens a Browser is decorated ``@needs_chromium``: it is then in the ``browser`` tier.
"""
from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from typing import Any, Dict, Iterator, List, Optional
from urllib.parse import urlsplit

import pytest

from helpers.tools import require

LOCAL = ("localhost", "127.0.0.1", "[::1]")
needs_chromium = pytest.mark.usefixtures("chromium")


def find_chromium() -> str:
    return require(shutil.which("chromium") or shutil.which("chromium-browser"), "chromium on PATH",
                   "apt-get install chromium")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port} after {timeout} s")


@contextlib.contextmanager
def serving(argv: List[str], port: int, cwd: Optional[str] = None,
            timeout: float = 240) -> Iterator[None]:
    """Run a server command until it listens on ``port``; stop its process
    group afterwards. Fails the test, with the server's output, if it never listens."""
    log = tempfile.TemporaryFile("w+")
    server = subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        try:
            wait_for_port(port, timeout)
        except TimeoutError:
            log.seek(0)
            pytest.fail(f"{' '.join(argv)} never served on {port}:\n{log.read()[-3000:]}")
        yield
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


class Browser:
    """One headless Chromium with one page (``with Browser() as b: ...``)."""

    def __init__(self, width: int = 1600, height: int = 900) -> None:
        self.profile = tempfile.mkdtemp(prefix="tinyprof-chromium-")
        to_child, self._out = os.pipe()
        self._in, from_child = os.pipe()

        def pipes() -> None:           # Chromium reads commands on fd 3, answers on fd 4
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child, from_child)]
            os.dup2(high[0], 3)        # inheritable, whatever numbers the pipes had
            os.dup2(high[1], 4)
        self.proc = subprocess.Popen(
            [find_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--hide-scrollbars", f"--window-size={width},{height}",
             f"--user-data-dir={self.profile}", "--remote-debugging-pipe", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=pipes, close_fds=False)
        os.close(to_child)
        os.close(from_child)
        self._lock = threading.Lock()
        self._next = 0
        self._replies: Dict[int, Dict[str, Any]] = {}
        self._ready = threading.Condition()
        self.requests: List[str] = []
        self.blocked: List[str] = []
        self.console: List[str] = []          # console errors and uncaught exceptions
        threading.Thread(target=self._read, daemon=True).start()
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for method in ("Page.enable", "Runtime.enable"):
            self.send(method, session=self.session)
        self.send("Fetch.enable", session=self.session, patterns=[{"urlPattern": "*"}])

    # -- protocol ---------------------------------------------------------------------
    def send(self, method: str, session: Optional[str] = None, timeout: float = 60,
             **params: Any) -> Dict[str, Any]:
        with self._lock:
            self._next += 1
            mid = self._next
            msg = {"id": mid, "method": method, "params": params}
            if session:
                msg["sessionId"] = session
            os.write(self._out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._ready:
            while mid not in self._replies:
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(f"chromium did not answer {method}")
                self._ready.wait(min(left, 0.5))
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def _read(self) -> None:
        buf = b""
        while True:
            try:
                chunk = os.read(self._in, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                self._dispatch(json.loads(raw))

    def _dispatch(self, msg: Dict[str, Any]) -> None:
        if "id" in msg:
            with self._ready:
                self._replies[msg["id"]] = msg
                self._ready.notify_all()
            return
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Fetch.requestPaused":
            url = params["request"]["url"]
            self.requests.append(url)
            parts = urlsplit(url)
            local = parts.scheme in ("data", "blob", "file") or parts.hostname in LOCAL
            if not local:
                self.blocked.append(url)
            reply = {"id": 0, "sessionId": msg["sessionId"],
                     "method": "Fetch.continueRequest" if local else "Fetch.failRequest",
                     "params": {"requestId": params["requestId"]} if local else
                     {"requestId": params["requestId"], "errorReason": "BlockedByClient"}}
            with self._lock:
                self._next += 1
                reply["id"] = self._next
                os.write(self._out, json.dumps(reply).encode() + b"\0")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.console.append(" ".join(str(a.get("value", a.get("description", "")))
                                         for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            self.console.append(details.get("exception", {}).get("description")
                                or details.get("text", "exception"))

    # -- the page ---------------------------------------------------------------------
    def open(self, url: str) -> None:
        self.send("Page.navigate", session=self.session, url=url)

    def evaluate(self, expression: str, timeout: float = 60) -> Any:
        """The value of a JavaScript expression (promises awaited)."""
        result = self.send("Runtime.evaluate", session=self.session, timeout=timeout,
                           expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression[:60]}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 60) -> Any:
        """Poll until ``expression`` is truthy; its value."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except RuntimeError:
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"still false after {timeout} s: {expression}")
            time.sleep(0.1)

    def screenshot(self, path: str) -> None:
        data = self.send("Page.captureScreenshot", session=self.session, format="png")["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (TimeoutError, RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        for fd in (self._in, self._out):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
