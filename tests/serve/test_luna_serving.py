"""Luna's runtime served by the engine on a randomly initialised micro Luna in the shipped format (``checkpoint_testing.write_tiny_luna``).

Random weights say nothing about quality; these tests pin that serving Luna is exactly Luna:
- a request served alone through the engine gives the grid of ``maskgit_decode`` run directly on an independently
  loaded copy of the model (same text ids, same predicted T, same seed), and the audio of ``duet.load(...).speak``;
- requests of different lengths, step counts and sampling settings, joining the batch at different steps, each get
  exactly the tokens of their solo run (the engine batches them into one forward pass per refinement step);
- what Luna cannot do is an ``InvalidRequest`` at submission; the HTTP API serves it as a WAV; ``duet eval run
  --model luna:DIR`` goes through the same runtime.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import soundfile as sf
import torch
from fastapi.testclient import TestClient
from serve_testing import drive

import duet
from checkpoint_testing import write_tiny_luna
from duet.eval.synth import SynthOptions, load_synthesizer
from duet.eval.testset import TestItem
from duet.luna.decode import DecodeConfig, maskgit_decode
from duet.luna.duration import total_frames
from duet.luna.model import LunaInputs
from duet.luna.shipped import load_luna
from duet.sampling import SamplingParams
from duet.serve.api import create_app
from duet.serve.cli import FAMILIES
from duet.serve.engine import Engine, EngineConfig
from duet.serve.errors import InvalidRequest
from duet.text.prompts import luna_prompt
from duet.tts import load_runtime
from duet.tts.luna import LunaRuntime
from duet.tts.request import SynthesisRequest
from duet.tts.retime import RetimeConfig
from duet.tts.runtime import FamilyRuntime, check_request

SHORT, MID, LONG = "Good morning.", "Hello there, how are you?", "The quick brown fox jumps over the lazy dog."


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_luna(tmp_path_factory.mktemp("luna"))


@pytest.fixture(scope="module")
def runtime(model_dir) -> LunaRuntime:
    return load_runtime(str(model_dir), name="luna")


@pytest.fixture(scope="module")
def reference(model_dir):
    """An independently loaded copy of the same checkpoint, for the expected values."""
    return load_luna(model_dir)


def predicted_frames(loaded, text: str, speed: float = 1.0) -> int:
    ids = luna_prompt(text, loaded.tokenizer)
    text_ids, lengths = torch.tensor([ids]), torch.tensor([len(ids)])  # (1, S), (1,)
    return int(total_frames(loaded.bundle.duration.token_durations(text_ids, lengths), lengths, speed)[0])


def offline_grid(loaded, text: str, seed: int, steps: int, temperature: float = 1.0, top_k: int = 0,
                 speed: float = 1.0) -> torch.Tensor:
    """maskgit_decode of one request alone -> codes (Q, T), as duet.tts.luna decodes one piece."""
    model = loaded.bundle.acoustic
    ids = luna_prompt(text, loaded.tokenizer)
    T, Q, mask = predicted_frames(loaded, text, speed), model.config.num_codebooks, model.config.mask_id
    empty = torch.full((1, T, Q), mask)  # (1, T, Q)
    inputs = LunaInputs(torch.tensor([ids]), torch.tensor([len(ids)]), empty, torch.tensor([T]))
    cfg = DecodeConfig(steps=steps, temperature=temperature, top_k=top_k)
    result = maskgit_decode(model.logits_fn(inputs), empty, mask, cfg, generator=torch.Generator().manual_seed(seed))
    return result.tokens[0].T  # (Q, T)


def request(text: str, seed: int, steps: int, **params) -> SynthesisRequest:
    speed = params.pop("speed", 1.0)
    return SynthesisRequest(text=text, speed=speed, params=SamplingParams(seed=seed, steps=steps, **params))


def recording(runtime, monkeypatch) -> dict[str, torch.Tensor]:
    """Record the final codes (Q, T) each request's last step returns, by text."""
    finals: dict[str, torch.Tensor] = {}
    step = runtime.step

    def recorded(states):
        outs = step(states)
        for s, out in zip(states, outs):
            last = s.step == s.decode.steps
            assert out.codes.shape[-1] == (s.frames if last else 0)  # nothing before the grid is committed
            if last:
                finals[s.request.text] = out.codes
        return outs

    monkeypatch.setattr(runtime, "step", recorded)
    return finals


def test_is_a_family_runtime_and_the_cli_knows_it(runtime):
    assert isinstance(runtime, FamilyRuntime) and "luna" in FAMILIES
    assert runtime.traits.voices == ("default",) and not runtime.traits.clone_from_audio
    cfg = runtime.model.config
    # no KV cache: the grid state and one step's logits (conditional + CFG row) per position
    assert runtime.cache_bytes_per_position >= 2 * cfg.num_codebooks * cfg.codebook_size * 4


