"""The web page at / in a real headless Chromium against a real ``duet serve --model mock`` process.

The browser types text, picks a voice, clicks Speak; the page streams SSE, plays each chunk through WebAudio and
offers a WAV. The test checks that audio arrived as it streamed (several chunks), that the page's WAV holds
exactly the samples the server sends for the same request outside the browser, and that an API error is shown.
The mock clones from a clip, so the page offers a reference clip: an uploaded file (chosen through the file input
as the file dialog would) or a recording from Chromium's fake microphone is sent as ``reference_audio``, a 16-bit
mono WAV at the server's rate that the server accepts. The mock takes an emotion and inline tags, so the emotion
selector lists its emotions and sends the chosen one as ``instructions``, and a tag button inserts its tag at the
caret. With two models the selector switches voices, sample rate, cloning, emotions and tags to the chosen model's
(the second takes none: the controls are disabled, with a title that says why). Skipped only when Debian's chromium
is not installed.
"""

from __future__ import annotations

import base64
import io
import time

import httpx
import numpy as np
import pytest
import soundfile as sf
from browser_testing import Browser, chromium_available

from duet.text.tokens import EMOTIONS, NONVERBALS
from process_testing import duet_serve

pytestmark = pytest.mark.skipif(not chromium_available(), reason="needs Debian's chromium (apt-get install chromium)")

TEXT = "Hello from the browser"  # the mock speaks one 320-sample frame per character
SEED = 7


@pytest.fixture(scope="module")
def server():
    """``duet serve --model mock`` in its own process, as a user would start it."""
    with duet_serve("--model", "mock", "--max-input-chars", "200", "--log-level", "warning") as url:
        yield url


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


SPY = """(() => {  // keeps the JSON body of every request the page sends
    window.sent = [];
    const fetch = window.fetch;
    window.fetch = (url, options) => {
        if (options && options.body) window.sent.push(JSON.parse(options.body));
        return fetch(url, options);
    };
})()"""


def sent_clip(page) -> tuple[dict, np.ndarray, int]:
    """The speech request the page sent (``window.sent``, SPY) and its reference clip: (body, int16 samples, rate)."""
    (body,) = page.eval("window.sent")
    audio, rate = sf.read(io.BytesIO(base64.b64decode(body["reference_audio"])), dtype="int16", always_2d=True)
    assert sf.info(io.BytesIO(base64.b64decode(body["reference_audio"]))).subtype == "PCM_16"
    assert audio.shape[1] == 1  # mono
    return body, audio[:, 0], rate


def speak_with_clip(page) -> dict:
    page.eval(SPY)
    page.type("#text", TEXT)
    page.click("#speak")
    page.wait_for("window.duet.state === 'done' || window.duet.state === 'error'")
    state = page.eval("window.duet")
    assert state["state"] == "done", state
    return state


def test_an_uploaded_clip_is_sent_as_a_16_bit_mono_wav_at_the_servers_rate(page, server, tmp_path):
    assert page.eval("window.duet.cloning") and not page.eval("document.querySelector('#cloning').hidden")
    assert page.eval("window.duet.clip") == "none"
    stereo = (np.random.default_rng(0).uniform(-0.5, 0.5, (16_000, 2)) * 32768).astype(np.int16)
    sf.write(tmp_path / "me.wav", stereo, 16_000, subtype="PCM_16")
    page.set_files("#clip-file", tmp_path / "me.wav")
    page.wait_for("window.duet.clip === 'ready' || window.duet.clip === 'error'")
    assert page.eval("window.duet.reference") == {"source": "upload", "name": "me.wav", "seconds": 1,
                                                  "bytes": 44 + 2 * 16_000}
    assert page.eval("document.querySelector('#voice').disabled")  # the clip's voice replaces the named one
    assert page.eval("document.querySelector('#live').disabled")  # type-and-hear sessions take no clip

    speak_with_clip(page)
    body, audio, rate = sent_clip(page)
    assert "voice" not in body and rate == 16_000
    mixed = np.floor(stereo.astype(np.float64).mean(axis=1) + 0.5).astype(np.int16)  # the page's mono, rounded
    np.testing.assert_array_equal(audio, mixed)
    direct = httpx.post(f"{server}/v1/audio/speech", timeout=30,
                        json={k: v for k, v in body.items() if k != "stream_format"})
    assert direct.status_code == 200, direct.text  # the server takes the page's clip as it is

    resampled = (0.3 * np.sin(np.arange(48_000) * 2 * np.pi * 440 / 48_000)).astype(np.float32)
    sf.write(tmp_path / "cd.wav", resampled, 48_000, subtype="PCM_16")
    page.set_files("#clip-file", tmp_path / "cd.wav")
    page.wait_for("window.duet.reference && window.duet.reference.name === 'cd.wav'")
    audio, rate = held_clip(page)
    assert rate == 16_000 and audio.shape == (16_000,)  # resampled by the browser to the server's rate

    page.click("#clip-clear")
    page.wait_for("window.duet.clip === 'none'")
    assert not page.eval("document.querySelector('#voice').disabled")


