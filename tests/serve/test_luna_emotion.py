"""Expressive control served: the speech API's ``instructions`` read as one emotion (an exact name, or a short
instruction with one emotion word), the same frames through the engine as ``speak(..., emotion=)`` at a seed for
Luna and Luna Realtime, a clear 400 for anything else (and for Gepard, which has no emotion control), and the
server serving the next request after each refusal. Micro models with random weights."""

from __future__ import annotations

import numpy as np
import pytest
from fastapi.testclient import TestClient

import duet
from checkpoint_testing import write_tiny_gepard, write_tiny_luna, write_tiny_luna_realtime
from duet.sampling import SamplingParams
from duet.serve.api import create_app
from duet.serve.engine import Engine
from duet.text.tokens import EMOTIONS, NONVERBALS
from duet.tts import load_runtime
from duet.tts.request import SynthesisRequest

TEXT = "Well [laugh] hello there."


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return {"luna": write_tiny_luna(tmp_path_factory.mktemp("luna")),
            "luna-realtime": write_tiny_luna_realtime(tmp_path_factory.mktemp("rt"), end_bias=-20.0),
            "gepard": write_tiny_gepard(tmp_path_factory.mktemp("gepard"))}


def _pcm(r) -> np.ndarray:
    assert r.status_code == 200, r.text
    return np.frombuffer(r.content, dtype="<i2").astype(np.float32) / 32767.0


@pytest.mark.parametrize("kind", ["luna", "luna-realtime"])
def test_served_emotion_equals_speak_with_that_emotion(dirs, kind):
    runtime = load_runtime(str(dirs[kind]), name="m")
    request = SynthesisRequest(TEXT, emotion="happy", params=SamplingParams(seed=5, steps=3))
    with Engine(runtime) as engine:
        audio, finish = engine.submit(request).collect(timeout=120)
        plain, _ = engine.submit(SynthesisRequest(TEXT, params=SamplingParams(seed=5, steps=3))).collect(timeout=120)
    speech = duet.load(dirs[kind]).speak(TEXT, seed=5, steps=3, emotion="happy")
    assert audio.shape == speech.audio.shape and audio.size > 0
    np.testing.assert_allclose(audio, speech.audio, atol=1e-5)
    assert plain.shape != audio.shape or not np.allclose(plain, audio, atol=1e-5)  # the token changed the output


def test_http_instructions_map_to_one_emotion_or_a_400(dirs):
    speaker = duet.load(dirs["luna"])
    body = {"model": "m", "input": TEXT, "seed": 9, "steps": 2, "response_format": "pcm"}
    with TestClient(create_app(Engine(load_runtime(str(dirs["luna"]), name="m")))) as client:
        voices = client.get("/v1/audio/voices").json()  # what the web page offers
        assert voices["emotions"] == list(EMOTIONS) and voices["tags"] == list(NONVERBALS)
        happy = _pcm(client.post("/v1/audio/speech", json={**body, "instructions": "speak happily"}))
        expected = speaker.speak(TEXT, seed=9, steps=2, emotion="happy").audio
        np.testing.assert_allclose(happy, expected, atol=1.5 / 32767)
        np.testing.assert_array_equal(_pcm(client.post("/v1/audio/speech", json={**body, "instructions": "happy"})),
                                      happy)
        blank = _pcm(client.post("/v1/audio/speech", json={**body, "instructions": "  "}))
        np.testing.assert_allclose(blank, speaker.speak(TEXT, seed=9, steps=2).audio, atol=1.5 / 32767)
        for bad in ("speak slowly", "happy then sad", "not angry", "please read this in a warm and very happy voice",
                    "bored"):
            r = client.post("/v1/audio/speech", json={**body, "instructions": bad})
            assert r.status_code == 400 and r.headers["content-type"] == "application/json", (bad, r.text)
            error = r.json()["error"]
            assert (error["param"], error["code"]) == ("instructions", "invalid_value")
            assert ", ".join(EMOTIONS) in error["message"]
            assert client.get("/health").status_code == 200  # the server stays up and serves the next request
            _pcm(client.post("/v1/audio/speech", json={**body, "instructions": "whisper"}))


def test_gepard_answers_an_emotion_with_a_400(dirs):
    body = {"model": "m", "input": "Hi.", "seed": 1, "max_frames": 4, "stop_threshold": 0.999, "response_format": "pcm"}
    with TestClient(create_app(Engine(load_runtime(str(dirs["gepard"]), name="m")))) as client:
        voices = client.get("/v1/audio/voices").json()
        assert voices["emotions"] == [] and voices["tags"] == []
        r = client.post("/v1/audio/speech", json={**body, "instructions": "sound happy"})
        assert r.status_code == 400
        error = r.json()["error"]
        assert (error["param"], error["code"]) == ("instructions", "emotion_unsupported")
        assert "has no emotion control" in error["message"]
        _pcm(client.post("/v1/audio/speech", json=body))  # served without one
