"""Speaking text while it arrives: the WebSocket route ``/v1/audio/speech/stream`` on the mock model."""

import json

import numpy as np
import pytest
from fastapi.testclient import TestClient
from serve_testing import wait_until

from duet.serve.api import ServeConfig, create_app
from duet.serve.engine import Engine, EngineConfig
from duet.serve.mock import MockConfig, MockRuntime
from duet.serve.schemas import TextStreamConfig
from duet.serve.text_stream import ROUTE
from duet.text.segmenter import SegmenterConfig, TextSegmenter

MOCK = MockConfig()
TEXT = "Hello there, my good friend. How are you today? I hope all is well with you and yours"
START = {"type": "session.start", "model": "duet-mock", "voice": "alloy", "seed": 7}


def client_for(mock: MockConfig = MOCK, stream: TextStreamConfig = TextStreamConfig()):
    engine = Engine(MockRuntime(mock), EngineConfig())
    return TestClient(create_app(engine, ServeConfig(text_stream=stream))), engine


@pytest.fixture
def api():
    client, engine = client_for()
    with client:
        yield client, engine


def read_until_done(ws) -> tuple[list[dict], dict[int, bytes]]:
    """Events in order, and each piece's audio bytes (binary messages between its started and done)."""
    events, audio, current = [], {}, None
    while True:
        message = ws.receive()
        if message.get("bytes") is not None:
            audio[current] = audio.get(current, b"") + message["bytes"]
            continue
        event = json.loads(message["text"])
        events.append(event)
        if event["type"] == "piece.started":
            current = event["index"]
        if event["type"] == "session.done":
            return events, audio


def post_pcm(client, text: str, seed: int) -> bytes:
    r = client.post("/v1/audio/speech", json={"model": "duet-mock", "input": text, "voice": "alloy", "seed": seed,
                                              "response_format": "pcm"})
    assert r.status_code == 200
    return r.content


def test_pieces_are_the_segmenters_and_each_sounds_as_the_speech_route_says_it(api):
    client, engine = api
    with client.websocket_connect(ROUTE) as ws:
        ws.send_json(START)
        started = ws.receive_json()
        assert started == {"type": "session.started", "model": "duet-mock", "sample_rate": MOCK.sample_rate,
                           "format": "pcm16", "seed": 7}
        for ch in TEXT:  # one character per delta, as a slow tokenizer would
            ws.send_json({"type": "text.delta", "delta": ch})
        ws.send_json({"type": "text.done"})
        events, audio = read_until_done(ws)
    seg = TextSegmenter(SegmenterConfig())
    expected = [p for ch in TEXT for p in seg.push(ch)] + seg.finish()
    pieces = [e["text"] for e in events if e["type"] == "piece.started"]
    assert pieces == expected and len(pieces) >= 3
    assert " ".join(pieces) == TEXT  # nothing dropped, nothing repeated
    gap = 2 * round(TextStreamConfig().gap_seconds * MOCK.sample_rate)  # pcm16: two bytes a sample
    for i, text in enumerate(pieces):  # piece i samples with seed + i, as duet speak seeds its sentences
        assert audio[i][gap if i else 0:] == post_pcm(client, text, 7 + i)
        assert not np.frombuffer(audio[i][:gap if i else 0], "<i2").any()
    done = [e for e in events if e["type"] == "piece.done"]
    assert [d["finish_reason"] for d in done] == ["stop"] * len(pieces)
    assert events[-1] == {"type": "session.done", "reason": "done", "pieces": len(pieces),
                          "audio_seconds": pytest.approx(sum(len(a) for a in audio.values()) / 2 / MOCK.sample_rate,
                                                         abs=1e-3)}
    wait_until(lambda: engine.stats().running == 0, what="slots freed")


def test_bad_messages_get_error_events_and_the_session_goes_on(api):
    client, _ = api
    with client.websocket_connect(ROUTE) as ws:
        ws.send_json(START)
        ws.receive_json()
        ws.send_text("{not json")
        ws.send_bytes(b"\x00\x01")
        ws.send_json({"type": "text.delta", "delta": 5})
        ws.send_json({"type": "dance"})
        ws.send_json([1, 2])
        ws.send_json({"type": "session.start", "model": "duet-mock"})
        codes = [ws.receive_json() for _ in range(6)]
        assert [c["type"] for c in codes] == ["error"] * 6
        assert all(c["code"] == "invalid_message" and c["message"] for c in codes)
        ws.send_json({"type": "text.delta", "delta": "Still here."})
        ws.send_json({"type": "text.done"})
        events, audio = read_until_done(ws)
    assert events[-1]["reason"] == "done" and events[-1]["pieces"] == 1 and audio[0]
    assert client.get("/health").status_code == 200