def test_solo_request_through_the_engine_equals_maskgit_decode_and_the_speaker(runtime, reference, model_dir,
                                                                               monkeypatch):
    finals = recording(runtime, monkeypatch)
    req = request(MID, seed=7, steps=6)
    T = predicted_frames(reference, MID)
    assert runtime.frame_bound(req) == T and runtime.prompt_positions(req) == len(luna_prompt(MID, reference.tokenizer))
    with Engine(runtime) as engine:
        audio, finish = engine.submit(req).collect(timeout=120)
        assert engine.stats().steps == 6  # one engine step per refinement step
    assert finish.reason == "stop" and finish.frames == T
    assert torch.equal(finals[MID], offline_grid(reference, MID, seed=7, steps=6))
    speech = duet.load(model_dir).speak(MID, seed=7, steps=6)  # duet speak, end to end
    assert audio.shape == speech.audio.shape == (T * runtime.codec.samples_per_frame,)
    np.testing.assert_allclose(audio, speech.audio, atol=1e-5)


def test_speed_temperature_top_k_and_max_frames_are_honoured(runtime, reference, monkeypatch):
    finals = recording(runtime, monkeypatch)
    fast = request(LONG, seed=3, steps=4, temperature=0.0, speed=2.0)
    assert runtime.frame_bound(fast) == predicted_frames(reference, LONG, speed=2.0)
    assert abs(runtime.frame_bound(fast) - predicted_frames(reference, LONG) / 2) <= 1  # speed 2: half the frames
    capped = request(SHORT, seed=4, steps=3, top_k=5, max_frames=5)
    laid = EngineConfig(retime=RetimeConfig(followed_speeds=(0.0, math.inf)))  # the runtime makes every speed
    with Engine(runtime, laid) as engine:
        for req, reason in ((fast, "stop"), (capped, "bound")):  # a grid cut short of its prediction: "bound"
            _, finish = engine.submit(req).collect(timeout=120)
            assert finish.reason == reason
    assert torch.equal(finals[LONG], offline_grid(reference, LONG, seed=3, steps=4, temperature=0.0, speed=2.0))
    assert finals[SHORT].shape == (runtime.model.config.num_codebooks, 5)  # T cut to the request's max_frames


def test_batched_requests_each_equal_their_solo_run(runtime):
    jobs = [
        (0, request(SHORT, seed=1, steps=8)),
        (0, request(LONG, seed=2, steps=5, temperature=0.7, top_k=8)),
        (2, request(MID, seed=3, steps=12, speed=1.5)),  # joins two steps later, finishes last
        (3, request(LONG, seed=4, steps=1, speed=0.8)),  # a one-step request inside the batch
    ]
    frames = {runtime.frame_bound(r) for _, r in jobs}
    assert len(frames) == 4  # four different grid lengths: every step pads
    batched = drive(runtime, jobs)
    for (_, req), got in zip(jobs, batched):
        solo = drive(runtime, [(0, req)])[0]
        # Exact: each row's random draws come from its own generator on its own shapes. Padding changes only the
        # forward pass's shapes: a row's logits then differ from its solo run in the last bits (about 1e-7 here),
        # too little to flip a sample or a confidence ranking on these sizes.
        assert torch.equal(got, solo), req.text


def test_batched_engine_audio_equals_solo_audio(runtime):
    reqs = [request(SHORT, seed=5, steps=4), request(LONG, seed=6, steps=7), request(MID, seed=7, steps=2)]
    with Engine(runtime) as engine:
        handles = [engine.submit(r) for r in reqs]
        together = [h.collect(timeout=120)[0] for h in handles]
        alone = [engine.submit(r).collect(timeout=120)[0] for r in reqs]
    for a, b in zip(together, alone):
        assert a.shape == b.shape and a.size > 0
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("req, param, code", [
    (SynthesisRequest(text="hi", reference=np.zeros(16_000, dtype=np.float32)), "reference_audio",
     "cloning_unsupported"),
    (SynthesisRequest(text="hi", voice="alloy"), "voice", "voice_not_found"),
    (SynthesisRequest(text=""), "input", None),
    (SynthesisRequest(text="  \n "), "input", None),
    (SynthesisRequest(text="hi", speed=0.0), "speed", None),
    (SynthesisRequest(text="hi", speed=-1.0), "speed", None),
    (SynthesisRequest(text="hi", speed=math.nan), "speed", None),
    (SynthesisRequest(text="hi", emotion="bored"), "instructions", "invalid_value"),
    (SynthesisRequest(text="hi", params=SamplingParams(top_p=0.9)), "top_p", None),
    (SynthesisRequest(text=" ".join(["word"] * 300)), "input", "context_length_exceeded"),
])
def test_what_luna_cannot_do_is_an_invalid_request(runtime, req, param, code):
    with pytest.raises(InvalidRequest) as err:
        check_request(req, runtime)
    assert err.value.param == param and (code is None or err.value.code == code)
    with Engine(runtime) as engine, pytest.raises(InvalidRequest):
        engine.submit(req)


