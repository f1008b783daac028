"""Headless Chromium driven over the DevTools protocol, for the report's browser tests.

Uses ``--remote-debugging-pipe`` (JSON messages ended by NUL on file descriptors 3
and 4), so no websocket library and no TCP port are needed. Also: installing
Debian's chromium when it is missing, and decoding a PNG with zlib alone.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import queue
import shutil
import subprocess
import threading
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-extensions", "--mute-audio", "--hide-scrollbars",
)


class NoChromium(Exception):
    """Chromium is absent and cannot be installed here (no apt-get)."""


def ensure_chromium() -> Path:
    """Debian's chromium, installed with apt-get the first time (one installer at a time)."""
    if CHROMIUM.exists():
        return CHROMIUM
    apt = shutil.which("apt-get")
    if apt is None:
        raise NoChromium("chromium is not installed at /usr/bin/chromium and apt-get is not available "
                         "to install it: install Debian's `chromium` package to run the browser tests")
    with open("/tmp/suitefit-chromium-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if CHROMIUM.exists():
            return CHROMIUM
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        for cmd in ([apt, "update", "-q"], [apt, "install", "-y", "-q", "chromium"]):
            p = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if p.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")
    if not CHROMIUM.exists():
        raise RuntimeError("apt-get installed chromium but /usr/bin/chromium is still missing")
    return CHROMIUM


@dataclass
class PageLoad:
    """What one page did while it loaded: timing, console errors, requests."""

    url: str
    load_s: float  # from Page.navigate sent to the load event received
    nav_ms: float  # the page's own navigation timing: loadEventEnd
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)


