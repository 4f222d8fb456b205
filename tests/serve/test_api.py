"""The OpenAI-compatible HTTP API through FastAPI's TestClient, on the mock model."""

import base64
import io
import json
import random

import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient
from serve_testing import wait_until

from duet.serve.api import ServeConfig, create_app
from duet.serve.engine import Engine, EngineConfig
from duet.serve.mock import MockConfig, MockRuntime
from duet.serve.scheduler import SchedulerConfig
from duet.text.tokens import EMOTIONS, NONVERBALS
from duet.tts.request import SynthesisRequest

MOCK = MockConfig()
SPF, SR = MOCK.samples_per_frame, MOCK.sample_rate


def client_for(mock: MockConfig = MOCK, config: ServeConfig = ServeConfig(), script=None, **scheduler):
    runtime = MockRuntime(mock, script=script)
    engine = Engine(runtime, EngineConfig(scheduler=SchedulerConfig(**scheduler)))
    return TestClient(create_app(engine, config)), engine, runtime


@pytest.fixture
def api():
    client, engine, runtime = client_for()
    with client:
        yield client, engine, runtime


def speech(client, **fields):
    body = {"model": "duet-mock", "input": "hello world", "voice": "alloy", "seed": 3, **fields}
    return client.post("/v1/audio/speech", json=body)


def sse_events(text: str) -> list[dict]:
    blocks = [b for b in text.split("\n\n") if b.strip()]
    assert all(b.startswith("data: ") for b in blocks), blocks
    return [json.loads(b[len("data: "):]) for b in blocks]