def held_clip(page) -> tuple[np.ndarray, int]:
    """The clip the page holds now, before it is sent: (int16 samples, rate)."""
    wav = base64.b64decode(page.eval("clip.clip.base64"))
    audio, rate = sf.read(io.BytesIO(wav), dtype="int16", always_2d=True)
    assert audio.shape[1] == 1
    return audio[:, 0], rate


def test_a_recording_from_the_microphone_is_sent_as_a_wav(page):
    page.click("#record")
    page.wait_for("window.duet.clip === 'recording'")
    time.sleep(1.5)
    page.click("#record")  # now "Stop recording"
    page.wait_for("window.duet.clip === 'ready' || window.duet.clip === 'error'")
    reference = page.eval("window.duet.reference")
    assert reference is not None and reference["source"] == "recording", page.eval("window.duet")
    assert 1.0 < reference["seconds"] < 5.0
    speak_with_clip(page)
    body, audio, rate = sent_clip(page)
    assert "voice" not in body and rate == 16_000
    assert abs(audio.shape[0] - reference["seconds"] * 16_000) <= 1


def test_the_emotion_selector_lists_the_models_emotions_and_sends_instructions(page, server):
    assert page.eval("[...document.querySelectorAll('#emotion option')].map(o => o.value)") == ["", *EMOTIONS]
    assert page.eval("document.querySelector('#emotion').value") == ""  # none: no instructions
    assert not page.eval("document.querySelector('#emotion').disabled")
    page.eval(SPY)
    page.type("#text", TEXT)
    for emotion in ("happy", ""):
        page.eval(f"document.querySelector('#emotion').value = '{emotion}'")
        page.click("#speak")
        page.wait_for("window.duet.state === 'done' || window.duet.state === 'error'")
        assert page.eval("window.duet.state") == "done", page.eval("window.duet")
        body = page.eval("window.sent.pop()")
        assert body.get("instructions") == (emotion or None) and body["input"] == TEXT


def test_a_tag_button_inserts_its_tag_at_the_caret(page):
    assert page.eval("window.duet.tags") == list(NONVERBALS)
    assert page.eval("[...document.querySelectorAll('#tags button')].map(b => b.dataset.tag)") == [
        "breath", "cough", "laughter", "sigh"]
    assert page.eval("[...document.querySelectorAll('#tags button')].every(b => !b.disabled)")
    page.type("#text", "Well hello")
    page.eval("document.querySelector('#text').setSelectionRange(4, 4)")  # after "Well"
    page.click("#tags button[data-tag=laughter]")
    assert page.eval("document.querySelector('#text').value") == "Well [laughter] hello"
    caret = len("Well [laughter]")
    assert page.eval("[document.activeElement.id, document.querySelector('#text').selectionStart, "
                     "document.querySelector('#text').selectionEnd]") == ["text", caret, caret]
    page.type("#text", " oh")  # typing goes on after the tag
    assert page.eval("document.querySelector('#text').value") == "Well [laughter] oh hello"
    page.eval("document.querySelector('#text').setSelectionRange(0, 0)")
    page.click("#tags button[data-tag=sigh]")  # a space apart from the word after it
    assert page.eval("document.querySelector('#text').value") == "[sigh] Well [laughter] oh hello"
    assert page.eval("document.querySelector('#text').selectionStart") == len("[sigh] ")


