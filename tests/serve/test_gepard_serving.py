"""Gepard's runtime served by the engine, on a micro GepardModel with random weights: batched KV-cached decoding is
exact.

Greedy decoding removes sampling from the comparison, so the served frames must equal the offline sampler's
(``duet.gepard.generate``) for each request, alone or batched with others that join at different steps.
"""

import math

import pytest
import torch

from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.gepard.config import GepardConfig, with_aligned_input
from duet.gepard.generate import generate
from duet.gepard.model import GepardModel, GepardPrompt
from duet.nn.backbone import BackboneConfig
from duet.sampling import FrameBound, SamplingParams
from duet.serve.engine import Engine
from duet.serve.errors import InvalidRequest
from duet.serve.mock import MockCodec
from duet.tts.gepard import GepardRuntime, GepardRuntimeConfig
from duet.tts.request import SynthesisRequest
from duet.tts.runtime import check_request

SOT, EOT, SOS = 61, 62, 63  # test-only service ids inside the micro vocabulary
FRAMES = 12


def micro_model(aligned: bool = False) -> GepardModel:
    torch.manual_seed(0)
    backbone = BackboneConfig(num_layers=2, width=64, num_heads=4, num_kv_heads=2, head_dim=16, mlp_width=128,
                              vocab_size=64, rope_theta=10_000.0, max_positions=512)
    config = GepardConfig(name="micro", backbone=backbone, audio_embed_dim=2)
    if aligned:
        config = with_aligned_input(config, window=1, duration_layers=1)
    return GepardModel(config).eval()


def encode(text: str) -> list[int]:
    return [SOT, *(ord(c) % 60 for c in text), EOT, SOS]


def packed_codec() -> MockCodec:
    return MockCodec(16_000, 320, (FSQConfig().codebook_size,) * 8)


DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(scope="module", params=DEVICES)
def model(request):
    return micro_model().to(request.param)


def runtime_for(model, **bound) -> GepardRuntime:
    bound = {"max_frames": 64, **bound}
    return GepardRuntime(model, packed_codec(), encode, "micro", GepardRuntimeConfig(FrameBound(**bound)))


def greedy(text: str) -> SynthesisRequest:
    return SynthesisRequest(text=text, params=SamplingParams(temperature=0, stop_threshold=0.999, max_frames=FRAMES))


def offline(model, text: str) -> torch.Tensor:
    prompt = GepardPrompt(torch.tensor([encode(text)], device=model.embed_tokens.weight.device))
    result = generate(model, prompt, params=SamplingParams(temperature=0, stop_threshold=0.999, max_frames=FRAMES))
    assert result.lengths.item() == FRAMES  # random weights: the stop head never reaches 0.999
    return GroupFSQ(FSQConfig()).fold(result.codes.cpu())[0]  # (G, T)


def run(runtime, requests_at: dict[int, SynthesisRequest]) -> dict[int, torch.Tensor]:
    """Drive prefill/step like the engine, admitting request i at step requests_at key."""
    states, frames, step = {}, {}, 0
    while len(frames) < len(requests_at) or any(len(f) < FRAMES for f in frames.values()):
        for at, request in requests_at.items():
            if at == step:
                states[at] = runtime.prefill([request], [0])[0]
                frames[at] = []
        live = [k for k in states if len(frames[k]) < FRAMES]
        if live:
            for k, out in zip(live, runtime.step([states[k] for k in live])):
                frames[k].append(out.codes)
                if len(frames[k]) == FRAMES:
                    runtime.release(states[k])  # its slot is reused (stale contents and all) by later requests
        step += 1
    return {k: torch.cat(v, dim=-1) for k, v in frames.items()}


def test_served_greedy_frames_equal_the_offline_sampler(model):
    texts = ["hello", "a much longer sentence here", "mid"]
    expected = [offline(model, t) for t in texts]
    runtime = runtime_for(model)
    alone = run(runtime, {0: greedy(texts[0])})
    assert torch.equal(alone[0], expected[0])
    batched = run(runtime, {0: greedy(texts[0]), 3: greedy(texts[1]), 7: greedy(texts[2])})
    assert runtime.pool.kv.shape[2] == 4  # slots were reused, not only added
    for i in range(3):
        assert torch.equal(batched[[0, 3, 7][i]], expected[i]), f"request {i} changed when batched"


def test_sampled_frames_of_one_seed_are_the_same_offline_and_served(model):
    """duet speak and duet serve share one sampler: at temperature 0.8 / top-k 5 a seed gives the same frames."""
    device = model.embed_tokens.weight.device
    texts, seeds = ["hello", "a much longer sentence here"], [11, 12]
    expected = []
    for text, seed in zip(texts, seeds):
        prompt = GepardPrompt(torch.tensor([encode(text)], device=device))
        params = SamplingParams(temperature=0.8, top_k=5, stop_threshold=0.999, max_frames=FRAMES, seed=seed)
        expected.append(GroupFSQ(FSQConfig()).fold(generate(model, prompt, params=params).codes.cpu())[0])
    runtime = runtime_for(model)
    params = SamplingParams(temperature=0.8, top_k=5, stop_threshold=0.999, max_frames=FRAMES)
    states = runtime.prefill([SynthesisRequest(text=t, params=params) for t in texts], seeds)  # one batch
    frames = [[], []]
    for _ in range(FRAMES):
        for k, out in enumerate(runtime.step(states)):
            frames[k].append(out.codes)
    for k in range(2):
        assert torch.equal(torch.cat(frames[k], dim=-1), expected[k]), f"request {k} differs from duet speak's"
    assert not torch.equal(expected[0][:, :4], offline(model, texts[0])[:, :4])  # sampled, not greedy


