"""Word timings, SSML and verification on every HTTP path (``duet.serve.api``, ``duet.serve.text_stream``), on
randomly initialised aligned micro models: the ``json`` format's shape, the SSE timestamps events (together the
``json`` words, exactly), the WebSocket's (the words ``duet speak --stdin-stream`` writes for the same text and
seed), SSML breaks fitted to their length in the audio and speeds above what the model follows stretched on every
path as ``duet speak`` does (``duet.tts.retime``), malformed SSML on every path, and ``verify`` with a fake
recogniser. Random weights make noise with no quiet stretch in it, so a fitted break is silence spliced into the
layout's pause: the pause measured in the audio is the break, and the words after it move by it."""

from __future__ import annotations

import base64
import io
import json
from dataclasses import dataclass

import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient

import duet
from checkpoint_testing import write_tiny_gepard, write_tiny_luna
from duet.serve import audio_io
from duet.serve.api import ServeConfig, create_app
from duet.serve.engine import Engine, EngineConfig
from duet.serve.mock import MockRuntime
from duet.serve.text_stream import ROUTE
from duet.tts import load_runtime
from duet.tts.live import speak_live

TEXT = "Hello there, how are you? The quick brown fox jumps."
NEVER_STOP = 0.999999  # a random stop head may fire at once: with it off, a Gepard runs to max_frames


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return {"gepard": write_tiny_gepard(tmp_path_factory.mktemp("gepard"), aligned=True),
            "luna": write_tiny_luna(tmp_path_factory.mktemp("luna"), aligned=True)}


@dataclass(frozen=True)
class Heard:
    wer: float
    transcript: str


class FakeScorer:
    def __init__(self, wers: list[float]):
        self.wers = list(wers)
        self.calls = 0

    def score(self, audio, sample_rate, text):
        self.calls += 1
        return Heard(self.wers.pop(0), f"making {self.calls}")


@pytest.fixture(scope="module")
def served(dirs):
    """One app over both micro models (and the mock, which has no timings)."""
    engines = [Engine(load_runtime(str(dirs[name])), EngineConfig()) for name in ("gepard", "luna")]
    engines.append(Engine(MockRuntime(), EngineConfig()))
    scorer = FakeScorer([])
    with TestClient(create_app(engines, ServeConfig(), scorer=scorer)) as client:
        yield client, scorer


def _body(model: str, **fields) -> dict:
    extra = {"max_frames": 60, "stop_threshold": NEVER_STOP} if model.startswith("gepard") else {"steps": 2}
    return {"model": model, "input": TEXT, "seed": 5, **extra, **fields}


def _models(client) -> dict[str, str]:
    ids = [m["id"] for m in client.get("/v1/models").json()["data"]]
    return {"gepard": next(i for i in ids if "gepard" in i), "luna": next(i for i in ids if "luna" in i),
            "mock": "duet-mock"}


def _sse(reply) -> list[dict]:
    return [json.loads(line[5:]) for line in reply.text.splitlines() if line.startswith("data:")]


def _error(reply) -> dict:
    body = reply.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


@pytest.mark.parametrize("family", ["gepard", "luna"])
def test_json_is_audio_with_its_word_timings(served, family):
    client, _ = served
    model = _models(client)[family]
    reply = client.post("/v1/audio/speech", json=_body(model, response_format="json"))
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert set(body) == {"audio", "format", "sample_rate", "duration", "words", "finish_reason"}
    audio, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])), dtype="float32")
    assert body["format"] == "wav" and rate == body["sample_rate"]
    assert body["duration"] == pytest.approx(len(audio) / rate, abs=1e-3)
    assert [w["word"] for w in body["words"]][:3] == ["Hello", "there", "how"]
    for w in body["words"]:
        assert set(w) == {"word", "start", "end", "phones"} and 0 <= w["start"] <= w["end"] <= body["duration"]
    assert reply.headers["X-Finish-Reason"] == body["finish_reason"]
    # the same audio as the wav the route streams for the same request
    wav = client.post("/v1/audio/speech", json=_body(model, response_format="wav"))
    streamed, _ = sf.read(io.BytesIO(wav.content), dtype="float32")
    assert np.array_equal(streamed, audio)