def test_default_voice_and_steps(runtime):
    check_request(SynthesisRequest(text="hi", voice="default"), runtime)
    state = runtime.prefill([SynthesisRequest(text="hi")], [0])[0]
    assert state.decode.steps == 32 and state.decode.cfg_scale == runtime.config.decode.cfg_scale


def test_http_speech_returns_a_wav(runtime, reference):
    client = TestClient(create_app(Engine(runtime)))
    with client:
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["luna"]
        r = client.post("/v1/audio/speech", json={"model": "luna", "input": SHORT, "seed": 11, "steps": 3})
        assert r.status_code == 200 and r.headers["content-type"] == "audio/wav", r.text
        audio, sr = sf.read(io.BytesIO(r.content))
        assert sr == runtime.codec.sample_rate
        assert audio.shape == (predicted_frames(reference, SHORT) * runtime.codec.samples_per_frame,)
        bad = client.post("/v1/audio/speech", json={"model": "luna", "input": SHORT, "voice": "nobody"})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "voice_not_found"
        bad = client.post("/v1/audio/speech", json={"model": "luna", "input": SHORT, "steps": 0})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "steps"


def test_eval_registry_runs_luna_through_the_engine(model_dir, reference):
    synth = load_synthesizer(f"luna:{model_dir}", SynthOptions(batch_size=2, steps=2))
    assert synth.params.steps == 2
    items = [TestItem(f"u{i}", "", None, text, None, i + 1) for i, text in enumerate((SHORT, MID))]
    try:
        out = synth.synthesize(items)
    finally:
        synth.close()
    assert synth.name == "luna-test"
    for item, res in zip(items, out):
        assert res.ended == "stop" and res.frames == res.frame_bound == predicted_frames(reference, item.target_text)


def test_duet_serve_builds_the_luna_runtime(model_dir):
    from argparse import Namespace

    from duet.errors import DuetError
    from duet.serve.cli import build_runtime

    built = build_runtime(Namespace(engine="builtin", model="luna", checkpoint=str(model_dir), codec=None))
    assert isinstance(built, LunaRuntime) and built.name == "luna-test"
    with pytest.raises(DuetError, match="--model luna needs --checkpoint"):
        build_runtime(Namespace(engine="builtin", model="luna", checkpoint=None, codec=None))


def test_duet_serve_takes_a_model_name_or_directory_as_duet_speak_does(model_dir, tmp_path):
    from duet.errors import DuetError
    from duet.serve.cli import DEFAULT_MODEL, served_model

    assert served_model(str(model_dir), None) == ("luna", str(model_dir))  # the family comes from config.json
    assert served_model("luna", str(model_dir)) == ("luna", str(model_dir))  # the two-flag form
    assert served_model("mock", None) == ("mock", None)
    assert DEFAULT_MODEL == "gepard-tiny"  # a bare duet serve serves what a bare duet speak speaks with
    for model, checkpoint, message in [
        ("gepard", str(model_dir), "is a luna model, not gepard"),
        ("mock", str(model_dir), "takes no --checkpoint"),
        (str(model_dir), str(model_dir), "already names the model"),
        ("no-such-model", None, "unknown model"),
    ]:
        with pytest.raises(DuetError, match=message):
            served_model(model, checkpoint)
    (tmp_path / "config.json").write_text('{"type": "codec"}')
    with pytest.raises(DuetError, match="holds a 'codec' model"):
        served_model(str(tmp_path), None)


def test_a_text_past_the_models_positions_is_refused_before_the_duration_model_runs(model_dir, monkeypatch):
    """Luna's duration model costs the square of the text (a 4,000-digit number: 40 s of CPU on luna-tiny); a text
    that cannot fit the model's positions is refused without running it."""
    fresh = load_runtime(str(model_dir), name="luna")  # its own per-request plans, none cached

    def never(*args, **kwargs):
        raise AssertionError("the duration model ran")

    monkeypatch.setattr(fresh.duration, "token_durations", never)
    limit = fresh.model.config.backbone.max_positions
    with pytest.raises(InvalidRequest, match="positions") as err:
        check_request(SynthesisRequest(text="ab " * limit), fresh)
    assert err.value.code == "context_length_exceeded"
