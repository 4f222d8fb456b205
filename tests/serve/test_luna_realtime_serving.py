"""Luna Realtime's runtime served by the engine on randomly initialised micro Realtime models in the shipped format
(``checkpoint_testing.write_tiny_luna_realtime``, blocks of 4 frames), with the end head's bias set to pick how they
end: -20 never ends (every request runs to its bound), +20 ends at once, 0.003 ends inside a later block on these
weights.

Random weights say nothing about quality; these tests pin that serving Luna Realtime is exactly Luna Realtime:
- a request served alone through the engine gives the codes and the audio of the Speaker (``duet speak``'s
  streaming pipeline) at the same seed and steps, whether it ends on its bound or on the learned end of speech;
- frames come out block by block, one block per ``steps`` engine steps, so audio arrives before the request ends;
- requests with different texts, steps, sampling and bounds, joining at different steps, each get their solo codes;
- the end head ends a request ("stop"), the bound ends it otherwise ("bound");
- what the runtime cannot do is an ``InvalidRequest``; the HTTP API streams it as SSE; ``duet serve`` and
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
from duet.sampling import SamplingParams
from duet.serve.api import create_app
from duet.serve.cli import FAMILIES
from duet.serve.engine import Engine
from duet.serve.errors import InvalidRequest
from duet.text.prompts import luna_prompt
from duet.tts import load_runtime
from duet.tts.luna_realtime import RealtimeRuntime, load_realtime_runtime
from duet.tts.request import SynthesisRequest
from duet.tts.runtime import FamilyRuntime, check_request
from duet.tts.speaker import Speaker

SHORT, MID, LONG = "Good morning.", "Hello there, how are you?", "The quick brown fox jumps over the lazy dog."
BK = 4  # frames per block of the test models


def write(tmp_path_factory, label: str, end_bias: float):
    return write_tiny_luna_realtime(tmp_path_factory.mktemp(label), block_size=BK, end_bias=end_bias)


@pytest.fixture(scope="module")
def never_dir(tmp_path_factory):
    return write(tmp_path_factory, "never", -20.0)


@pytest.fixture(scope="module")
def runtime(never_dir) -> RealtimeRuntime:
    return load_runtime(str(never_dir), name="luna-realtime")


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


def recording(runtime, monkeypatch) -> dict[str, list[tuple[int, torch.Tensor, bool]]]:
    """Record, by text, (engine step, codes (Q, n), final) of every output that carries frames or ends a request."""
    log: dict[str, list[tuple[int, torch.Tensor, bool]]] = {}
    step, calls = runtime.step, [0]

    def recorded(states):
        outs = step(states)
        calls[0] += 1
        for s, out in zip(states, outs):
            if out.codes.shape[-1] or out.final:
                log.setdefault(s.request.text, []).append((calls[0], out.codes, out.final))
        return outs

    monkeypatch.setattr(runtime, "step", recorded)
    return log


def codes_of(log, text: str) -> torch.Tensor:
    return torch.cat([codes for _, codes, _ in log[text]], dim=1)  # (Q, T)


def test_is_a_family_runtime_and_the_cli_knows_it(runtime):
    assert isinstance(runtime, FamilyRuntime) and "luna-realtime" in FAMILIES
    assert runtime.traits.voices == ("default",) and not runtime.traits.clone_from_audio
    b = runtime.model.config.luna.backbone
    rows = 2  # CFG: each session caches a conditional and an unconditional row
    assert runtime.cache_bytes_per_position == rows * b.num_layers * 2 * b.num_kv_heads * b.head_dim * 4  # float32
    state = runtime.prefill([request(SHORT, seed=0, steps=2)], [0])[0]
    # the cache really holds (R, kv_heads, positions, head_dim) per layer, for keys and for values
    layers = state.session.cache.layers
    assert len(layers) == b.num_layers
    want = (rows, b.num_kv_heads, runtime.prompt_positions(state.request), b.head_dim)
    assert all(tuple(x.keys.shape) == tuple(x.values.shape) == want and x.keys.dtype == torch.float32 for x in layers)


def test_solo_request_through_the_engine_equals_the_speaker_at_its_bound(runtime, speaker, monkeypatch):
    log = recording(runtime, monkeypatch)
    req = request(MID, seed=7, steps=3)
    ids = luna_prompt(MID, speaker.runtime.tokenizer)
    bound = speaker.runtime.bound_for(ids)
    assert runtime.frame_bound(req) == bound and runtime.prompt_positions(req) == len(ids)
    with Engine(runtime) as engine:
        audio, finish = engine.submit(req).collect(timeout=120)
        assert engine.stats().steps == math.ceil(bound / BK) * 3  # one engine step per refinement step
    codes, expected_audio, ended, _ = offline(speaker, MID, seed=7, steps=3)
    assert finish.reason == "bound" and ended == [BOUND] and finish.frames == bound == codes.shape[1]
    assert torch.equal(codes_of(log, MID), codes)
    assert audio.shape == expected_audio.shape == (bound * runtime.codec.samples_per_frame,)
    np.testing.assert_allclose(audio, expected_audio, atol=1e-5)


def test_solo_request_ending_on_the_end_head_equals_the_speaker(tmp_path_factory, monkeypatch):
    model_dir = write(tmp_path_factory, "midway", 0.003)  # on these weights the end head fires in a later block
    config = replace(load_realtime_runtime(model_dir).config, floor_factor=None)  # the end head alone
    runtime = load_realtime_runtime(model_dir, config=config)
    speaker = Speaker(load_realtime_runtime(model_dir, config=config))
    log = recording(runtime, monkeypatch)
    req = request(MID, seed=1, steps=3)
    with Engine(runtime) as engine:
        audio, finish = engine.submit(req).collect(timeout=120)
    codes, expected_audio, ended, blocks = offline(speaker, MID, seed=1, steps=3)
    assert finish.reason == "stop" and ended == [STOP]
    assert BK < finish.frames == codes.shape[1] < runtime.frame_bound(req)  # ended after the first block, early
    assert len(log[MID]) == blocks and log[MID][-1][2] and not any(final for _, _, final in log[MID][:-1])
    assert torch.equal(codes_of(log, MID), codes)
    np.testing.assert_allclose(audio, expected_audio, atol=1e-5)


def test_frames_come_out_block_by_block_before_the_request_ends(runtime, monkeypatch):
    log = recording(runtime, monkeypatch)
    steps, req = 4, request(SHORT, seed=2, steps=4, max_frames=3 * BK + 1)
    with Engine(runtime) as engine:
        handle = engine.submit(req)
        chunks = list(handle)
    # one output with frames every `steps` engine steps: a whole block each, then the bound's single frame
    assert [(at, codes.shape[1]) for at, codes, _ in log[SHORT]] == [(steps * (n + 1), BK if n < 3 else 1)
                                                                     for n in range(4)]
    spf = runtime.codec.samples_per_frame
    assert [len(c) for c in chunks] == [BK * spf] * 3 + [spf]  # each block's audio as soon as it is committed
    assert handle.finish.reason == "bound" and handle.finish.frames == 3 * BK + 1
    assert handle.first_audio_at - handle.submitted_at < handle.finish.wall_s


def test_requests_joining_at_different_steps_each_equal_their_solo_run(runtime, speaker):
    jobs = [
        (0, request(SHORT, seed=1, steps=2)),
        (2, request(LONG, seed=2, steps=3, temperature=0.7, top_k=8, max_frames=10)),  # bound inside a block
        (5, request(MID, seed=3, steps=1)),
    ]
    assert len({r.params.max_frames or runtime.frame_bound(r) for _, r in jobs}) == 3
    batched = drive(runtime, jobs)
    for (_, req), got in zip(jobs, batched):
        assert torch.equal(got, drive(runtime, [(0, req)])[0]), req.text
    # and the capped request is the offline stream cut at 10 frames
    capped = jobs[1][1]
    cfg = StreamConfig(decode=replace(speaker.runtime.config.stream.decode, steps=3, temperature=0.7, top_k=8), max_frames=10)
    ids = torch.tensor(luna_prompt(LONG, speaker.runtime.tokenizer))
    expected = collect(stream_speech(speaker.runtime.model, ids, None, cfg, None, torch.Generator().manual_seed(2))).codes
    assert expected.shape[1] == 10 and torch.equal(batched[1], expected), capped.text


def test_batched_engine_audio_equals_solo_audio(runtime):
    reqs = [request(SHORT, seed=5, steps=2), request(MID, seed=6, steps=3, max_frames=9)]
    with Engine(runtime) as engine:
        handles = [engine.submit(r) for r in reqs]
        together = [h.collect(timeout=120) for h in handles]
        alone = [engine.submit(r).collect(timeout=120) for r in reqs]
    for (a, fa), (b, fb) in zip(together, alone):
        assert a.shape == b.shape and a.size > 0 and fa.reason == fb.reason == "bound"
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_end_of_speech_at_once_stops_with_no_frames(tmp_path_factory, runtime):
    model_dir = write(tmp_path_factory, "at-once", 20.0)
    at_once = load_realtime_runtime(model_dir)
    floor = at_once.floor_for(luna_prompt(MID, at_once.tokenizer))
    with Engine(at_once) as engine:  # the default floor: speech until floor_for, then the end
        _, finish = engine.submit(request(MID, seed=0, steps=3)).collect(timeout=60)
    assert finish.reason == "stop" and finish.frames == floor > BK
    at_once = load_realtime_runtime(model_dir, config=replace(at_once.config, floor_factor=None))  # the end head
    with Engine(at_once) as engine:
        audio, finish = engine.submit(request(MID, seed=0, steps=3)).collect(timeout=60)
        assert engine.stats().steps == 1  # the end head is read at the first block's first step
    assert finish.reason == "stop" and finish.frames == 0 and audio.size == 0
    with Engine(runtime) as engine:  # the same text on the model whose end head never fires: its bound
        _, finish = engine.submit(request(MID, seed=0, steps=1)).collect(timeout=60)
    assert finish.reason == "bound" and finish.frames == runtime.frame_bound(request(MID, seed=0, steps=1))


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
def test_what_the_runtime_cannot_do_is_an_invalid_request(runtime, req, param, code):
    with pytest.raises(InvalidRequest) as err:
        check_request(req, runtime)
    assert err.value.param == param and (code is None or err.value.code == code)
    with Engine(runtime) as engine, pytest.raises(InvalidRequest):
        engine.submit(req)


def test_default_voice_and_steps(runtime, speaker):
    check_request(SynthesisRequest(text="hi", voice="default"), runtime)
    state = runtime.prefill([SynthesisRequest(text="hi")], [0])[0]
    assert state.decode == speaker.runtime.config.stream.decode and state.decode.steps == 8


def test_http_sse_streams_audio_deltas_and_done(runtime):
    client = TestClient(create_app(Engine(runtime)))
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
        assert len(pcm) == (2 * BK + 1) * runtime.codec.samples_per_frame * 2  # int16
        done = events[-1]
        assert done["usage"]["output_tokens"] == 2 * BK + 1 and done["duet"]["finish_reason"] == "bound"
        bad = client.post("/v1/audio/speech", json={"model": "luna-realtime", "input": SHORT, "speed": 1.5})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "speed"


def test_eval_registry_runs_luna_realtime_through_the_engine(never_dir, runtime):
    synth = load_synthesizer(f"luna-realtime:{never_dir}", SynthOptions(batch_size=2, steps=1))
    items = [TestItem(f"u{i}", "", None, text, None, i + 1) for i, text in enumerate((SHORT, MID))]
    try:
        out = synth.synthesize(items)
    finally:
        synth.close()
    assert synth.name == never_dir.name
    for item, res in zip(items, out):
        bound = runtime.frame_bound(SynthesisRequest(text=item.target_text))
        assert res.ended == "bound" and res.frames == res.frame_bound == bound


def test_duet_serve_builds_the_luna_realtime_runtime(never_dir):
    from argparse import Namespace

    from duet.errors import DuetError
    from duet.serve.cli import build_runtime

    built = build_runtime(Namespace(engine="builtin", model="luna-realtime", checkpoint=str(never_dir), codec=None))
    assert isinstance(built, RealtimeRuntime)
    assert built.name == never_dir.name
    with pytest.raises(DuetError, match="--model luna-realtime needs --checkpoint"):
        build_runtime(Namespace(engine="builtin", model="luna-realtime", checkpoint=None, codec=None))


def _session_at(runtime, text: str, commits: int, computed: bool):
    """A session of ``text`` with ``commits`` random clean blocks committed; ``computed``: the last one's KV is in
    the cache already (a step ran since), else it is pending (the next step computes it: 2 B_k queries)."""
    from duet.luna.stream import KVBlockSession

    ids = luna_prompt(text, runtime.tokenizer)
    session = KVBlockSession(runtime.model, torch.tensor(ids), None, guidance=True,
                             durations=runtime.aligned_durations(ids))
    g = torch.Generator().manual_seed(len(text) + commits)
    grid = runtime.grid
    for i in range(commits):
        if i or computed:
            session.step(torch.full((2, BK, grid.num_codebooks), grid.mask_id))
        session.commit(torch.randint(0, grid.codebook_size, (BK, grid.num_codebooks), generator=g))
    if computed and commits:
        session.step(torch.full((2, BK, grid.num_codebooks), grid.mask_id))
    return session


def test_one_batched_pass_equals_each_session_s_own_pass(runtime):
    """``duet.luna.stream_batch``: sessions of different texts and cache lengths, some with a just-committed block
    to compute (2 B_k queries) and some without, stepped together, each get their own step's logits (up to float
    rounding) and end with the cache their own step leaves; then again, one step later."""
    from duet.luna.stream_batch import step_sessions

    layout = [(SHORT, 0, False), (MID, 1, False), (LONG, 2, True), (MID, 3, False), (LONG, 1, True)]
    batched = [_session_at(runtime, *spec) for spec in layout]
    alone = [_session_at(runtime, *spec) for spec in layout]
    assert len({s.cache.get_seq_length() for s in batched}) > 2
    g = torch.Generator().manual_seed(0)
    grid = runtime.grid
    for round_ in range(2):
        blocks = [torch.randint(0, grid.mask_id + 1, (2, BK, grid.num_codebooks), generator=g) for _ in layout]
        together = step_sessions(batched, blocks)
        for session, other, block, got in zip(alone, batched, blocks, together):
            want = session.step(block)
            torch.testing.assert_close(got.codes, want.codes, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(got.end, want.end, atol=1e-5, rtol=1e-5)
            assert other.cache.get_seq_length() == session.cache.get_seq_length()
            for mine, theirs in zip(other.cache.layers, session.cache.layers):
                torch.testing.assert_close(mine.keys, theirs.keys, atol=1e-5, rtol=1e-5)
                torch.testing.assert_close(mine.values, theirs.values, atol=1e-5, rtol=1e-5)
        if round_ == 0:  # every session commits a block: the next round computes them all
            for a, b in zip(batched, alone):
                block = torch.randint(0, grid.codebook_size, (BK, grid.num_codebooks), generator=g)
                a.commit(block)
                b.commit(block)


def test_a_failed_batched_pass_runs_its_requests_one_by_one(runtime, monkeypatch):
    """A batch whose forward pass raises changes no state; the runtime runs its requests alone, so a request that
    fails alone fails alone and the others get their solo codes."""
    import duet.tts.luna_realtime as luna_realtime

    reqs = [request(SHORT, seed=1, steps=2), request("boom " + MID, seed=2, steps=2), request(LONG, seed=3, steps=2)]
    expected = [drive(runtime, [(0, r)])[0] for r in (reqs[0], reqs[2])]
    real = luna_realtime.step_sessions

    def flaky(sessions, blocks):
        if len(sessions) > 1 or sessions[0] is doomed[0]:
            raise RuntimeError("kaboom")
        return real(sessions, blocks)

    states = runtime.prefill(reqs, [1, 2, 3])
    doomed = [states[1].session]
    monkeypatch.setattr(luna_realtime, "step_sessions", flaky)
    outs = runtime.step(states)
    assert outs[1].error is not None and "kaboom" in outs[1].error
    assert outs[0].error is None and outs[2].error is None
    codes = {0: [outs[0].codes], 2: [outs[2].codes]}
    while not all(sum(c.shape[1] for c in codes[i]) >= runtime.frame_bound(reqs[i]) for i in codes):
        live = [i for i in codes if sum(c.shape[1] for c in codes[i]) < runtime.frame_bound(reqs[i])]
        for i, out in zip(live, runtime.step([states[i] for i in live])):
            codes[i].append(out.codes)
    for i, want in zip((0, 2), expected):
        assert torch.equal(torch.cat(codes[i], dim=1), want)
