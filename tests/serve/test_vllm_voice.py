"""Voice cloning on duet's side of vLLM (runs everywhere, CI included): a model with the voice compressor exports,
and the client sends the built-in runtime's prompt, [prefix | SOT, text, EOT, SOS], as prompt embeddings: the
prefix of a request's reference clip, or ``null_prefix`` without one. vLLM's engine is a stand-in that records what
it is sent; ``test_vllm_plugin.py`` runs the real one and compares frames."""

from __future__ import annotations

import json
import sys
import tempfile
import types
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from checkpoint_testing import write_tiny_gepard
from duet.codecs import load as load_codec
from duet.errors import DuetError
from duet.serve.errors import InvalidRequest
from duet.serve.vllm.engine import GepardVLLM, VLLMGepardRuntime
from duet.serve.vllm.export import export_for_vllm
from duet.tts.gepard import load_gepard_runtime
from duet.tts.request import SynthesisRequest
from duet.tts.runtime import check_request

K = 8  # the compressor's prefix vectors (with_voice_prefix's default)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("voice-models")
    return {"voice": write_tiny_gepard(root / "voice", voice=True), "plain": write_tiny_gepard(root / "plain")}


@pytest.fixture
def sent(monkeypatch, tmp_path) -> list[dict]:
    """GepardVLLM with vLLM replaced by a stand-in whose engine records each ``add_request`` (and a SamplingParams
    that keeps its arguments); temporary exports land in ``tmp_path``."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    calls: list[dict] = []
    vllm = types.ModuleType("vllm")
    vllm.SamplingParams = lambda **kwargs: kwargs
    monkeypatch.setitem(sys.modules, "vllm", vllm)

    def add_request(rid, prompt, params):
        calls.append({"rid": rid, **prompt, "params": params})

    monkeypatch.setattr(GepardVLLM, "_build_engine", lambda self: types.SimpleNamespace(add_request=add_request))
    return calls


def clip(seconds: float, rate: int, seed: int = 0) -> np.ndarray:
    return (0.5 * np.random.default_rng(seed).uniform(-1, 1, int(seconds * rate))).astype(np.float32)


def test_a_model_with_a_compressor_exports_with_its_compressor(models, tmp_path):
    out = export_for_vllm(models["voice"], tmp_path / "export")  # not refused
    assert json.loads((out / "config.json").read_text())["duet"]["config"]["voice"] is not None
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        assert any(name.startswith("qformer.") for name in f.keys())  # the client runs it; vLLM's loader skips it


def test_the_client_sends_the_builtin_runtimes_prompt_as_prompt_embeddings(models, sent):
    runtime = load_gepard_runtime(models["voice"])
    with GepardVLLM(models["voice"]) as engine:
        served = VLLMGepardRuntime(engine, load_codec(engine.trained_codec))
        assert served.traits.clone_from_audio
        reference = clip(1.0, served.codec.sample_rate)
        cloned = SynthesisRequest("Hello there.", reference=reference, params=served.default_params)
        plain = SynthesisRequest("Hello there.", params=served.default_params)
        for request in (cloned, plain):
            check_request(request, served)
            assert served.prompt_positions(request) == runtime.prompt_positions(request) == K + len(
                engine.encode(request))
            assert served.frame_bound(request) == runtime.frame_bound(request)
        states = served.prefill([cloned, plain], [3, 4])
        assert [s.vreq.bound for s in states] == [served.frame_bound(cloned)] * 2

    model = runtime.model
    ids = torch.tensor([runtime.encode("Hello there.")])  # (1, S)
    with torch.no_grad():
        text = model.embed_tokens(ids)[0]  # (S, D)
        expected = [torch.cat([runtime._prefix(r)[0], text]) for r in (cloned, plain)]  # (K + S, D) each
    assert len(sent) == 2
    for call, want in zip(sent, expected):
        torch.testing.assert_close(call["prompt_embeds"], want)
        assert call["params"]["max_tokens"] == served.frame_bound(cloned) + 1
    torch.testing.assert_close(sent[1]["prompt_embeds"][:K], model.qformer.null_prefix.detach())
    assert not torch.allclose(sent[0]["prompt_embeds"][:K], sent[1]["prompt_embeds"][:K])
    assert [c["params"]["extra_args"]["duet"]["seed"] for c in sent] == [3, 4]


def test_what_the_vllm_path_refuses_about_a_clip(models, sent):
    with GepardVLLM(models["voice"]) as engine:
        served = VLLMGepardRuntime(engine, load_codec(engine.trained_codec))
        spf = served.codec.samples_per_frame
        for bad in (clip(1.0, 16_000)[: spf - 1], np.full(spf * 4, np.nan, dtype=np.float32),
                    clip(1.0, 16_000)[:, None]):
            with pytest.raises(InvalidRequest) as err:
                check_request(SynthesisRequest("x", reference=bad), served)
            assert err.value.param == "reference_audio"
    with GepardVLLM(models["plain"]) as engine:
        served = VLLMGepardRuntime(engine, load_codec(engine.trained_codec))
        assert not served.traits.clone_from_audio and engine.num_prefix == 0
        with pytest.raises(InvalidRequest, match="no voice compressor") as err:
            check_request(SynthesisRequest("x", reference=clip(1.0, served.codec.sample_rate)), served)
        assert err.value.code == "cloning_unsupported"
        with pytest.raises(DuetError, match="no voice compressor"):
            engine.reference_prefix(served.codec, clip(1.0, served.codec.sample_rate))
    assert not sent
