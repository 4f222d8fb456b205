"""Several models in one server (``duet.serve.models``): two weightless mocks with their own names, voices and
sample rates, each on its own engine; a request's ``model`` picks one. Also ``duet serve A B ...``'s parsing."""

from __future__ import annotations

import asyncio
import io
import json
import statistics
import threading
import time

import httpx
import pytest
import soundfile as sf
from fastapi.testclient import TestClient
from serve_testing import uvicorn_server, wait_until

from duet.cli import build_parser, main
from duet.errors import DuetError
from duet.serve.api import ServeConfig, create_app
from duet.serve.engine import Engine, EngineConfig
from duet.serve.errors import QueueFull
from duet.serve.metrics import Metrics
from duet.serve.mock import MockConfig, MockRuntime
from duet.serve.models import ServedModels
from duet.serve.scheduler import SchedulerConfig
from duet.serve.text_stream import ROUTE
from duet.tts.request import SynthesisRequest

A = MockConfig(name="mock-a", voices=("anna", "alloy"), sample_rate=16_000, samples_per_frame=320)
B = MockConfig(name="mock-b", voices=("bob",), sample_rate=24_000, samples_per_frame=480, clone_from_audio=False)
ALIASES = (("tts-1", "mock-a"), ("tts-1-hd", "mock-b"))


def engine_for(mock: MockConfig, script=None, **scheduler) -> Engine:
    return Engine(MockRuntime(mock, script=script), EngineConfig(scheduler=SchedulerConfig(**scheduler)))


@pytest.fixture
def two():
    """A server of mock-a (16 kHz) and mock-b (24 kHz) with an alias each: (client, engine a, engine b)."""
    a, b = engine_for(A), engine_for(B)
    with TestClient(create_app([a, b], ServeConfig(model_aliases=ALIASES))) as client:
        yield client, a, b


def speech(client, model: str, **fields):
    return client.post("/v1/audio/speech", json={"model": model, "input": "hello", "seed": 1, **fields})


def test_the_model_field_picks_the_engine_and_its_sample_rate(two):
    client, a, b = two
    for model, engine, mock in (("mock-a", a, A), ("mock-b", b, B), ("tts-1-hd", b, B)):
        before = len(engine.runtime.prefilled)
        r = speech(client, model)
        assert r.status_code == 200, r.text
        audio, sr = sf.read(io.BytesIO(r.content))
        assert sr == int(r.headers["x-sample-rate"]) == mock.sample_rate
        assert audio.shape == (len("hello") * mock.samples_per_frame,)
        assert len(engine.runtime.prefilled) == before + 1
    assert len(a.runtime.prefilled) == 1 and len(b.runtime.prefilled) == 2
    assert speech(client, "mock-b").status_code == 200  # no voice: mock-b's own default, not mock-a's
    assert b.runtime.prefilled[-1].voice == "bob"
    bad = speech(client, "mock-b", voice="anna")  # a voice of the other model
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "voice_not_found"


def test_models_lists_every_model_then_the_aliases(two):
    client, _, _ = two
    data = client.get("/v1/models").json()["data"]
    assert [(m["id"], m["root"]) for m in data] == [("mock-a", "mock-a"), ("mock-b", "mock-b"), *ALIASES]
    assert all(m["object"] == "model" and m["owned_by"] == "duet" for m in data)


def test_voices_are_the_named_models_and_default_to_the_first(two):
    client, _, _ = two
    first = client.get("/v1/audio/voices").json()
    assert (first["model"], [v["id"] for v in first["data"]], first["sample_rate"], first["cloning"]) == (
        "mock-a", ["anna", "alloy"], 16_000, True)
    second = client.get("/v1/audio/voices", params={"model": "tts-1-hd"}).json()
    assert (second["model"], [v["id"] for v in second["data"]], second["sample_rate"], second["cloning"]) == (
        "mock-b", ["bob"], 24_000, False)


def test_an_unknown_model_is_openais_404_everywhere(two):
    client, _, _ = two
    for r in (speech(client, "gpt-4o-mini-tts"), client.get("/v1/audio/voices", params={"model": "gpt-4o-mini-tts"})):
        assert r.status_code == 404
        assert r.json() == {"error": {"message": "model 'gpt-4o-mini-tts' not found; this server has mock-a, mock-b, "
                                                 "tts-1, tts-1-hd",
                                      "type": "invalid_request_error", "param": "model", "code": "model_not_found"}}
    with client.websocket_connect(ROUTE) as ws:
        ws.send_json({"type": "session.start", "model": "gpt-4o-mini-tts"})
        event = ws.receive_json()
        assert event["type"] == "error" and event["code"] == "model_not_found"