def pcm_to_float(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2").astype(np.float64) / 32767.0


def wav_bytes(seconds: float, sr: int, fmt: str = "WAV") -> bytes:
    buf = io.BytesIO()
    sf.write(buf, 0.1 * np.sin(np.arange(int(seconds * sr)) / 5.0), sr, format=fmt)
    return buf.getvalue()


def test_wav_response_parses_with_the_expected_length(api):
    client, _, _ = api
    r = speech(client, input="eleven char")  # the mock speaks one frame per character
    assert r.status_code == 200 and r.headers["content-type"] == "audio/wav"
    assert r.headers["x-sample-rate"] == str(SR)
    audio, sr = sf.read(io.BytesIO(r.content))
    assert sr == SR and audio.shape == (11 * SPF,)


def test_sse_deltas_concatenate_to_the_non_streamed_audio(api):
    client, _, _ = api
    plain = speech(client, response_format="pcm")
    streamed = speech(client, response_format="pcm", stream_format="sse")
    assert streamed.headers["content-type"].startswith("text/event-stream")
    events = sse_events(streamed.text)
    assert [e["type"] for e in events] == ["speech.audio.delta"] * (len(events) - 1) + ["speech.audio.done"]
    assert all(set(e) == {"type", "audio"} for e in events[:-1]) and len(events) > 2
    joined = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    assert joined == plain.content and len(joined) == 11 * SPF * 2
    usage = events[-1]["usage"]
    assert usage["output_tokens"] == 11 and usage["total_tokens"] == usage["input_tokens"] + 11
    assert events[-1]["duet"]["finish_reason"] == "stop"


def test_sse_wav_and_flac_decode_to_the_same_samples(api):
    client, _, _ = api
    pcm = pcm_to_float(speech(client, response_format="pcm").content)
    events = sse_events(speech(client, response_format="wav", stream_format="sse").text)
    wav, _ = sf.read(io.BytesIO(b"".join(base64.b64decode(e["audio"]) for e in events[:-1])))
    flac, sr = sf.read(io.BytesIO(speech(client, response_format="flac").content))
    assert sr == SR
    np.testing.assert_allclose(wav, pcm, atol=1.5 / 32767)
    np.testing.assert_allclose(flac, pcm, atol=1.5 / 32767)


def test_sampled_codes_survive_the_http_path(api):
    client, _, runtime = api
    greedy = pcm_to_float(speech(client, response_format="pcm", temperature=0).content)
    assert (runtime.codec.codes_from_audio(greedy) == 0).all()
    top2 = runtime.codec.codes_from_audio(pcm_to_float(speech(client, response_format="pcm", top_k=2).content))
    assert set(np.unique(top2)) == {0, 1}


def test_speed_voice_object_and_instructions_reach_the_runtime(api):
    client, _, runtime = api
    r = speech(client, input="twenty characters!!!", speed=2.0, voice={"id": "echo"}, instructions="happy",
               response_format="pcm")
    # the mock speaks ceil(chars / speed) frames; faster than 1.25 they are made at 1.25 and the audio compressed
    # the rest of the way (duet.tts.retime, as duet speak does): 16 frames' audio as long as 10 frames'
    assert r.status_code == 200 and len(r.content) == 10 * SPF * 2
    seen = runtime.prefilled[-1]
    assert (seen.voice, seen.emotion, seen.speed) == ("echo", "happy", 1.25)  # instructions read as an emotion


def test_queue_full_answers_429_with_retry_after(never_stop):
    client, engine, _ = client_for(MockConfig(step_delay_s=0.01), script=never_stop, max_running=1, max_waiting=0,
                                   retry_after_s=2.5)
    with client:
        holder = engine.submit(SynthesisRequest(text="x"))  # holds the only slot; no queue behind it
        r = speech(client)
        assert r.status_code == 429 and r.headers["retry-after"] == "3"
        assert r.json()["error"]["type"] == "rate_limit_error"
        holder.cancel()
        wait_until(lambda: engine.stats().running == 0, what="the slot to free")
        assert speech(client, max_frames=4).status_code == 200


def test_bad_requests_get_openai_shaped_4xx_and_the_server_keeps_serving(api):
    client, _, _ = api
    cases = [
        (b"{not json", 400), (b"[1, 2]", 400), (json.dumps({"input": "hi"}).encode(), 400),
        (json.dumps({"model": "nope", "input": "hi"}).encode(), 404),
        (json.dumps({"model": "duet-mock", "input": ""}).encode(), 400),
        (json.dumps({"model": "duet-mock", "input": "   "}).encode(), 400),
        (json.dumps({"model": "duet-mock", "input": 5}).encode(), 400),
        (json.dumps({"model": "duet-mock", "input": "hi", "voice": "nobody"}).encode(), 400),
        (json.dumps({"model": "duet-mock", "input": "hi", "response_format": "mp3"}).encode(), 400),
        (json.dumps({"model": "duet-mock", "input": "hi", "response_format": "flac", "stream_format": "sse"}).encode(),
         400),
        (json.dumps({"model": "duet-mock", "input": "hi", "speed": 9}).encode(), 400),
        (json.dumps({"model": "duet-mock", "input": "hi", "speed": "fast"}).encode(), 400),
        (json.dumps({"model": "duet-mock", "input": "hi", "stream_format": "video"}).encode(), 400),
        (json.dumps({"model": "duet-mock", "input": "hi", "top_p": 0}).encode(), 400),
        (json.dumps({"model": "duet-mock", "input": "hi", "max_frames": 10**6}).encode(), 400),
        (json.dumps({"model": "duet-mock", "input": "hi", "unknown_field": 1}).encode(), 400),
        (json.dumps({"model": "duet-mock", "input": "hi", "reference_audio": "%%%"}).encode(), 400),
        (json.dumps({"model": "duet-mock", "input": "hi",
                     "reference_audio": base64.b64encode(b"RIFF garbage").decode()}).encode(), 400),
        (json.dumps({"model": "duet-mock", "input": "x" * 5000}).encode(), 400),
    ]
    for body, status in cases:
        r = client.post("/v1/audio/speech", content=body, headers={"content-type": "application/json"})
        assert r.status_code == status, (body[:80], r.text)
        error = r.json()["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"]
        assert speech(client, input="ok").status_code == 200  # and the next good request is served
    assert client.get("/no/such/route").json()["error"]["code"] == "not_found"
    assert client.get("/v1/audio/speech").status_code == 405


def test_fuzzed_requests_never_get_a_5xx(api):
    client, _, _ = api
    rng = random.Random(0)
    values = [None, True, 0, -1, 1.5, 1e308, "", "x" * 5000, "alloy", [], {}, {"id": 3}, "wav", "sse", "\x00",
              "duet-mock", "\ud7ff" * 3, 2**70]
    keys = ["model", "input", "voice", "response_format", "speed", "stream_format", "instructions", "seed",
            "temperature", "top_k", "top_p", "max_frames", "reference_audio", "stop_threshold", "junk"]
    statuses = []
    for _ in range(200):
        body = {"model": "duet-mock", "input": "hi"}
        for key in rng.sample(keys, rng.randint(1, 4)):
            body[key] = rng.choice(values)
        raw = json.dumps(body).encode()
        if rng.random() < 0.15:
            raw = raw[: rng.randint(0, len(raw))]  # truncated JSON
        r = client.post("/v1/audio/speech", content=raw, headers={"content-type": "application/json"})
        statuses.append(r.status_code)
        assert r.status_code < 500, (raw[:120], r.text)
        if r.status_code >= 400:
            assert "error" in r.json()
    assert statuses.count(200) > 0 and sum(s >= 400 for s in statuses) > 100
    assert speech(client).status_code == 200


def test_body_and_text_limits_are_configurable():
    config = ServeConfig(max_body_bytes=2000, max_input_chars=50)
    client, _, _ = client_for(config=config)
    with client:
        assert speech(client, input="y" * 51).json()["error"]["code"] == "string_above_max_length"
        r = speech(client, input="z" * 40, instructions="i" * 3000)
        assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
        assert speech(client, input="z" * 50).status_code == 200


def test_voice_cloning_from_an_upload_or_base64(api):
    client, _, runtime = api
    clip = wav_bytes(2.0, 8000)
    r = client.post("/v1/audio/speech", data={"model": "duet-mock", "input": "clone me", "seed": "1"},
                    files={"reference_audio": ("ref.wav", clip, "audio/wav")})
    assert r.status_code == 200, r.text
    reference = runtime.prefilled[-1].reference
    assert reference is not None and reference.shape == (2 * SR,)  # resampled to the codec's rate
    flac = base64.b64encode(wav_bytes(1.0, SR, "FLAC")).decode()
    r = speech(client, reference_audio="data:audio/flac;base64," + flac)
    assert r.status_code == 200 and runtime.prefilled[-1].reference.shape == (SR,)
    too_long = speech(client, reference_audio=base64.b64encode(wav_bytes(31.0, 8000)).decode())
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "reference_too_long"
    too_short = speech(client, reference_audio=base64.b64encode(wav_bytes(0.1, 8000)).decode())
    assert too_short.status_code == 400 and too_short.json()["error"]["param"] == "reference_audio"


def test_cloning_unsupported_is_a_400():
    client, _, _ = client_for(MockConfig(clone_from_audio=False))
    with client:
        r = speech(client, reference_audio=base64.b64encode(wav_bytes(2.0, 8000)).decode())
        assert r.status_code == 400 and r.json()["error"]["code"] == "cloning_unsupported"
        assert client.get("/v1/audio/voices").json()["cloning"] is False


def test_models_health_voices(api):
    client, _, _ = api
    assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["duet-mock"]
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert [v["id"] for v in client.get("/v1/audio/voices").json()["data"]] == ["alloy", "echo"]


def test_voices_list_the_emotions_and_tags_a_model_takes():
    """What the web page's emotion selector and tag buttons read; a model without them lists none, and refuses an
    emotion (instructions) that the other takes."""
    for expressive in (True, False):
        client, _, _ = client_for(MockConfig(expressive=expressive))
        with client:
            voices = client.get("/v1/audio/voices").json()
            assert voices["emotions"] == (list(EMOTIONS) if expressive else [])
            assert voices["tags"] == (list(NONVERBALS) if expressive else [])
            r = speech(client, input="Well [laughter] hello", instructions="happy")
            assert r.status_code == (200 if expressive else 400), r.text
            assert expressive or r.json()["error"]["code"] == "emotion_unsupported"


def test_metrics_count_requests_after_traffic(api):
    client, _, _ = api
    for _ in range(3):
        assert speech(client).status_code == 200
    assert speech(client, voice="nobody").status_code == 400
    text = client.get("/metrics").text
    assert 'duet_requests_total{method="POST",route="/v1/audio/speech",status="200"} 3' in text
    assert 'duet_requests_total{method="POST",route="/v1/audio/speech",status="400"} 1' in text
    assert 'duet_ttfa_seconds_count{model="duet-mock"} 3' in text and 'duet_rtf_count{model="duet-mock"} 3' in text
    assert "duet_active_streams 0" in text and 'duet_queue_depth{model="duet-mock"} 0' in text
    assert 'duet_engine_finished_total{model="duet-mock",reason="stop"} 3' in text
    for line in text.splitlines():  # every sample line is "name{labels} number"
        if line and not line.startswith("#"):
            float(line.rsplit(" ", 1)[1])


def test_runtime_close_runs_when_the_server_stops():
    """Runtimes that own processes (the vLLM one) get ``close()`` on shutdown, after the engine has stopped."""
    closed = []

    class Closing(MockRuntime):
        def close(self):
            closed.append(engine.alive)

    engine = Engine(Closing(MOCK), EngineConfig())
    with TestClient(create_app(engine, ServeConfig())) as client:
        assert client.get("/health").status_code == 200
        assert closed == []
    assert closed == [False]


def test_fields_a_request_leaves_out_take_the_models_defaults():
    from duet.sampling import SamplingParams

    client, _, runtime = client_for(MockConfig(params=SamplingParams(temperature=0.5, top_k=7)))
    with client:
        assert speech(client, response_format="pcm").status_code == 200
        assert (runtime.prefilled[-1].params.temperature, runtime.prefilled[-1].params.top_k) == (0.5, 7)
        assert speech(client, response_format="pcm", temperature=1.0).status_code == 200
        assert (runtime.prefilled[-1].params.temperature, runtime.prefilled[-1].params.top_k) == (1.0, 7)


def test_hostile_inputs_are_clear_4xx_not_5xx(api):
    """Each of these was a 500 or a silent 200: a huge top_k, a lone surrogate, deeply nested JSON, a body that is
    not JSON by its content type, a 100 KB model name echoed back whole."""
    client, _, _ = api
    post = lambda raw, ctype="application/json": client.post(  # noqa: E731
        "/v1/audio/speech", content=raw, headers={"content-type": ctype})
    for top_k in (2**63, 10**30, 65_537):
        r = post(json.dumps({"model": "duet-mock", "input": "hi", "top_k": top_k}).encode())
        assert r.status_code == 400 and r.json()["error"]["param"] == "top_k"
    r = post(b'{"model": "duet-mock", "input": "h\\ud800i"}')  # JSON allows a lone surrogate; text tools do not
    assert r.status_code == 400 and "surrogate" in r.json()["error"]["message"]
    r = post(b'{"a":' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    assert r.status_code == 400 and "nested" in r.json()["error"]["message"]
    for ctype in ("text/plain", "application/xml"):
        assert post(json.dumps({"model": "duet-mock", "input": "hi"}).encode(), ctype).status_code == 415
    r = post(json.dumps({"model": "m" * 100_000, "input": "hi"}).encode())
    assert r.status_code == 404 and len(r.json()["error"]["message"]) < 300
    r = post(json.dumps({"model": "duet-mock", "input": "hi", "steps": 1024}).encode())
    assert r.status_code == 400 and r.json()["error"]["param"] == "steps"
    assert speech(client, input="ok").status_code == 200  # and the server keeps serving


def test_openai_voice_names_mean_the_default_voice(api):
    client, _, runtime = api
    assert "nova" not in runtime.traits.voices
    r = speech(client, voice="nova")
    assert r.status_code == 200
    assert speech(client, voice="not-an-openai-voice").status_code == 400  # other unknown names stay an error


def test_slow_text_preparation_never_blocks_health():
    """A request whose preparation takes seconds (Luna's duration model on a 4,000-digit number, espeak-ng) is
    admitted in a worker thread: /health answers meanwhile."""
    import threading
    import time

    class SlowRuntime(MockRuntime):
        def check(self, request):
            time.sleep(1.5)
            super().check(request)

    engine = Engine(SlowRuntime(MOCK), EngineConfig())
    with TestClient(create_app(engine, ServeConfig())) as client:
        result = {}
        worker = threading.Thread(target=lambda: result.setdefault("r", speech(client)))
        worker.start()
        time.sleep(0.3)  # the speech request is inside validate now
        started = time.perf_counter()
        assert client.get("/health").status_code == 200
        assert time.perf_counter() - started < 0.5
        worker.join()
        assert result["r"].status_code == 200


def test_api_docs_are_served_only_when_asked():
    client, _, _ = client_for()
    with client:
        assert client.get("/openapi.json").status_code == 404 and client.get("/docs").status_code == 404
    client, _, _ = client_for(config=ServeConfig(api_docs=True))
    with client:
        assert client.get("/openapi.json").json()["info"]["title"] == "duet"


def test_a_response_sent_whole_says_how_its_generation_ended(never_stop):
    """flac leaves once the generation has ended: its X-Finish-Reason header says stop or bound (a WAV used to be
    a 200 with no sign that it ran into its frame bound)."""
    client, _, _ = client_for(script=lambda request: 4 if request.text == "stops" else None)
    with client:
        r = speech(client, input="stops", response_format="flac")
        assert r.status_code == 200 and r.headers["x-finish-reason"] == "stop"
        assert sf.info(io.BytesIO(r.content)).frames == 4 * SPF
        r = speech(client, input="runs on", response_format="flac")  # never stops: the mock's 500-frame bound
        assert r.status_code == 200 and r.headers["x-finish-reason"] == "bound"
        assert sf.info(io.BytesIO(r.content)).frames == MOCK.max_frames * SPF


def test_a_generation_with_no_audio_is_still_a_readable_flac():
    client, _, _ = client_for(script=lambda request: 0)  # the stop head fires at the first step
    with client:
        r = speech(client, response_format="flac")
        assert r.status_code == 200 and r.headers["x-finish-reason"] == "stop"
        audio, sr = sf.read(io.BytesIO(r.content))
        assert sr == SR and audio.shape == (1,) and audio[0] == 0.0


def test_a_request_past_its_time_budget_is_a_504_and_the_next_one_is_served():
    engine = Engine(MockRuntime(MockConfig(step_delay_s=0.02)), EngineConfig(time_budget_s=0.3,
                                                                            time_budget_per_audio_s=0.0))
    with TestClient(create_app(engine)) as client:
        r = speech(client, input="x" * 200, response_format="flac")  # 200 steps of 20 ms: past 0.3 s
        assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
        assert "time budget" in r.json()["error"]["message"]
        assert speech(client, input="short").status_code == 200
        assert engine.stats().finished["error"] == 1


def test_server_limits_refuse_nonsense_timeouts():
    from duet.errors import DuetError

    for field in ("header_timeout_s", "body_timeout_s", "stream_idle_timeout_s"):
        with pytest.raises(DuetError, match="timeouts must be positive"):
            ServeConfig(**{field: 0.0})


def test_a_body_that_is_not_utf8_is_a_400(api):
    """JSON between systems is UTF-8; a UTF-16 body used to be decoded by guesswork and answered 200."""
    client, _, _ = api
    body = json.dumps({"model": "duet-mock", "input": "hi"})
    for encoding in ("utf-16", "utf-32"):
        r = client.post("/v1/audio/speech", content=body.encode(encoding), headers={"content-type": "application/json"})
        assert r.status_code == 400 and "UTF-8" in r.json()["error"]["message"]
    assert client.post("/v1/audio/speech", content=body.encode(), headers={"content-type": "application/json"}
                       ).status_code == 200


@pytest.mark.parametrize("field, value", [
    ("temperature", float("nan")), ("temperature", 10.5), ("top_k", 65_537), ("top_k", 2**63), ("seed", -1),
    ("seed", 2**63), ("steps", 0), ("steps", 129), ("speed", 0.2), ("speed", 4.5),
])
def test_duet_speak_refuses_what_the_api_refuses(api, field, value):
    """One set of bounds: a value the speech API answers with a 400 is refused by `duet speak` before it loads
    anything (a NaN temperature, a 2**63 top_k and a step count of 129 were once run by one and refused by the
    other)."""
    from duet.errors import DuetError
    from duet.tts.cli import check_luna_options, check_sampling

    client, _, _ = api
    r = client.post("/v1/audio/speech", content=json.dumps({"model": "duet-mock", "input": "hi", field: value}),
                    headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["param"] == field
    with pytest.raises(DuetError, match=f"--{field.replace('_', '-')} must be"):
        if field in ("steps", "speed"):
            check_luna_options("luna-tiny", **{"steps": None, "speed": None, field: value})
        else:
            check_sampling(**{"temperature": None, "top_k": None, "seed": None, field: value})


def test_duet_speak_takes_the_bounds_the_api_takes(api):
    from duet.tts.cli import check_luna_options, check_sampling

    client, _, _ = api
    for field, value in (("temperature", 10.0), ("top_k", 65_536), ("seed", 2**63 - 1)):
        assert speech(client, **{field: value}).status_code == 200
        check_sampling(**{"temperature": None, "top_k": None, "seed": None, field: value})
    assert check_luna_options("luna-tiny", steps=128, speed=None) == {"steps": 128}
    assert check_luna_options("luna-tiny", steps=None, speed=4.0) == {"speed": 4.0}


def test_text_preparation_past_the_time_budget_is_a_504():
    import time

    class SlowRuntime(MockRuntime):
        def check(self, request):
            if request.text == "slow":
                time.sleep(1.5)
            super().check(request)

    engine = Engine(SlowRuntime(MOCK), EngineConfig(time_budget_s=0.3))
    with TestClient(create_app(engine)) as client:
        started = time.perf_counter()
        r = speech(client, input="slow")
        assert r.status_code == 504 and r.json()["error"]["code"] == "timeout"
        assert time.perf_counter() - started < 1.2
        assert speech(client, input="fast").status_code == 200


def test_text_preparations_run_at_most_max_preparing_at_once():
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    lock, running, most = threading.Lock(), [0], [0]

    class CountingRuntime(MockRuntime):
        def check(self, request):
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.2)
            with lock:
                running[0] -= 1
            super().check(request)

    engine = Engine(CountingRuntime(MOCK), EngineConfig())
    with TestClient(create_app(engine, ServeConfig(max_preparing=2))) as client:
        with ThreadPoolExecutor(6) as pool:
            codes = list(pool.map(lambda i: speech(client, input=f"hello {i}").status_code, range(6)))
    assert codes == [200] * 6
    assert most[0] == 2  # six at once were prepared two by two


def test_a_request_the_server_cannot_finish_in_time_is_a_503_with_retry_after_at_once():
    """Admission by cost (``duet.serve.cost``): at 10 ms a step, 300 frames cannot end within a 1 s budget, so the
    request is answered 503 before it is queued, with a Retry-After; a short one is served as usual."""
    import time

    engine = Engine(MockRuntime(MockConfig(step_delay_s=0.01)), EngineConfig(time_budget_s=1.0,
                                                                            time_budget_per_audio_s=0.0))
    with TestClient(create_app(engine)) as client:
        assert speech(client, input="warm").status_code == 200  # the first steps are timed
        started = time.perf_counter()
        r = speech(client, input="x" * 300)
        assert r.status_code == 503 and time.perf_counter() - started < 0.5
        assert r.json()["error"]["code"] == "server_overloaded" and int(r.headers["retry-after"]) >= 1
        assert speech(client, input="short").status_code == 200
        assert engine.stats().finished["error"] == 0  # nothing timed out
