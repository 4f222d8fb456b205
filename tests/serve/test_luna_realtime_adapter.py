"""Luna Realtime's runtime behind the serving adapter on randomly initialised micro Realtime models in the shipped format
(``checkpoint_testing.write_tiny_luna_realtime``, blocks of 4 frames), with the end head's bias set to pick how they
end: -20 never ends (every request runs to its bound), +20 ends at once, 0.003 ends inside a later block on these
weights.

Random weights say nothing about quality; these tests pin that serving Luna Realtime is exactly Luna Realtime:
- a request served alone through the engine gives the codes and the audio of the Speaker (``duet speak``'s
  streaming pipeline) at the same seed and steps, whether it ends on its bound or on the learned end of speech;
- frames come out block by block, one block per ``steps`` engine steps, so audio arrives before the request ends;
- requests with different texts, steps, sampling and bounds, joining at different steps, each get their solo codes;
- the end head ends a request ("stop"), the bound ends it otherwise ("bound");
- what the adapter cannot do is an ``InvalidRequest``; the HTTP API streams it as SSE; ``duet serve`` and
  ``duet eval run --model luna-realtime:DIR`` build it.
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from fastapi.testclient import TestClient
from serve_testing import drive

from checkpoint_testing import write_tiny_luna_realtime
from duet.eval.synth import SynthOptions, load_synthesizer
from duet.eval.testset import TestItem
from duet.finish import BOUND, STOP
from duet.luna.stream import StreamConfig, collect, stream_speech
from duet.serve.adapter import FamilyAdapter, ModelAdapter, SynthesisRequest, load_adapter
from duet.serve.api import create_app
from duet.serve.cli import FAMILIES
from duet.serve.engine import Engine
from duet.serve.errors import InvalidRequest
from duet.text.prompts import luna_prompt
from duet.tts.luna_realtime import RealtimeRuntime, load_realtime_runtime
from duet.tts.sampling import SamplingParams
from duet.tts.speaker import Speaker

SHORT, MID, LONG = "Good morning.", "Hello there, how are you?", "The quick brown fox jumps over the lazy dog."
BK = 4  # frames per block of the test models


def write(tmp_path_factory, label: str, end_bias: float):
    return write_tiny_luna_realtime(tmp_path_factory.mktemp(label), block_size=BK, end_bias=end_bias)


@pytest.fixture(scope="module")
def never_dir(tmp_path_factory):
    return write(tmp_path_factory, "never", -20.0)


@pytest.fixture(scope="module")
def adapter(never_dir) -> FamilyAdapter:
    return load_adapter(str(never_dir), name="luna-realtime")


@pytest.fixture(scope="module")
def speaker(never_dir) -> Speaker:
    """An independently loaded copy of the same checkpoint, for the expected values."""
    return Speaker(load_realtime_runtime(never_dir))


def request(text: str, seed: int, steps: int, **params) -> SynthesisRequest:
    return SynthesisRequest(text=text, params=SamplingParams(seed=seed, steps=steps, **params))


def offline(speaker: Speaker, text: str, seed: int, steps: int, **kw):
    """The speaker's stream of one single-sentence text -> (codes (Q, T), audio, "stop" | "bound", blocks)."""
    ended: list[str] = []
    result = collect(speaker.chunks(text, seed=seed, steps=steps, ended=ended, **kw))
    audio = speaker.speak(text, seed=seed, steps=steps, **kw).audio
    return result.codes, audio, ended, result.num_chunks


def recording(adapter, monkeypatch) -> dict[str, list[tuple[int, torch.Tensor, bool]]]:
    """Record, by text, (engine step, codes (Q, n), final) of every output that carries frames or ends a request."""
    log: dict[str, list[tuple[int, torch.Tensor, bool]]] = {}
    step, calls = adapter.step, [0]

    def recorded(states):
        outs = step(states)
        calls[0] += 1
        for s, out in zip(states, outs):
            if out.codes.shape[-1] or out.final:
                log.setdefault(s.request.text, []).append((calls[0], out.codes, out.final))
        return outs

    monkeypatch.setattr(adapter, "step", recorded)
    return log