def test_a_text_stream_speaks_with_the_model_it_names(two):
    client, a, b = two
    with client.websocket_connect(ROUTE) as ws:
        ws.send_json({"type": "session.start", "model": "tts-1-hd", "seed": 3})
        started = ws.receive_json()
        assert (started["model"], started["sample_rate"]) == ("mock-b", 24_000)
        ws.send_json({"type": "text.delta", "delta": "Hello there."})
        ws.send_json({"type": "text.done"})
        audio = b""
        while True:
            message = ws.receive()
            if message.get("bytes") is not None:
                audio += message["bytes"]
            elif json.loads(message["text"])["type"] == "session.done":
                break
    assert len(audio) == 2 * len("Hello there.") * B.samples_per_frame
    assert [r.text for r in b.runtime.prefilled] == ["Hello there."] and a.runtime.prefilled == []


def test_health_and_metrics_cover_every_model(two):
    client, a, b = two
    assert speech(client, "mock-b").status_code == 200
    health = client.get("/health")
    assert health.status_code == 200
    assert health.json() == {"status": "ok", "model": "mock-a", "running": 0, "waiting": 0,
                             "models": {"mock-a": {"status": "ok", "running": 0, "waiting": 0},
                                        "mock-b": {"status": "ok", "running": 0, "waiting": 0}}}
    text = client.get("/metrics").text
    for model, n in (("mock-a", 0), ("mock-b", 1)):
        assert f'duet_engine_finished_total{{model="{model}",reason="stop"}} {n}' in text
        assert f'duet_ttfa_seconds_count{{model="{model}"}} {n}' in text
        assert f'duet_queue_depth{{model="{model}"}} 0' in text
    assert text.count("# TYPE duet_queue_depth gauge") == 1  # one family, a series per model

    b.stop()  # one engine down: the server is not healthy, and says which
    down = client.get("/health")
    assert down.status_code == 503 and down.json()["status"] == "engine_down"
    assert {name: m["status"] for name, m in down.json()["models"].items()} == {"mock-a": "ok", "mock-b": "engine_down"}
    assert speech(client, "mock-a").status_code == 200  # the other model still serves


def test_startup_and_shutdown_start_and_stop_every_engine():
    closed = []

    class Closing(MockRuntime):
        def close(self):
            closed.append((self.name, engines[self.name].alive))

    engines = {mock.name: Engine(Closing(mock), EngineConfig()) for mock in (A, B)}
    with TestClient(create_app(list(engines.values()))) as client:
        assert all(engine.alive for engine in engines.values()) and closed == []
        assert client.get("/health").status_code == 200
    assert not any(engine.alive for engine in engines.values())
    assert closed == [("mock-a", False), ("mock-b", False)]


def test_a_flood_on_one_model_leaves_anothers_queue_and_first_audio_alone(never_stop):
    """Model A's batch and waiting queue are full (its requests never end); model B is served as if A were idle:
    structurally (A's queue holds still while B's requests come and go) and in time (B's time to its whole short
    answer, which bounds its first audio, stays within 2x of its unloaded time, plus 50 ms of scheduling noise)."""
    a = engine_for(MockConfig(name="mock-a", step_delay_s=0.005), script=never_stop, max_running=2, max_waiting=16)
    b = engine_for(B, max_running=2, max_waiting=16)

    def b_seconds(client) -> float:
        t0 = time.perf_counter()
        assert speech(client, "mock-b", input="hi", response_format="pcm").status_code == 200
        return time.perf_counter() - t0

    with TestClient(create_app([a, b])) as client:
        unloaded = statistics.median(b_seconds(client) for _ in range(7))
        flood = [a.submit(SynthesisRequest(text="forever")) for _ in range(18)]
        wait_until(lambda: a.stats().running == 2, what="model A's batch to fill")
        with pytest.raises(QueueFull):
            a.submit(SynthesisRequest(text="one more"))  # A is saturated: it refuses more
        flooded = statistics.median(b_seconds(client) for _ in range(7))
        stats_a, stats_b = a.stats(), b.stats()
        for handle in flood:
            handle.cancel()
    assert (stats_a.running, stats_a.waiting, stats_a.finished["stop"]) == (2, 16, 0)  # A held still throughout
    assert stats_b.finished["stop"] == 14 and stats_b.waiting == 0
    assert flooded <= 2 * unloaded + 0.05, (flooded, unloaded)


