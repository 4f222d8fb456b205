"""The shipped gepard-tiny through the speech API: its SSML breaks fitted to their length in the audio, at speed 1
and at speed 2 (made at 1.25, then compressed), measured by the energy threshold of ``benchmarks/break_bench.py``
(``duet.eval.pauses``); the ``json`` answer is the audio and the words ``duet speak`` makes for the same seed."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient

import duet
from duet.checkpoint_dir import checkpoints_root
from duet.eval.pauses import pause_at
from duet.serve.api import ServeConfig, create_app
from duet.serve.engine import Engine
from duet.tts.captions import word_json

pytestmark = pytest.mark.skipif(not (checkpoints_root() / "gepard-tiny" / "config.json").is_file(),
                                reason="gepard-tiny is not in this checkout")


@pytest.fixture(scope="module")
def served():
    speaker = duet.load("gepard-tiny")
    with TestClient(create_app(Engine(speaker.runtime), ServeConfig())) as client:
        yield client, speaker


@pytest.mark.parametrize("speed", [1.0, 2.0])
@pytest.mark.parametrize("seconds", [0.3, 1.0])
def test_a_break_lasts_its_length_and_the_answer_is_duet_speaks(served, seconds, speed):
    client, speaker = served
    text = f'<speak>The museum opens <break time="{seconds:g}s"/> at nine in the morning.</speak>'
    body = client.post("/v1/audio/speech", json={"model": "gepard-tiny", "input": text, "seed": 1, "speed": speed,
                                                 "response_format": "json"}).json()
    audio, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])), dtype="float32")
    words = {w["word"]: w for w in body["words"]}
    assert pause_at(audio, rate, words["opens"]["end"], words["at"]["start"]) == pytest.approx(seconds, abs=0.06)
    speech = speaker.speak(text, seed=1, speed=speed)
    assert body["words"] == [word_json(w) for w in speech.words]
    assert len(audio) == len(speech.audio)
    np.testing.assert_allclose(audio, speech.audio, atol=1e-4)  # the codec's chunking, then 16-bit samples