@pytest.mark.parametrize("speed", [1.0, 2.0])  # 2: made at 1.25, the audio and words stretched as they go out
@pytest.mark.parametrize("family", ["gepard", "luna"])
def test_sse_timestamps_events_are_the_json_words_as_the_audio_goes_out(served, family, speed):
    client, _ = served
    model = _models(client)[family]
    whole = client.post("/v1/audio/speech", json=_body(model, response_format="json", speed=speed)).json()
    events = _sse(client.post("/v1/audio/speech", json=_body(model, response_format="pcm", stream_format="sse",
                                                              timestamps=True, speed=speed)))
    assert [e["type"] for e in events][-1] == "speech.audio.done"
    stamped = [e for e in events if e["type"] == "speech.audio.timestamps"]
    assert stamped and all(set(e) == {"type", "words"} for e in stamped)
    assert [w for e in stamped for w in e["words"]] == whole["words"]  # exactly, in any chunking
    sent = 0  # every word handed out ends inside the audio sent before it
    for e in events:
        if e["type"] == "speech.audio.delta":
            sent += len(base64.b64decode(e["audio"])) // 2
        elif e["type"] == "speech.audio.timestamps" and e is not stamped[-1]:
            assert all(w["end"] <= sent / whole["sample_rate"] + 1e-3 for w in e["words"])
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert len(pcm) // 2 / whole["sample_rate"] == pytest.approx(whole["duration"], abs=1e-3)
    if family == "gepard":  # frames go out one by one at first: words come out before the audio ends
        assert len(stamped) > 1


def test_without_timestamps_sse_is_unchanged(served):
    client, _ = served
    events = _sse(client.post("/v1/audio/speech", json=_body(_models(client)["luna"], response_format="pcm",
                                                                   stream_format="sse")))
    assert {e["type"] for e in events} == {"speech.audio.delta", "speech.audio.done"}


def test_timestamps_are_refused_where_there_are_none(served):
    client, _ = served
    reply = client.post("/v1/audio/speech", json={"model": "duet-mock", "input": "Hi.", "timestamps": True,
                                                  "stream_format": "sse", "response_format": "pcm"})
    assert reply.status_code == 400 and _error(reply)["code"] == "timestamps_unsupported"
    plain = client.post("/v1/audio/speech", json={"model": "duet-mock", "input": "Hi.", "response_format": "json"})
    assert plain.status_code == 200 and plain.json()["words"] is None  # json of a model without timings
    raw = client.post("/v1/audio/speech", json=_body(_models(client)["luna"], timestamps=True))
    assert raw.status_code == 400 and _error(raw)["param"] == "timestamps"
    sse_json = client.post("/v1/audio/speech", json=_body(_models(client)["luna"], response_format="json",
                                                          stream_format="sse"))
    assert sse_json.status_code == 400


# ---- SSML ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt, stream", [("wav", "audio"), ("pcm", "sse"), ("json", "audio"), ("flac", "audio")])
def test_malformed_ssml_is_a_400_naming_its_position_on_every_format(served, fmt, stream):
    client, _ = served
    body = _body(_models(client)["luna"], input="<speak>Hello <break time='1 sec'/> there</speak>",
                 response_format=fmt, stream_format=stream)
    reply = client.post("/v1/audio/speech", json=body)
    assert reply.status_code == 400
    error = _error(reply)
    assert error["code"] == "invalid_ssml" and error["param"] == "input"
    assert error["message"].startswith("SSML error at character 13: break time '1 sec'")


