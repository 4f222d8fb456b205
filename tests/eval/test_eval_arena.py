"""The listening arena: anonymous pairs and judgments over HTTP, and the real page in headless Chromium."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from duet.errors import DuetError
from duet.eval.arena import Arena, create_app, load_systems
from duet.eval.bradley_terry import fit_arena, judgments_from_records, read_judgments
from duet.eval.run import RunConfig, run_eval
from duet.eval.scoring import ScoreConfig
from duet.eval.synth import Synthesis, load_synthesizer

SR = 16_000
CHROMIUM = "/usr/bin/chromium"


class Hum:
    """A 'system' that hums at its own pitch: enough to tell two systems apart by ear, no model needed."""

    reconstructs_reference = False
    batch_size = 4

    def __init__(self, name, freq):
        self.name, self.freq = name, freq

    def synthesize(self, items):
        t = np.arange(SR // 2) / SR
        return [Synthesis((0.2 * np.sin(2 * np.pi * self.freq * t)).astype(np.float32), SR) for _ in items]


@pytest.fixture
def runs(tmp_path):
    d = tmp_path / "set"
    d.mkdir()
    lines = []
    for i in range(3):
        sf.write(str(d / f"g{i}.wav"), np.zeros(SR // 4, dtype=np.float32) + 0.01, SR)
        lines.append(f"u{i}|||sentence number {i}|g{i}.wav")
    (d / "meta.lst").write_text("\n".join(lines) + "\n")
    out = []
    for name, synth in (("gt", load_synthesizer("ground-truth")), ("hum", Hum("hum-220", 220.0)),
                        ("hum2", Hum("hum-440", 440.0))):
        config = RunConfig(model=name, test_set=d, out_dir=tmp_path / name, score=ScoreConfig(metrics=()),
                           progress=False, report=False)
        run_eval(config, synth)
        out.append(tmp_path / name)
    (tmp_path / "hum2" / "wavs" / "u2.wav").unlink()  # u2: only two systems have it
    return out


def test_pairs_are_anonymous_and_judged_once(runs, tmp_path):
    from fastapi.testclient import TestClient

    systems, texts = load_systems(runs)
    assert [s.name for s in systems] == ["ground-truth", "hum-220", "hum-440"]
    arena = Arena(systems, texts, tmp_path / "j" / "judgments.jsonl", seed=0)
    assert set(arena.utterances) == {"u0", "u1", "u2"} and len(arena.utterances["u2"]) == 2
    client = TestClient(create_app(arena))
    page = client.get("/").text
    assert "choose-left" in page and not any(s.name in page for s in systems)
    seen_orders = set()
    for _ in range(30):
        p = client.get("/api/pair").json()
        assert p["left"] == f"/audio/{p['pair']}/left" and p["right"] == f"/audio/{p['pair']}/right"
        assert not any(s.name in json.dumps(p) for s in systems)  # nothing in the pair names a system
        pair = arena.pairs[p["pair"]]
        assert p["text"] == texts[pair.utt] and pair.left != pair.right
        seen_orders.add((pair.left.name, pair.right.name))
        audio = client.get(p["left"])
        assert audio.status_code == 200 and audio.headers["content-type"] == "audio/wav"
        assert "filename" not in audio.headers.get("content-disposition", "")
        assert audio.content == (pair.left.wavs / f"{pair.utt}.wav").read_bytes()
    assert ("ground-truth", "hum-220") in seen_orders and ("hum-220", "ground-truth") in seen_orders
    assert client.post("/api/judge", json={"pair": p["pair"], "choice": "left"}).status_code == 200
    assert client.post("/api/judge", json={"pair": p["pair"], "choice": "left"}).status_code == 409
    assert client.post("/api/judge", json={"pair": "nope", "choice": "left"}).status_code == 404
    q = client.get("/api/pair").json()
    assert client.post("/api/judge", json={"pair": q["pair"], "choice": "both"}).status_code == 422
    assert client.get("/audio/nope/left").status_code == 404
    records, problems = read_judgments(arena.judgments)
    assert not problems and len(records) == 1
    assert records[0]["left"] == pair.left.name and records[0]["right"] == pair.right.name
    assert records[0]["choice"] == "left" and records[0]["utt"] == pair.utt
    with pytest.raises(DuetError, match="at least two runs"):
        load_systems(runs[:1])


def test_fit_on_arena_judgments(runs, tmp_path):
    """A listener who always prefers ground truth and never separates the hums: gt on top, hums level."""
    systems, texts = load_systems(runs)
    arena = Arena(systems, texts, tmp_path / "judgments.jsonl", seed=1)
    for _ in range(200):
        p = arena.next_pair()
        names = (p.left.name, p.right.name)
        choice = "tie" if "ground-truth" not in names else ("left" if names[0] == "ground-truth" else "right")
        arena.judge(p.id, choice)
    records, _ = read_judgments(arena.judgments)
    res = fit_arena(judgments_from_records(records), bootstrap=50)
    assert res.ratings[0].system == "ground-truth" and res.ratings[0].losses == 0
    hums = [r for r in res.ratings if r.system != "ground-truth"]
    assert abs(hums[0].rating - hums[1].rating) < 1.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CDP:
    """Just enough of the Chrome DevTools Protocol: send a command, wait for its answer."""

    def __init__(self, ws):
        self.ws = ws  # a websockets.sync connection to one page target
        self.next_id = 0

    def send(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv(timeout=30))
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg["result"]

    def eval(self, expression):
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {expression}")


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium")
def test_arena_page_in_headless_chromium(runs, tmp_path):
    import uvicorn

    systems, texts = load_systems(runs)
    judgments = tmp_path / "judgments.jsonl"
    arena = Arena(systems, texts, judgments, seed=3)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(arena), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    profile = Path(tempfile.mkdtemp(prefix="duet-chromium-"))
    browser = None
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline, "the arena server did not start"
            time.sleep(0.05)
        browser = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
             f"--user-data-dir={profile}", "--remote-debugging-port=0", f"http://127.0.0.1:{port}/"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        port_file = profile / "DevToolsActivePort"  # Chromium writes the port it picked here
        deadline = time.monotonic() + 180
        while not (port_file.is_file() and port_file.read_text().strip()):
            assert browser.poll() is None, "chromium exited"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.1)
        devtools = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{devtools}/json/list", timeout=10) as r:
            pages = [t for t in json.load(r) if t["type"] == "page"]
        from websockets.sync.client import connect

        with connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=20) as ws:
            first = _click_through(CDP(ws), arena, judgments, systems)
        assert first in arena.judged
    finally:
        if browser is not None:
            browser.terminate()
            try:
                browser.wait(timeout=10)
            except subprocess.TimeoutExpired:
                browser.kill()
                browser.wait()
        server.should_exit = True
        thread.join(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)


def _click_through(cdp, arena, judgments, systems):
    """Wait for a pair, check the page, click "B is better", check the judgment file; returns the pair id."""
    first = cdp.wait_for("document.body && document.body.dataset.pair && "
                         "!document.getElementById('choose-right').disabled && document.body.dataset.pair")
    html = cdp.eval("document.documentElement.outerHTML")
    assert not any(s.name in html for s in systems)  # the page never names a system
    # both samples were fetched and decoded by the browser's media stack (wav header read: HAVE_METADATA)
    cdp.wait_for("['left','right'].every(s => document.getElementById('audio-' + s).readyState >= 1)")
    assert cdp.eval("document.getElementById('audio-left').duration") == pytest.approx(0.5, abs=0.01)

    # a real mouse click on "B is better"
    box = cdp.eval("(() => { const r = document.getElementById('choose-right').getBoundingClientRect();"
                   " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    for kind in ("mousePressed", "mouseReleased"):
        cdp.send("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)
    deadline = time.monotonic() + 20
    while not (judgments.is_file() and judgments.read_text().strip()):
        assert time.monotonic() < deadline, "no judgment was recorded"
        time.sleep(0.05)
    records, problems = read_judgments(judgments)
    pair = arena.pairs[first]
    assert not problems and len(records) == 1
    assert records[0]["pair"] == first and records[0]["choice"] == "right"
    assert (records[0]["left"], records[0]["right"]) == (pair.left.name, pair.right.name)
    assert records[0]["utt"] == pair.utt
    # the page moved on to a new pair and counted the judgment
    cdp.wait_for(f"document.body.dataset.pair !== '{first}' && document.getElementById('count').textContent"
                 " === '1'")
    return first