def test_aligned_model_serves_the_frames_of_the_offline_sampler():
    """With aligned text input each row carries its own text layout and position; batching must not mix them."""
    model = micro_model(aligned=True)
    texts = ["hello", "a much longer sentence here", "mid"]
    expected = [offline(model, t) for t in texts]
    batched = run(runtime_for(model), {0: greedy(texts[0]), 2: greedy(texts[1]), 5: greedy(texts[2])})
    for i in range(3):
        assert torch.equal(batched[[0, 2, 5][i]], expected[i]), f"request {i} changed when batched"


def test_cache_stays_within_the_reservation(model):
    runtime = runtime_for(model)
    request = greedy("abc")
    state = runtime.prefill([request], [0])[0]
    for _ in range(FRAMES):
        runtime.step([state])
    assert state.rows[0].length == runtime.prompt_positions(request) + FRAMES == runtime.pool.kv.shape[4]
    assert runtime.cache_bytes_per_position == 2 * 2 * 2 * 16 * 4  # K and V, 2 layers, 2 kv heads, hd 16, fp32


def test_engine_serves_gepard_with_stop_and_bound(model):
    runtime = runtime_for(model)
    with Engine(runtime) as engine:
        bounded = engine.submit(greedy("bounded")).collect()[1]
        eager = engine.submit(SynthesisRequest(text="stop", params=SamplingParams(stop_threshold=0.01, seed=1)))
        stopped = eager.collect()[1]
    assert (bounded.reason, bounded.frames) == ("bound", FRAMES)
    assert (stopped.reason, stopped.frames) == ("stop", 0)  # every p_stop exceeds 0.01


def test_what_gepard_cannot_do_yet_is_a_clear_400(model):
    runtime = runtime_for(model)
    for request in (SynthesisRequest(text="x", voice="nobody"), SynthesisRequest(text="x", emotion="sad"),
                    SynthesisRequest(text="x", speed=2.0),
                    SynthesisRequest(text="x", reference=torch.zeros(10).numpy()),
                    SynthesisRequest(text="x" * 600)):
        with pytest.raises(InvalidRequest):
            check_request(request, runtime)


def test_gepard_through_the_http_api(model):
    from fastapi.testclient import TestClient

    from duet.serve.api import create_app

    with TestClient(create_app(Engine(runtime_for(model)))) as client:
        r = client.post("/v1/audio/speech", json={"model": "micro", "input": "hi", "response_format": "pcm",
                                                  "max_frames": 5, "stop_threshold": 0.999, "seed": 1})
        assert r.status_code == 200 and len(r.content) == 5 * 320 * 2
        assert client.post("/v1/audio/speech", json={"model": "micro", "input": "hi", "speed": 2}).status_code == 400


def test_served_defaults_are_what_duet_speak_samples_with(model, tmp_path):
    import duet
    from checkpoint_testing import write_tiny_gepard
    from duet.gepard.generate import SPEAK_SAMPLING
    from duet.tts import load_runtime

    params = runtime_for(model).default_params
    assert (params.temperature, params.top_k) == (SPEAK_SAMPLING.temperature, SPEAK_SAMPLING.top_k) != (1.0, 0)
    model_dir = write_tiny_gepard(tmp_path)
    assert load_runtime(str(model_dir)).default_params == duet.load(model_dir).runtime.default_params


def test_aligned_model_refuses_a_text_longer_than_one_request_holds():
    """An aligned model predicts its length: a text that would run past the frame bound is a clear 400, never a
    silently cut WAV."""
    model = micro_model(aligned=True)
    runtime = runtime_for(model, margin_frames=0)
    ids = torch.tensor([encode("x" * 40)])
    predicted = float(model.duration.predict(ids, torch.tensor([ids.shape[1]])).sum())
    assert predicted > 0
    fits = int(64 / predicted * 40 * 0.5)  # about half the bound
    check_request(SynthesisRequest(text="x" * max(fits, 1)), runtime)
    with pytest.raises(InvalidRequest, match="split it into shorter requests") as err:
        check_request(SynthesisRequest(text="x" * 200), runtime)
    assert err.value.code == "context_length_exceeded"


def test_aligned_model_refuses_a_text_that_would_end_within_the_margin_of_its_bound():
    """Sampled speech runs a little past its prediction: a text predicted just under the bound would be cut at
    the bound, so it is refused too (margin_frames of room)."""
    model = micro_model(aligned=True)
    text = "x" * 40
    ids = torch.tensor([encode(text)])
    predicted = float(model.duration.predict(ids, torch.tensor([ids.shape[1]])).sum())
    just_over = math.ceil(predicted) + 1  # a bound the prediction fits, without room to end late
    tight = runtime_for(model, max_frames=just_over, margin_frames=5)
    with pytest.raises(InvalidRequest, match="margin") as err:
        check_request(SynthesisRequest(text=text), tight)
    assert err.value.code == "context_length_exceeded"
    roomy = runtime_for(model, max_frames=just_over + 5, margin_frames=5)
    check_request(SynthesisRequest(text=text), roomy)


def test_a_text_past_the_models_positions_is_refused_before_the_duration_model_runs(monkeypatch):
    """The duration model costs the square of the text (a 4,000-digit number is 21,000 tokens: 20 s of CPU on
    gepard-tiny); a text that cannot fit the model's positions is refused without it."""
    model = micro_model(aligned=True)
    runtime = runtime_for(model)

    def never(*args, **kwargs):
        raise AssertionError("the duration model ran")

    monkeypatch.setattr(model.duration, "predict", never)
    with pytest.raises(InvalidRequest, match="positions") as err:
        check_request(SynthesisRequest(text="x" * 600), runtime)  # 603 prompt positions, the micro model has 512
    assert err.value.code == "context_length_exceeded"