def test_ssml_breaks_are_in_the_words_and_a_trailing_one_in_the_audio(served):
    client, _ = served
    model = _models(client)["luna"]
    plain = client.post("/v1/audio/speech", json=_body(model, input="Hello there, how are you?",
                                                       response_format="json")).json()
    ssml = '<speak>Hello there <break time="800ms"/> how are you?<break time="2s"/></speak>'
    paused = client.post("/v1/audio/speech", json=_body(model, input=ssml, response_format="json")).json()
    words = {w["word"]: w for w in paused["words"]}
    # the layout's 0.8 s of pause, and the 0.8 s of silence the fit spliced into it
    assert words["how"]["start"] - words["there"]["end"] == pytest.approx(1.6, abs=0.05)
    assert paused["duration"] - paused["words"][-1]["end"] >= 2.0 - 1e-3
    assert paused["duration"] > plain["duration"] + 1.0
    events = _sse(client.post("/v1/audio/speech", json=_body(model, input=ssml, response_format="pcm",
                                                            stream_format="sse")))
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    assert len(pcm) // 2 / paused["sample_rate"] == pytest.approx(paused["duration"], abs=1e-3)
    assert events[-1]["duet"]["audio_seconds"] == pytest.approx(paused["duration"], abs=1e-3)


BREAKS = {"within a sentence": '<speak>Hello there <break time="{ms}ms"/> how are you?</speak>',
          "between sentences": '<speak>Hello there. <break time="{ms}ms"/> How are you?</speak>'}


def _break_body(model: str, seconds: float, where: str, **fields) -> dict:
    """A request with one break between "there" and "how"; a Gepard runs to its frame bound (its stop head off),
    so every word is spoken."""
    body = _body(model, input=BREAKS[where].format(ms=round(seconds * 1000)), **fields)
    body.pop("max_frames", None)
    return body


def _check_break(pcm: bytes, rate: int, words: list[dict], seconds: float) -> None:
    """The pause between "there" and "how" in the audio (16-bit PCM), by ``break_bench``'s energy threshold, is the
    break to within 60 ms; the words are in order, inside the audio."""
    from duet.eval.pauses import pause_at

    audio = np.frombuffer(pcm, "<i2").astype(np.float32) / 32767.0
    times = [t for w in words for t in (w["start"], w["end"])]
    assert times == sorted(times) and times[0] >= 0.0 and times[-1] <= len(audio) / rate + 1e-3
    for w in words:
        assert all(w["start"] <= p["start"] <= p["end"] <= w["end"] for p in w["phones"])
    by = {w["word"].lower(): w for w in words}
    assert pause_at(audio, rate, by["there"]["end"], by["how"]["start"]) == pytest.approx(seconds, abs=0.06)


@pytest.mark.parametrize("where", list(BREAKS))
@pytest.mark.parametrize("seconds", [0.3, 1.0])
@pytest.mark.parametrize("family", ["gepard", "luna"])
def test_a_break_lasts_its_length_in_the_json_audio(served, family, seconds, where):
    client, _ = served
    body = client.post("/v1/audio/speech", json=_break_body(_models(client)[family], seconds, where,
                                                            response_format="json")).json()
    audio, rate = sf.read(io.BytesIO(base64.b64decode(body["audio"])), dtype="int16")
    assert body["duration"] == pytest.approx(len(audio) / rate, abs=1e-3)
    _check_break(audio.astype("<i2").tobytes(), rate, body["words"], seconds)