def codes_of(log, text: str) -> torch.Tensor:
    return torch.cat([codes for _, codes, _ in log[text]], dim=1)  # (Q, T)


def test_is_a_model_adapter_and_the_cli_knows_it(adapter):
    assert isinstance(adapter, ModelAdapter) and "luna-realtime" in FAMILIES
    assert adapter.voices == ("default",) and adapter.supports_cloning is False
    b = adapter.runtime.model.config.luna.backbone
    rows = 2  # CFG: each session caches a conditional and an unconditional row
    assert adapter.cache_bytes_per_position == rows * b.num_layers * 2 * b.num_kv_heads * b.head_dim * 4  # float32
    state = adapter.prefill([request(SHORT, seed=0, steps=2)], [0])[0]
    # the cache really holds (R, kv_heads, positions, head_dim) per layer, for keys and for values
    layers = state.session.cache.layers
    assert len(layers) == b.num_layers
    want = (rows, b.num_kv_heads, adapter.prompt_positions(state.request), b.head_dim)
    assert all(tuple(x.keys.shape) == tuple(x.values.shape) == want and x.keys.dtype == torch.float32 for x in layers)


def test_solo_request_through_the_engine_equals_the_speaker_at_its_bound(adapter, speaker, monkeypatch):
    log = recording(adapter, monkeypatch)
    req = request(MID, seed=7, steps=3)
    ids = luna_prompt(MID, speaker.runtime.tokenizer)
    bound = speaker.runtime.bound_for(ids)
    assert adapter.frame_bound(req) == bound and adapter.prompt_positions(req) == len(ids)
    with Engine(adapter) as engine:
        audio, finish = engine.submit(req).collect(timeout=120)
        assert engine.stats().steps == math.ceil(bound / BK) * 3  # one engine step per refinement step
    codes, expected_audio, ended, _ = offline(speaker, MID, seed=7, steps=3)
    assert finish.reason == "bound" and ended == [BOUND] and finish.frames == bound == codes.shape[1]
    assert torch.equal(codes_of(log, MID), codes)
    assert audio.shape == expected_audio.shape == (bound * adapter.codec.samples_per_frame,)
    np.testing.assert_allclose(audio, expected_audio, atol=1e-5)


def test_solo_request_ending_on_the_end_head_equals_the_speaker(tmp_path_factory, monkeypatch):
    model_dir = write(tmp_path_factory, "midway", 0.003)  # on these weights the end head fires in a later block
    config = replace(load_realtime_runtime(model_dir).config, floor_factor=None)  # the end head alone
    adapter = FamilyAdapter(load_realtime_runtime(model_dir, config=config))
    speaker = Speaker(load_realtime_runtime(model_dir, config=config))
    log = recording(adapter, monkeypatch)
    req = request(MID, seed=1, steps=3)
    with Engine(adapter) as engine:
        audio, finish = engine.submit(req).collect(timeout=120)
    codes, expected_audio, ended, blocks = offline(speaker, MID, seed=1, steps=3)
    assert finish.reason == "stop" and ended == [STOP]
    assert BK < finish.frames == codes.shape[1] < adapter.frame_bound(req)  # ended after the first block, early
    assert len(log[MID]) == blocks and log[MID][-1][2] and not any(final for _, _, final in log[MID][:-1])
    assert torch.equal(codes_of(log, MID), codes)
    np.testing.assert_allclose(audio, expected_audio, atol=1e-5)


