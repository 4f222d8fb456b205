"""A headless Chromium driven over the DevTools protocol (CDP) with ``websockets``: enough to type, click and read
a page's JavaScript state. Uses Debian's ``/usr/bin/chromium``; never downloads a browser.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

CHROMIUM = os.environ.get("DUET_CHROMIUM", "/usr/bin/chromium")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--mute-audio", "--autoplay-policy=no-user-gesture-required",
         # a fake microphone (a beeping tone) that pages may use without a permission prompt: MediaRecorder tests
         "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
         "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0")


def chromium_available() -> bool:
    return Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)


class Browser:
    """One Chromium process with a fresh profile; ``page`` is a CDP session on its first tab."""

    def __init__(self, url: str, timeout: float = 60.0):
        self._profile = tempfile.mkdtemp(prefix="duet-chromium-")
        self._proc = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={self._profile}", url],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            port = self._devtools_port(timeout)
            self.page = Page(_page_ws_url(port, timeout), timeout)
        except BaseException:
            self.close()
            raise

    def _devtools_port(self, timeout: float) -> int:
        active = Path(self._profile) / "DevToolsActivePort"  # Chromium writes its chosen port here
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self._proc.returncode}: "
                                   f"{self._proc.stderr.read().decode(errors='replace')[-2000:]}")
            if active.is_file() and active.read_text().strip():
                return int(active.read_text().split()[0])
            time.sleep(0.05)
        raise TimeoutError("chromium did not open its DevTools port")

    def close(self) -> None:
        if getattr(self, "page", None) is not None:
            self.page.close()
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)
        if self._proc.stderr is not None:
            self._proc.stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _page_ws_url(port: int, timeout: float) -> str:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=5).json()
        except httpx.HTTPError:
            targets = []
        pages = [t for t in targets if t.get("type") == "page"]
        if pages:
            return pages[0]["webSocketDebuggerUrl"]
        time.sleep(0.05)
    raise TimeoutError("chromium has no page target")


class Page:
    """Synchronous CDP calls on one page target."""

    def __init__(self, ws_url: str, timeout: float):
        from websockets.sync.client import connect

        self._ws = connect(ws_url, max_size=64 * 1024**2, open_timeout=timeout).__enter__()
        self._ids = itertools.count(1)
        self.timeout = timeout

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + self.timeout
        while True:
            reply = json.loads(self._ws.recv(timeout=max(0.01, deadline - time.monotonic())))
            if reply.get("id") == msg_id:  # events (no id) and other replies are skipped
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def eval(self, expression: str) -> Any:
        """Evaluate JavaScript (promises awaited) and return its JSON value."""
        result = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"JavaScript error: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.05)
        raise TimeoutError(f"timed out waiting for {expression}")

    def click(self, selector: str) -> None:
        """A real mouse click at the element's centre (a user gesture, as far as the page can tell), scrolled into
        the window first (a click outside it hits nothing)."""
        box = self.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                        "e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect(); "
                        "return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def type(self, selector: str, text: str) -> None:
        """Focus the element and type ``text`` as keyboard input would insert it."""
        self.eval(f"document.querySelector({json.dumps(selector)}).focus()")
        self.call("Input.insertText", text=text)

    def set_files(self, selector: str, *paths: str | Path) -> None:
        """Choose files in an ``<input type=file>`` as the file dialog would (the page gets its change event)."""
        root = self.call("DOM.getDocument")["root"]["nodeId"]
        node = self.call("DOM.querySelector", nodeId=root, selector=selector)["nodeId"]
        self.call("DOM.setFileInputFiles", nodeId=node, files=[str(Path(p).resolve()) for p in paths])

    def screenshot(self, path: str | Path) -> None:
        import base64

        Path(path).write_bytes(base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"]))

    def close(self) -> None:
        self._ws.close()