@pytest.mark.parametrize("start, message", [
    ({"type": "session.start", "model": "nope"}, "not found"),
    ({"type": "session.start", "model": "duet-mock", "temperature": -1}, "temperature"),
    ({"type": "session.start", "model": "duet-mock", "input": "hi"}, "input"),
    ({"type": "text.delta", "delta": "hi"}, "session.start"),
])
def test_a_bad_start_is_an_error_and_a_close(api, start, message):
    client, _ = api
    with client.websocket_connect(ROUTE) as ws:
        ws.send_json(start)
        event = ws.receive_json()
        assert event["type"] == "error" and message in event["message"]
        assert ws.receive()["type"] == "websocket.close"
    assert client.get("/health").status_code == 200


def test_a_cancelled_session_frees_its_engine_slots():
    client, engine = client_for(MockConfig(step_delay_s=0.01, frames_per_char=20))
    with client, client.websocket_connect(ROUTE) as ws:
        ws.send_json(START)
        ws.receive_json()
        ws.send_json({"type": "text.delta", "delta": "A long first sentence here. And a second one follows. "})
        assert ws.receive_json()["type"] == "piece.started"
        wait_until(lambda: engine.stats().running >= 1, what="a piece generating")
        ws.send_json({"type": "session.cancel"})
        events = []
        while not events or events[-1]["type"] != "session.done":
            message = ws.receive()
            if message.get("text"):
                events.append(json.loads(message["text"]))
        assert events[-1]["reason"] == "cancelled"
        wait_until(lambda: engine.stats().running == 0 and engine.stats().waiting == 0, what="slots freed")
        assert engine.stats().cache_bytes_used == 0


def test_a_client_that_goes_away_frees_its_engine_slots():
    client, engine = client_for(MockConfig(step_delay_s=0.01, frames_per_char=20))
    with client:
        with client.websocket_connect(ROUTE) as ws:
            ws.send_json(START)
            ws.receive_json()
            ws.send_json({"type": "text.delta", "delta": "A long first sentence here. And more "})
            wait_until(lambda: engine.stats().running >= 1, what="a piece generating")
        wait_until(lambda: engine.stats().running == 0 and engine.stats().cache_bytes_used == 0, what="slots freed")
        assert engine.stats().finished["cancelled"] >= 1


def test_session_limits_end_the_session_with_their_code():
    client, _ = client_for(stream=TextStreamConfig(max_session_chars=20))
    with client, client.websocket_connect(ROUTE) as ws:
        ws.send_json(START)
        ws.receive_json()
        ws.send_json({"type": "text.delta", "delta": "x" * 21})
        events, _ = read_until_done(ws)
        assert events[-2]["code"] == "session_too_long" and events[-1]["reason"] == "error"
    client, _ = client_for(stream=TextStreamConfig(idle_timeout_s=0.3))
    with client, client.websocket_connect(ROUTE) as ws:
        ws.send_json(START)
        ws.receive_json()
        ws.send_json({"type": "text.delta", "delta": "Hello"})
        events, _ = read_until_done(ws)  # then nothing for 0.3 s
        assert events[-2]["code"] == "idle_timeout" and events[-1]["reason"] == "error"


def test_a_stalled_llm_gets_its_complete_words_spoken():
    client, _ = client_for(stream=TextStreamConfig(segmenter=SegmenterConfig(idle_seconds=0.2)))
    with client, client.websocket_connect(ROUTE) as ws:
        ws.send_json(START)
        ws.receive_json()
        ws.send_json({"type": "text.delta", "delta": "Once upon a ti"})
        event = ws.receive_json()  # no punctuation: only the stall releases the complete words
        assert event == {"type": "piece.started", "index": 0, "text": "Once upon a"}
        ws.send_json({"type": "text.delta", "delta": "me."})
        ws.send_json({"type": "text.done"})
        events, _ = read_until_done(ws)
        assert [e["text"] for e in events if e["type"] == "piece.started"] == ["time."]