@pytest.mark.parametrize("where", list(BREAKS))
@pytest.mark.parametrize("seconds", [0.3, 1.0])
@pytest.mark.parametrize("family", ["gepard", "luna"])
def test_a_break_lasts_its_length_in_the_sse_audio(served, family, seconds, where):
    client, _ = served
    events = _sse(client.post("/v1/audio/speech", json=_break_body(_models(client)[family], seconds, where,
                                                                   response_format="pcm", stream_format="sse",
                                                                   timestamps=True)))
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta")
    done = events[-1]
    assert done["type"] == "speech.audio.done"
    rate = done["duet"]["sample_rate"]
    assert done["duet"]["audio_seconds"] == pytest.approx(len(pcm) // 2 / rate, abs=1e-3)
    words = [w for e in events if e["type"] == "speech.audio.timestamps" for w in e["words"]]
    _check_break(pcm, rate, words, seconds)


@pytest.mark.parametrize("where", list(BREAKS))
@pytest.mark.parametrize("seconds", [0.3, 1.0])
@pytest.mark.parametrize("family", ["gepard", "luna"])
def test_a_break_lasts_its_length_in_the_websocket_audio(served, family, seconds, where):
    client, _ = served
    start = {k: v for k, v in _break_body(_models(client)[family], seconds, where).items() if k != "input"}
    events = _session(client, {**start, "timestamps": True}, BREAKS[where].format(ms=round(seconds * 1000)))
    assert events[-1]["type"] == "session.done" and events[-1]["reason"] == "done", events[-2:]
    pcm, rate = _session_pcm(events), events[0]["sample_rate"]
    assert events[-1]["audio_seconds"] == pytest.approx(len(pcm) // 2 / rate, abs=1e-3)
    words = [w for e in events if e["type"] == "piece.timestamps" for w in e["words"]]
    _check_break(pcm, rate, words, seconds)


def test_the_speech_route_makes_what_duet_speak_makes(served, dirs):
    """A break inside the text, a break after it and a speed above 1.25 (made at 1.25, then stretched): the json
    response and ``duet speak`` give the same samples and the same words."""
    client, _ = served
    text = '<speak>Hello there <break time="300ms"/> how are you?<break time="1s"/></speak>'
    body = client.post("/v1/audio/speech", json=_body(_models(client)["luna"], input=text, speed=2.0,
                                                      response_format="json")).json()
    audio, _ = sf.read(io.BytesIO(base64.b64decode(body["audio"])), dtype="int16")
    speech = duet.load(dirs["luna"]).speak(text, seed=5, steps=2, speed=2.0)
    assert audio.astype("<i2").tobytes() == audio_io.pcm16(speech.audio)
    assert body["words"] == _json_words(speech.words)


def test_plain_input_with_markup_characters_is_spoken_as_text(served):
    client, _ = served
    reply = client.post("/v1/audio/speech", json=_body(_models(client)["luna"], input="1 < 2 & <b>bold</b>",
                                                       response_format="json"))
    assert reply.status_code == 200


def test_a_model_without_a_layout_refuses_breaks_inside_the_text(served):
    client, _ = served
    reply = client.post("/v1/audio/speech", json={"model": "duet-mock", "input": "<speak>a <break/> b</speak>"})
    assert reply.status_code == 400 and _error(reply)["code"] == "ssml_unsupported"


# ---- verify -------------------------------------------------------------------------------------------------------


def test_verify_sends_the_best_making_with_its_score(served):
    client, scorer = served
    scorer.wers[:] = [0.5, 0.0]
    scorer.calls = 0
    model = _models(client)["luna"]
    reply = client.post("/v1/audio/speech", json=_body(model, response_format="json", verify={"tries": 3}))
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["verify"] == {"wer": 0.0, "transcript": "making 2", "tries": 2, "kept": 2, "first_wer": 0.5}
    assert reply.headers["X-Verify"] == "wer=0.000; tries=2; kept=2" and scorer.calls == 2
    scorer.wers[:] = [0.0]
    wav = client.post("/v1/audio/speech", json=_body(model, verify=True))  # wav, sent whole
    assert wav.status_code == 200 and wav.headers["X-Verify"] == "wer=0.000; tries=1; kept=1"
    first = client.post("/v1/audio/speech", json=_body(model, response_format="wav"))
    assert wav.content[44:] == first.content[44:]  # the first making is the request as it was (whole: sized header)
    assert sf.info(io.BytesIO(wav.content)).frames == (len(wav.content) - 44) // 2


def test_verify_is_refused_with_sse_and_without_a_recogniser(served, dirs):
    client, _ = served
    model = _models(client)["luna"]
    reply = client.post("/v1/audio/speech", json=_body(model, response_format="pcm", stream_format="sse",
                                                       verify=True))
    assert reply.status_code == 400 and _error(reply)["param"] == "verify"
    bad = client.post("/v1/audio/speech", json=_body(model, verify={"tries": 0}))
    assert bad.status_code == 400
    engine = Engine(load_runtime(str(dirs["luna"])), EngineConfig())
    with TestClient(create_app(engine, ServeConfig())) as bare:
        reply = bare.post("/v1/audio/speech", json=_body(model, verify=True))
        assert reply.status_code == 400 and _error(reply)["code"] == "verify_unavailable"


# ---- the text-streaming WebSocket ---------------------------------------------------------------------------------


def _session(client, start: dict, text: str, step: int = 3) -> list[dict]:
    """Every event of a session that sends ``text`` in deltas of ``step`` characters; a binary message is an event
    ``{"type": "audio", "samples", "pcm"}``."""
    events = []
    with client.websocket_connect(ROUTE) as ws:
        ws.send_json({"type": "session.start", **start})
        events.append(ws.receive_json())
        if events[-1]["type"] == "error":
            return events
        for i in range(0, len(text), step):
            ws.send_json({"type": "text.delta", "delta": text[i:i + step]})
        ws.send_json({"type": "text.done"})
        while True:
            message = ws.receive()
            if message.get("text") is None:
                events.append({"type": "audio", "samples": len(message["bytes"]) // 2, "pcm": message["bytes"]})
                continue
            events.append(json.loads(message["text"]))
            if events[-1]["type"] == "session.done":
                return events


@pytest.mark.parametrize("text, speed", [
    (TEXT, 1.0),
    ('<speak>Hello there, <break time="700ms"/> how are you? <break time="1s"/> The <prosody rate="slow">quick '
     'brown</prosody> fox <break time="300ms"/> jumps.<break time="500ms"/></speak>', 1.0),
    ('<speak>Hello there <break time="300ms"/> how are you? <break time="1s"/> The quick fox.</speak>', 2.0),
])
def test_websocket_timestamps_and_audio_are_duet_speaks(served, dirs, text, speed):
    """Pauses fitted in the audio (within a piece and between pieces) and a speed made at 1.25 and stretched, on
    the WebSocket as in ``duet speak --stdin-stream``: the same words and the same samples."""
    client, _ = served
    model = _models(client)["luna"]
    events = _session(client, {"model": model, "seed": 9, "steps": 2, "speed": speed, "timestamps": True}, text)
    assert events[-1]["type"] == "session.done" and events[-1]["reason"] == "done", events[-2:]
    streamed = [w for e in events if e["type"] == "piece.timestamps" for w in e["words"]]
    speaker = duet.load(dirs["luna"])
    words, samples = [], []
    speak_live(speaker, [text[i:i + 3] for i in range(0, len(text), 3)], samples.append, seed=9, words=words,
               steps=2, speed=speed)
    assert streamed == _json_words(words)
    assert _session_pcm(events) == audio_io.pcm16(np.concatenate(samples))


def _session_pcm(events: list[dict]) -> bytes:
    return b"".join(e["pcm"] for e in events if e["type"] == "audio")


def _json_words(words):
    from duet.tts.captions import word_json

    return [word_json(w) for w in words]


def test_websocket_malformed_ssml_ends_the_session_with_its_error(served):
    client, _ = served
    events = _session(client, {"model": _models(client)["luna"], "steps": 2},
                      "<speak>Hello there. <audio src='x'/> more</speak>")
    error = next(e for e in events if e["type"] == "error")
    assert error["code"] == "invalid_ssml" and "character 20: unsupported element <audio>" in error["message"]
    assert events[-1] == {**events[-1], "type": "session.done", "reason": "error"}


def test_websocket_timestamps_are_refused_for_a_model_without_them(served):
    client, _ = served
    events = _session(client, {"model": "duet-mock", "timestamps": True}, "Hi.")
    assert events[-1]["type"] == "error" and events[-1]["code"] == "timestamps_unsupported"