def test_a_backlog_of_slow_preparations_on_one_model_holds_no_worker_thread_another_needs():
    """60 requests for model A whose text preparation hangs: 2 prepare (its ``max_preparing``), 58 wait for their
    turn on the event loop, not in the server's worker threads (a pool of 40), so model B's request is prepared in
    one and answered while A's backlog still waits."""
    gate, preparing = threading.Event(), []

    class Hanging(MockRuntime):
        def check(self, request):
            preparing.append(request.text)
            gate.wait(30)
            super().check(request)

    a, b = Engine(Hanging(A), EngineConfig()), engine_for(B)

    async def run(url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            backlog = [asyncio.create_task(client.post("/v1/audio/speech", json={"model": "mock-a", "input": "x"}))
                       for _ in range(60)]
            await asyncio.sleep(1.0)  # every request of the backlog has arrived and waits
            r = await client.post("/v1/audio/speech", json={"model": "mock-b", "input": "hi"}, timeout=10)
            assert r.status_code == 200 and len(preparing) == 2
            gate.set()
            assert [r.status_code for r in await asyncio.gather(*backlog)] == [200] * 60

    try:
        with uvicorn_server(create_app([a, b])) as url:
            asyncio.run(run(url))
    finally:
        gate.set()


def test_metrics_escape_a_model_id_as_a_label_value():
    text = Metrics(['runs/"x"\\y']).render({})
    assert 'duet_audio_seconds_total{model="runs/\\"x\\"\\\\y"} 0.000000' in text


def test_served_models_refuse_clashing_ids_and_bad_aliases():
    with pytest.raises(DuetError, match="two models have the id mock-a"):
        ServedModels([engine_for(A), engine_for(A)])
    for aliases, message in [
        ((("mock-b", "mock-a"),), "is a model's id already"),
        ((("tts-1", "mock-a"), ("tts-1", "mock-b")), "given twice"),
        ((("tts-1", "gepard-tiny"),), "no such model; this server has mock-a, mock-b"),
    ]:
        with pytest.raises(DuetError, match=message):
            ServedModels([engine_for(A), engine_for(B)], aliases)


# --- duet serve A B ... ----------------------------------------------------------------------------------------------


def serve_args(*argv: str):
    return build_parser("serve").parse_args(["serve", *argv])


def test_serve_takes_several_models_or_one_with_model():
    from duet.serve.cli import DEFAULT_MODEL, requested_models

    assert requested_models(serve_args("gepard-tiny", "luna-tiny", "mock")) == ("gepard-tiny", "luna-tiny", "mock")
    assert requested_models(serve_args("--model", "mock")) == ("mock",)
    assert requested_models(serve_args()) == (DEFAULT_MODEL,)


@pytest.mark.parametrize(("argv", "message"), [
    (["gepard-tiny", "--model", "luna-tiny"], "as arguments (gepard-tiny) or with --model, not both: drop --model"),
    (["luna-tiny", "--checkpoint", "luna-tiny"], "not both: drop --checkpoint"),
    (["mock", "luna-tiny", "mock"], "mock is named twice"),
    (["gepard-tiny", "luna"], "luna is a family, not a model"),
    (["gepard-tiny", "mock", "--engine", "vllm"], "--engine vllm serves one model, got 2"),
    (["mock", "--verify-asr", "/no/such/whisper"], "--verify-asr: ASR model '/no/such/whisper' is neither"),
])
def test_serve_refuses_a_confused_command_line_in_one_line(argv, message, capsys):
    assert main(["serve", *argv, "--malloc-arenas", "0"]) == 2  # before any model loads or the process restarts
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_model_aliases_name_their_model():
    from duet.serve.cli import model_aliases

    assert model_aliases(["tts-1"], ["mock-a"]) == (("tts-1", "mock-a"),)  # one model: a bare name will do
    assert model_aliases(["tts-1=mock-b", "x = mock-a"], ["mock-a", "mock-b"]) == (("tts-1", "mock-b"), ("x", "mock-a"))
    with pytest.raises(DuetError, match="with several models say which: tts-1=MODEL, MODEL one of mock-a, mock-b"):
        model_aliases(["tts-1"], ["mock-a", "mock-b"])
    for bad in ("=mock-a", "tts-1="):
        with pytest.raises(DuetError, match="expected NAME=MODEL"):
            model_aliases([bad], ["mock-a"])


@pytest.fixture(scope="module")
def luna_dir(tmp_path_factory):
    from checkpoint_testing import write_tiny_luna

    return write_tiny_luna(tmp_path_factory.mktemp("luna"))


def test_serve_builds_one_engine_per_model_each_at_its_own_rate(luna_dir):
    from duet.serve.cli import build_app

    app = build_app(serve_args("mock", str(luna_dir), "--model-alias", "tts-1=luna-test", "--max-queue", "3"))
    models = app.state.models
    assert [m.name for m in models] == ["duet-mock", "luna-test"]
    assert len({id(m.engine) for m in models}) == 2 and all(m.engine.config.scheduler.max_waiting == 3 for m in models)
    with TestClient(app) as client:
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["duet-mock", "luna-test", "tts-1"]
        for name, model in (("duet-mock", models.models[0]), ("tts-1", models.models[1])):
            r = speech(client, name, steps=2)
            assert r.status_code == 200, r.text
            assert sf.read(io.BytesIO(r.content))[1] == model.sample_rate == int(r.headers["x-sample-rate"])
    with pytest.raises(DuetError, match="with several models say which"):
        build_app(serve_args("mock", str(luna_dir), "--model-alias", "tts-1"))
