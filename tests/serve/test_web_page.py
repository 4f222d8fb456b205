"""The web page at / in a real headless Chromium against a real ``duet serve --model mock`` process.

The browser types text, picks a voice, clicks Speak; the page streams SSE, plays each chunk through WebAudio and
offers a WAV. The test checks that audio arrived as it streamed (several chunks), that the page's WAV holds
exactly the samples the server sends for the same request outside the browser, and that an API error is shown.
Skipped only when Debian's chromium is not installed.
"""

from __future__ import annotations

import base64
import io
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from browser_testing import Browser, chromium_available

pytestmark = pytest.mark.skipif(not chromium_available(), reason="needs Debian's chromium (apt-get install chromium)")

SRC = Path(__file__).resolve().parents[2] / "src"
TEXT = "Hello from the browser"  # the mock speaks one 320-sample frame per character
SEED = 7


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server():
    """``duet serve --model mock`` in its own process, as a user would start it."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "duet.cli", "serve", "--model", "mock", "--port", str(port),
                             "--max-input-chars", "200", "--log-level", "warning"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # a loaded CI machine can take minutes to import torch
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"duet serve exited: {proc.stdout.read().decode(errors='replace')}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("duet serve did not come up")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)
        proc.stdout.close()


@pytest.fixture
def page(server, tmp_path):
    with Browser(server + "/") as browser:
        p = browser.page
        p.wait_for("window.duet && window.duet.state === 'idle'")
        yield p
        browser.page.screenshot(tmp_path / "page.png")  # for a person looking at a failure


def test_page_lists_models_and_voices(page):
    assert page.eval("[...document.querySelectorAll('#model option')].map(o => o.value)") == ["duet-mock"]
    assert page.eval("[...document.querySelectorAll('#voice option')].map(o => o.value)") == ["alloy", "echo"]
    assert page.eval("window.duet.sampleRate") == 16_000


def test_speak_streams_audio_and_offers_the_wav(page, server):
    page.eval("document.querySelector('#voice').value = 'echo'")
    page.type("#text", TEXT)
    page.type("#seed", str(SEED))
    page.click("#speak")
    page.wait_for("window.duet.state === 'done' || window.duet.state === 'error'")
    state = page.eval("window.duet")
    assert state["state"] == "done", state
    assert state["samples"] == len(TEXT) * 320 and state["finishReason"] == "stop"
    assert state["chunks"] > 1  # it streamed: one SSE delta per frame, not one blob at the end
    assert state["ttfaMs"] is not None and state["ttfaMs"] >= 0
    assert page.eval("!document.querySelector('#download').hidden")

    wav_b64 = page.eval("""(async () => {
        const r = await fetch(document.querySelector('#download').href);
        const bytes = new Uint8Array(await r.arrayBuffer());
        let s = ''; for (const b of bytes) s += String.fromCharCode(b);
        return btoa(s); })()""")
    wav = base64.b64decode(wav_b64)
    assert len(wav) == 44 + 2 * len(TEXT) * 320 == state["wavBytes"]
    audio, sr = sf.read(io.BytesIO(wav), dtype="int16")
    assert sr == 16_000
    # The same request outside the browser: the page's WAV holds exactly these samples.
    direct = httpx.post(f"{server}/v1/audio/speech", timeout=30,
                        json={"model": "duet-mock", "voice": "echo", "input": TEXT, "seed": SEED,
                              "response_format": "pcm"})
    assert direct.status_code == 200
    np.testing.assert_array_equal(audio, np.frombuffer(direct.content, "<i2"))
    assert "duet_requests_total" in httpx.get(f"{server}/metrics").text


def test_api_errors_are_shown(page):
    page.type("#text", "x" * 300)  # the server was started with --max-input-chars 200
    page.click("#speak")
    page.wait_for("window.duet.state === 'error'")
    assert "limit is 200" in page.eval("document.querySelector('#status').textContent")


def test_type_and_hear_speaks_each_sentence_while_typing(page, server):
    page.eval("document.querySelector('#live').checked = true")
    page.type("#seed", str(SEED))
    page.type("#text", "Hello there, my good friend. How")
    page.wait_for("window.duet.pieces.length === 1 && window.duet.samples > 0")  # spoken before the input ends
    assert page.eval("window.duet.pieces") == ["Hello there, my good friend."]
    page.type("#text", " are you")
    page.click("#speak")  # the end of input: the rest is spoken
    page.wait_for("window.duet.state === 'done' || window.duet.state === 'error'")
    state = page.eval("window.duet")
    assert state["state"] == "done", state
    assert state["pieces"] == ["Hello there, my good friend.", "How are you"]
    gap = round(0.15 * 16_000)  # TextStreamConfig.gap_seconds between pieces
    assert state["samples"] == 320 * (len(state["pieces"][0]) + len(state["pieces"][1])) + gap
    assert state["wavBytes"] == 44 + 2 * state["samples"]