class Browser:
    """One headless Chromium process and one tab, spoken to over the DevTools pipe."""

    def __init__(self, chromium: Path, profile: Path) -> None:
        to_r, to_w = os.pipe()  # we write commands, chromium reads fd 3
        from_r, from_w = os.pipe()  # chromium writes fd 4, we read
        # move the child's ends above 9 so that placing them on 3 and 4 cannot clobber each other
        hi_r, hi_w = fcntl.fcntl(to_r, fcntl.F_DUPFD_CLOEXEC, 10), fcntl.fcntl(from_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_r)
        os.close(from_w)
        args = " ".join(f"'{a}'" for a in (*FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile}"))
        self.proc = subprocess.Popen(
            ["/bin/bash", "-c", f'exec "{chromium}" {args} 3<&{hi_r} 4>&{hi_w} {hi_r}<&- {hi_w}>&-'],
            pass_fds=(hi_r, hi_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(hi_r)
        os.close(hi_w)
        self._w = os.fdopen(to_w, "wb", buffering=0)
        self._r = os.fdopen(from_r, "rb", buffering=0)
        self._q: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(f"{domain}.enable", session=True)

    def _read(self) -> None:
        buf = b""
        while True:
            chunk = self._r.read(65536)
            if not chunk:
                self._q.put(None)
                return
            buf += chunk
            while b"\0" in buf:
                msg, buf = buf.split(b"\0", 1)
                self._q.put(json.loads(msg))

    def _next(self, deadline: float) -> dict[str, Any]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("chromium did not answer in time")
        msg = self._q.get(timeout=left)
        if msg is None:
            raise RuntimeError(f"chromium closed the DevTools pipe (exit {self.proc.poll()})")
        return msg

    def call(self, method: str, *, session: bool = False, timeout: float = 30.0, **params: Any) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        self._w.write(json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            got = self._next(deadline)
            if got.get("id") == self._id:
                if "error" in got:
                    raise RuntimeError(f"{method}: {got['error']}")
                return dict(got.get("result", {}))
            self.events.append(got)

    def wait_event(self, method: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            got = self._next(deadline)
            self.events.append(got)
            if got.get("method") == method:
                return got

    def evaluate(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", session=True, expression=expression, returnByValue=True,
                        awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"page script failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def load(self, path: Path, *, width: int = 1300, height: int = 900) -> PageLoad:
        """Open a file, wait for its load event, and say what it logged and fetched."""
        self.call("Emulation.setDeviceMetricsOverride", session=True, width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", session=True, url="about:blank")
        self.wait_event("Page.loadEventFired")
        self.events.clear()
        url = path.resolve().as_uri()
        t = time.monotonic()
        self.call("Page.navigate", session=True, url=url)
        self.wait_event("Page.loadEventFired")
        load_s = time.monotonic() - t
        time.sleep(0.2)  # let late console messages and requests arrive
        self.evaluate("1")  # drains the queue up to now
        nav = self.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
        out = PageLoad(url, load_s, float(nav or 0.0))
        for e in self.events:
            m, p = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif m == "Runtime.exceptionThrown":
                out.errors.append(str(p.get("exceptionDetails", {}).get("text", "exception")))
            elif m == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.errors.append(p["entry"].get("text", ""))
            elif m == "Network.requestWillBeSent":
                out.requests.append(p.get("request", {}).get("url", ""))
        return out

    def screenshot(self, clip: dict[str, float] | None = None, full: bool = False) -> bytes:
        params: dict[str, Any] = {"format": "png", "captureBeyondViewport": True}
        if clip is not None:
            params["clip"] = {**clip, "scale": 1}
        if full:
            size = self.evaluate("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": size[1], "scale": 1}
        return base64.b64decode(self.call("Page.captureScreenshot", session=True, **params)["data"])

    def table_rows(self, table_id: str) -> list[list[str]]:
        """The visible text of each body row of ``<table id=table_id>``, cell by cell."""
        return list(self.evaluate(
            f"Array.from(document.querySelectorAll({json.dumps('#' + table_id + ' tbody tr')}))"
            ".map(r => Array.from(r.cells).map(c => c.innerText.trim()))"
        ))

    def text(self, selector: str) -> str:
        """What a person sees of an element (``innerText``: hidden parts left out)."""
        return str(self.evaluate(f"document.querySelector({json.dumps(selector)}).innerText"))

    def element_clip(self, selector: str, pad: float = 8.0) -> dict[str, float]:
        """The page rectangle of an element, padded, for ``screenshot(clip=...)``."""
        r = self.evaluate(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                          ".getBoundingClientRect(); return [r.x + scrollX, r.y + scrollY, r.width, r.height]; })()")
        return {"x": max(0.0, r[0] - pad), "y": max(0.0, r[1] - pad), "width": r[2] + 2 * pad,
                "height": r[3] + 2 * pad}

    def close(self) -> None:
        with suppress(RuntimeError, TimeoutError, OSError):
            self.call("Browser.close", timeout=5)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._w.close()


@contextmanager
def browser(profile: Path) -> Iterator[Browser]:
    b = Browser(ensure_chromium(), profile)
    try:
        yield b
    finally:
        b.close()


def png_colours(png: bytes) -> tuple[int, int, set[tuple[int, ...]]]:
    """Width, height and the set of distinct pixel colours of an 8-bit RGB(A) PNG."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = depth = ctype = 0
    while pos < len(png):
        n = int.from_bytes(png[pos: pos + 4], "big")
        kind = png[pos + 4: pos + 8]
        data = png[pos + 8: pos + 8 + n]
        if kind == b"IHDR":
            width, height = int.from_bytes(data[:4], "big"), int.from_bytes(data[4:8], "big")
            depth, ctype = data[8], data[9]
        elif kind == b"IDAT":
            idat += data
        pos += 12 + n
    assert depth == 8 and ctype in (2, 6), f"unsupported PNG (depth {depth}, colour type {ctype})"
    bpp = 3 if ctype == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    prev = bytearray(stride)
    colours: set[tuple[int, ...]] = set()
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1: (y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 0xFF
        elif f == 2:
            for i in range(stride):
                line[i] = (line[i] + prev[i]) & 0xFF
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b = prev[i]
                c = prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        colours.update(tuple(line[i: i + 3]) for i in range(0, stride, bpp))
        prev = line
    return width, height, colours