def test_frames_come_out_block_by_block_before_the_request_ends(adapter, monkeypatch):
    log = recording(adapter, monkeypatch)
    steps, req = 4, request(SHORT, seed=2, steps=4, max_frames=3 * BK + 1)
    with Engine(adapter) as engine:
        handle = engine.submit(req)
        chunks = list(handle)
    # one output with frames every `steps` engine steps: a whole block each, then the bound's single frame
    assert [(at, codes.shape[1]) for at, codes, _ in log[SHORT]] == [(steps * (n + 1), BK if n < 3 else 1)
                                                                     for n in range(4)]
    spf = adapter.codec.samples_per_frame
    assert [len(c) for c in chunks] == [BK * spf] * 3 + [spf]  # each block's audio as soon as it is committed
    assert handle.finish.reason == "bound" and handle.finish.frames == 3 * BK + 1
    assert handle.first_audio_at - handle.submitted_at < handle.finish.wall_s


def test_requests_joining_at_different_steps_each_equal_their_solo_run(adapter, speaker):
    jobs = [
        (0, request(SHORT, seed=1, steps=2)),
        (2, request(LONG, seed=2, steps=3, temperature=0.7, top_k=8, max_frames=10)),  # bound inside a block
        (5, request(MID, seed=3, steps=1)),
    ]
    assert len({r.params.max_frames or adapter.frame_bound(r) for _, r in jobs}) == 3
    batched = drive(adapter, jobs)
    for (_, req), got in zip(jobs, batched):
        assert torch.equal(got, drive(adapter, [(0, req)])[0]), req.text
    # and the capped request is the offline stream cut at 10 frames
    capped = jobs[1][1]
    cfg = StreamConfig(decode=replace(speaker.runtime.config.stream.decode, steps=3, temperature=0.7, top_k=8), max_frames=10)
    ids = torch.tensor(luna_prompt(LONG, speaker.runtime.tokenizer))
    expected = collect(stream_speech(speaker.runtime.model, ids, None, cfg, None, torch.Generator().manual_seed(2))).codes
    assert expected.shape[1] == 10 and torch.equal(batched[1], expected), capped.text


def test_batched_engine_audio_equals_solo_audio(adapter):
    reqs = [request(SHORT, seed=5, steps=2), request(MID, seed=6, steps=3, max_frames=9)]
    with Engine(adapter) as engine:
        handles = [engine.submit(r) for r in reqs]
        together = [h.collect(timeout=120) for h in handles]
        alone = [engine.submit(r).collect(timeout=120) for r in reqs]
    for (a, fa), (b, fb) in zip(together, alone):
        assert a.shape == b.shape and a.size > 0 and fa.reason == fb.reason == "bound"
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_end_of_speech_at_once_stops_with_no_frames(tmp_path_factory, adapter):
    model_dir = write(tmp_path_factory, "at-once", 20.0)
    runtime = load_realtime_runtime(model_dir)
    floor = runtime.floor_for(luna_prompt(MID, runtime.tokenizer))
    with Engine(FamilyAdapter(runtime)) as engine:  # the default floor: speech until floor_for, then the end
        _, finish = engine.submit(request(MID, seed=0, steps=3)).collect(timeout=60)
    assert finish.reason == "stop" and finish.frames == floor > BK
    runtime = load_realtime_runtime(model_dir, config=replace(runtime.config, floor_factor=None))  # the end head
    with Engine(FamilyAdapter(runtime)) as engine:
        audio, finish = engine.submit(request(MID, seed=0, steps=3)).collect(timeout=60)
        assert engine.stats().steps == 1  # the end head is read at the first block's first step
    assert finish.reason == "stop" and finish.frames == 0 and audio.size == 0
    with Engine(adapter) as engine:  # the same text on the model whose end head never fires: its bound
        _, finish = engine.submit(request(MID, seed=0, steps=1)).collect(timeout=60)
    assert finish.reason == "bound" and finish.frames == adapter.frame_bound(request(MID, seed=0, steps=1))