def test_type_and_hear_speaks_each_sentence_while_typing(page, server):
    page.eval("""(() => {  // keeps the JSON messages the page sends on its WebSocket
        window.wsSent = [];
        const send = WebSocket.prototype.send;
        WebSocket.prototype.send = function (data) {
            if (typeof data === 'string') window.wsSent.push(JSON.parse(data));
            return send.call(this, data);
        };
    })()""")
    page.eval("document.querySelector('#emotion').value = 'sad'")
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
    start = page.eval("window.wsSent[0]")
    assert start["type"] == "session.start" and start["instructions"] == "sad"


@pytest.fixture(scope="module")
def two_models():
    """An in-process server of two mocks: mock-a (16 kHz, clones, takes emotions and tags) and mock-b (24 kHz, none of
    those), and mock-a's alias."""
    from serve_testing import uvicorn_server

    from duet.serve.api import ServeConfig, create_app
    from duet.serve.engine import Engine
    from duet.serve.mock import MockConfig, MockRuntime

    engines = [Engine(MockRuntime(MockConfig(name="mock-a"))),
               Engine(MockRuntime(MockConfig(name="mock-b", voices=("bob",), sample_rate=24_000,
                                             samples_per_frame=480, clone_from_audio=False, expressive=False)))]
    with uvicorn_server(create_app(engines, ServeConfig(model_aliases=(("tts-1", "mock-a"),)))) as url:
        yield url


def test_the_model_selector_switches_voices_rate_cloning_emotions_and_tags(two_models):
    with Browser(two_models + "/") as browser:
        page = browser.page
        page.wait_for("window.duet && window.duet.state === 'idle'")
        assert page.eval("[...document.querySelectorAll('#model option')].map(o => o.value)") == ["mock-a", "mock-b"]
        assert page.eval("window.duet.sampleRate") == 16_000 and page.eval("window.duet.cloning")
        assert page.eval("[...document.querySelectorAll('#emotion option')].map(o => o.value)") == ["", *EMOTIONS]
        page.eval("document.querySelector('#emotion').value = 'angry'")
        page.eval("""(() => { const s = document.querySelector('#model');
                              s.value = 'mock-b'; s.dispatchEvent(new Event('change')); })()""")
        page.wait_for("window.duet.state === 'idle' && window.duet.sampleRate === 24000")
        assert page.eval("[...document.querySelectorAll('#voice option')].map(o => o.value)") == ["bob"]
        assert page.eval("document.querySelector('#cloning').hidden") and not page.eval("window.duet.cloning")
        # mock-b takes no emotion and reads no tags: the controls stay, disabled, and say why
        emotion = page.eval("""(() => { const s = document.querySelector('#emotion');
            return { disabled: s.disabled, value: s.value, options: [...s.options].map(o => o.value),
                     title: s.parentElement.title }; })()""")
        assert emotion == {"disabled": True, "value": "", "options": [""], "title": "mock-b has no emotion control"}
        buttons = page.eval("[...document.querySelectorAll('#tags button')].map(b => [b.disabled, b.title])")
        assert buttons == [[True, "mock-b does not read inline tags"]] * 4
        page.eval(SPY)
        page.type("#text", TEXT)
        page.click("#speak")
        page.wait_for("window.duet.state === 'done' || window.duet.state === 'error'")
        state = page.eval("window.duet")
        assert state["state"] == "done", state
        assert state["samples"] == len(TEXT) * 480 and state["wavBytes"] == 44 + 2 * len(TEXT) * 480
        assert "instructions" not in page.eval("window.sent[0]")  # the emotion chosen for mock-a is not sent