@pytest.mark.parametrize("req, param, code", [
    (SynthesisRequest(text="hi", reference=np.zeros(16_000, dtype=np.float32)), "reference_audio",
     "cloning_unsupported"),
    (SynthesisRequest(text="hi", voice="alloy"), "voice", "voice_not_found"),
    (SynthesisRequest(text=""), "input", None),
    (SynthesisRequest(text="  \n "), "input", None),
    (SynthesisRequest(text="hi", speed=2.0), "speed", None),
    (SynthesisRequest(text="hi", speed=math.nan), "speed", None),
    (SynthesisRequest(text="hi", emotion="bored"), "instructions", "invalid_value"),
    (SynthesisRequest(text="hi", params=SamplingParams(top_p=0.9)), "top_p", None),
    (SynthesisRequest(text=" ".join(["word"] * 300)), "input", "context_length_exceeded"),
    (SynthesisRequest(text=" ".join(["word"] * 600)), "input", "context_length_exceeded"),  # no positions left
    (SynthesisRequest(text="hi", params=SamplingParams(max_frames=510)), "max_frames", "context_length_exceeded"),
])
def test_what_the_adapter_cannot_do_is_an_invalid_request(adapter, req, param, code):
    with pytest.raises(InvalidRequest) as err:
        adapter.validate(req)
    assert err.value.param == param and (code is None or err.value.code == code)
    with Engine(adapter) as engine, pytest.raises(InvalidRequest):
        engine.submit(req)


def test_default_voice_and_steps(adapter, speaker):
    adapter.validate(SynthesisRequest(text="hi", voice="default"))
    state = adapter.prefill([SynthesisRequest(text="hi")], [0])[0]
    assert state.decode == speaker.runtime.config.stream.decode and state.decode.steps == 8


def test_http_sse_streams_audio_deltas_and_done(adapter):
    client = TestClient(create_app(Engine(adapter)))
    with client:
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["luna-realtime"]
        r = client.post("/v1/audio/speech", json={"model": "luna-realtime", "input": SHORT, "seed": 11, "steps": 2,
                                                  "max_frames": 2 * BK + 1, "response_format": "pcm",
                                                  "stream_format": "sse"})
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream"), r.text
        events = [json.loads(b[len("data: "):]) for b in r.text.split("\n\n") if b.strip()]
        assert [e["type"] for e in events] == ["speech.audio.delta"] * (len(events) - 1) + ["speech.audio.done"]
        assert len(events) - 1 >= 2  # more than one block's audio, streamed
        pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
        assert len(pcm) == (2 * BK + 1) * adapter.codec.samples_per_frame * 2  # int16
        done = events[-1]
        assert done["usage"]["output_tokens"] == 2 * BK + 1 and done["duet"]["finish_reason"] == "bound"
        bad = client.post("/v1/audio/speech", json={"model": "luna-realtime", "input": SHORT, "speed": 1.5})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "speed"


def test_eval_registry_runs_luna_realtime_through_the_engine(never_dir, adapter):
    synth = load_synthesizer(f"luna-realtime:{never_dir}", SynthOptions(batch_size=2, steps=1))
    items = [TestItem(f"u{i}", "", None, text, None, i + 1) for i, text in enumerate((SHORT, MID))]
    try:
        out = synth.synthesize(items)
    finally:
        synth.close()
    assert synth.name == never_dir.name
    for item, res in zip(items, out):
        bound = adapter.frame_bound(SynthesisRequest(text=item.target_text))
        assert res.ended == "bound" and res.frames == res.frame_bound == bound


def test_duet_serve_builds_the_luna_realtime_adapter(never_dir):
    from argparse import Namespace

    from duet.errors import DuetError
    from duet.serve.cli import build_adapter

    built = build_adapter(Namespace(engine="builtin", model="luna-realtime", checkpoint=str(never_dir), codec=None))
    assert isinstance(built, FamilyAdapter) and isinstance(built.runtime, RealtimeRuntime)
    assert built.name == never_dir.name
    with pytest.raises(DuetError, match="--model luna-realtime needs --checkpoint"):
        build_adapter(Namespace(engine="builtin", model="luna-realtime", checkpoint=None, codec=None))
