"""Voice cloning from a reference clip through Gepard's runtime (a micro model with the voice compressor): the served
frames equal the offline sampler's with the clip's prefix, ``Speaker.speak(voice_ref=)`` and the speech API's
``reference_audio`` give the same frames for a seed, bad clips and models without a compressor are clear 4xx /
one-line errors, and ``duet speak --voice-ref`` runs on a real (tiny, random) FSQ codec."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
import soundfile as sf
import torch
from fastapi.testclient import TestClient

from duet.codecs.base import DecodeResult
from duet.codecs.fsq import FSQConfig, GroupFSQ
from duet.errors import DuetError
from duet.gepard.config import GepardConfig, with_voice_prefix
from duet.gepard.generate import generate
from duet.gepard.model import GepardModel, GepardPrompt
from duet.nn.backbone import BackboneConfig
from duet.sampling import FrameBound, SamplingParams
from duet.serve.api import create_app
from duet.serve.engine import Engine
from duet.serve.errors import InvalidRequest
from duet.serve.mock import MockCodec
from duet.serve.schemas import ServeConfig
from duet.tts.gepard import GepardRuntime, GepardRuntimeConfig
from duet.tts.request import SynthesisRequest
from duet.tts.runtime import check_request
from duet.tts.speaker import Speaker

SOT, EOT, SOS = 61, 62, 63  # test-only service ids inside the micro vocabulary
SR, SPF = 16_000, 320
FRAMES = 10
K = 8


def micro_model(voice: bool = True) -> GepardModel:
    torch.manual_seed(0)
    backbone = BackboneConfig(num_layers=2, width=64, num_heads=4, num_kv_heads=2, head_dim=16, mlp_width=128,
                              vocab_size=64, rope_theta=10_000.0, max_positions=512)
    config = GepardConfig(name="micro", backbone=backbone, audio_embed_dim=2)
    return GepardModel(with_voice_prefix(config, max_reference_frames=64) if voice else config).eval()


def encode(text: str) -> list[int]:
    return [SOT, *(ord(c) % 60 for c in text), EOT, SOS]


class CodesCodec(MockCodec):
    """The mock codec, but each frame's audio carries its packed codes within [-1, 1] (sample g of frame t is
    code / 2048), so frames survive 16-bit PCM exactly: :func:`frames_of` reads them back."""

    def decode(self, codes: torch.Tensor, lengths: torch.Tensor | None = None) -> DecodeResult:
        b, g, t = codes.shape
        audio = torch.zeros(b, t, self.samples_per_frame)  # (B, T, spf)
        audio[..., :g] = codes.transpose(1, 2).float() / 2048.0
        return DecodeResult(audio=audio.reshape(b, t * self.samples_per_frame),
                            lengths=torch.full((b,), t * self.samples_per_frame))


def frames_of(audio: np.ndarray) -> np.ndarray:
    """(S,) float samples of CodesCodec -> packed codes (G, T)."""
    return np.round(np.asarray(audio, dtype=np.float64).reshape(-1, SPF)[:, :8] * 2048.0).astype(np.int64).T


def pcm_frames(body: bytes) -> np.ndarray:
    return frames_of(np.frombuffer(body, dtype="<i2") / 32767.0)


def runtime_for(model: GepardModel, **params) -> GepardRuntime:
    """Bounded at FRAMES frames whatever the text; the stop head (random weights) never reaches the threshold."""
    config = GepardRuntimeConfig(FrameBound(frames_per_token=0.0, margin_frames=FRAMES, max_frames=64),
                                 params=SamplingParams(stop_threshold=0.999999, **params))
    return GepardRuntime(model, CodesCodec(SR, SPF, (FSQConfig().codebook_size,) * 8), encode, "micro", config)


def clip(seconds: float, seed: int = 0) -> np.ndarray:
    return (0.5 * np.random.default_rng(seed).uniform(-1, 1, int(seconds * SR))).astype(np.float32)


def wav(audio: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, audio, SR, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def drive(runtime: GepardRuntime, request: SynthesisRequest, seed: int = 0) -> torch.Tensor:
    """Prefill, then FRAMES steps -> packed codes (G, FRAMES)."""
    state = runtime.prefill([request], [seed])[0]
    try:
        return torch.cat([runtime.step([state])[0].codes for _ in range(FRAMES)], dim=1)
    finally:
        runtime.release(state)


@pytest.fixture(scope="module")
def model():
    return micro_model()


def test_served_cloning_equals_the_offline_sampler_with_the_clips_prefix(model):
    runtime = runtime_for(model, temperature=0.0)
    reference = clip(1.0)
    request = SynthesisRequest("clone me", reference=reference, params=runtime.default_params)  # greedy
    ids = encode("clone me")
    assert runtime.prompt_positions(request) == K + len(ids)  # [prefix | text]
    assert runtime.frame_bound(request) == FrameBound(frames_per_token=0.0, margin_frames=FRAMES).frames(len(ids) - 3)
    fsq = GroupFSQ(FSQConfig())
    packed = runtime.codec.encode(torch.from_numpy(reference)[None]).codes  # (1, G, P)
    with torch.no_grad():
        prefix = model.voice_prefix(fsq.unfold(packed))  # (1, K, D)
    expected = generate(model, GepardPrompt(torch.tensor([ids]), prefix=prefix),
                        params=SamplingParams(temperature=0, stop_threshold=0.999999, max_frames=FRAMES))
    assert expected.lengths.item() == FRAMES
    assert torch.equal(drive(runtime, request), fsq.fold(expected.codes)[0])


def test_the_prefix_is_in_the_cache_and_a_request_without_a_clip_reads_the_null_prefix(model):
    runtime = runtime_for(model, temperature=0.0)
    ids = torch.tensor([encode("hello")])
    cloned = runtime.prefill([SynthesisRequest("hello", reference=clip(1.0))], [0])[0]
    plain = runtime.prefill([SynthesisRequest("hello")], [0])[0]
    assert cloned.rows[0].length == plain.rows[0].length == K + ids.shape[1]
    with torch.no_grad():
        null, _ = model.prefill(GepardPrompt(ids, prefix=model.qformer.null_prefix[None]))
    torch.testing.assert_close(plain.rows[0].next_codes, null.codes[0, -1])
    assert not torch.allclose(cloned.rows[0].next_codes, plain.rows[0].next_codes)
    for state in (cloned, plain):
        runtime.release(state)


def test_what_the_runtime_refuses_about_a_clip(model):
    plain = runtime_for(micro_model(voice=False))
    assert not plain.traits.clone_from_audio
    with pytest.raises(InvalidRequest, match="no voice compressor") as err:
        check_request(SynthesisRequest("x", reference=clip(1.0)), plain)
    assert (err.value.param, err.value.code) == ("reference_audio", "cloning_unsupported")
    cloning = runtime_for(model)
    assert cloning.traits.clone_from_audio
    check_request(SynthesisRequest("x", reference=clip(1.0)), cloning)
    for bad in (clip(1.0)[: SPF - 1], np.full(SR, np.nan, dtype=np.float32), clip(1.0)[:, None]):
        with pytest.raises(InvalidRequest) as err:
            check_request(SynthesisRequest("x", reference=bad), cloning)
        assert err.value.param == "reference_audio"


def test_speak_and_http_clone_the_same_frames_for_a_seed(model, tmp_path):
    """Sampled (temperature 1): the Speaker and the served request share a runtime, a seed and a clip, so they give
    the same frames, and so does the runtime driven by hand; a different seed or no clip gives others."""
    runtime = runtime_for(model, temperature=1.0, top_k=0)
    reference = wav(clip(1.5, seed=3))
    (tmp_path / "ref.wav").write_bytes(reference)
    speaker = Speaker(runtime)
    spoken = speaker.speak("Clone this voice.", seed=5, voice_ref=tmp_path / "ref.wav")
    assert spoken.ended == ("bound",) and spoken.audio.shape == (FRAMES * SPF,)
    from_samples = speaker.speak("Clone this voice.", seed=5, voice_ref=sf.read(io.BytesIO(reference),
                                                                                dtype="float32")[0])
    np.testing.assert_array_equal(from_samples.audio, spoken.audio)  # a path or its samples: one clip

    body = {"model": "micro", "input": "Clone this voice.", "seed": 5, "response_format": "pcm",
            "reference_audio": base64.b64encode(reference).decode()}
    with TestClient(create_app(Engine(runtime))) as client:
        served = client.post("/v1/audio/speech", json=body)
        other_seed = client.post("/v1/audio/speech", json={**body, "seed": 6})
        no_clip = client.post("/v1/audio/speech", json={k: v for k, v in body.items() if k != "reference_audio"})
    assert served.status_code == 200, served.text
    frames = pcm_frames(served.content)
    assert frames.shape == (8, FRAMES) and np.array_equal(frames, frames_of(spoken.audio))
    by_hand = SynthesisRequest("Clone this voice.", params=runtime.default_params,
                               reference=speaker.reference_audio(tmp_path / "ref.wav"))
    assert np.array_equal(frames, drive(runtime, by_hand, seed=5).numpy())  # piece 0 samples with the seed itself
    assert other_seed.status_code == no_clip.status_code == 200
    assert not np.array_equal(pcm_frames(other_seed.content), frames)
    assert not np.array_equal(pcm_frames(no_clip.content), frames)
    assert np.array_equal(pcm_frames(no_clip.content), frames_of(speaker.speak("Clone this voice.", seed=5).audio))


def test_http_cloning_errors_are_clear_4xx_and_the_server_keeps_serving(model):
    limits = ServeConfig(max_reference_seconds=2.0, max_reference_bytes=80_000)
    body = {"model": "micro", "input": "hi", "response_format": "pcm", "seed": 1}

    def post(client, reference: bytes | str) -> tuple[int, dict]:
        text = reference if isinstance(reference, str) else base64.b64encode(reference).decode()
        r = client.post("/v1/audio/speech", json={**body, "reference_audio": text})
        return r.status_code, (r.json()["error"] if r.status_code != 200 else {})

    with TestClient(create_app(Engine(runtime_for(model)), limits)) as client:
        status, error = post(client, b"RIFF not a wav at all")
        assert status == 400 and error["param"] == "reference_audio" and "not a readable audio" in error["message"]
        status, error = post(client, "%%% not base64")
        assert status == 400 and error["param"] == "reference_audio"
        status, error = post(client, wav(clip(2.4)))  # 76,844 bytes: under the byte limit, over the seconds
        assert status == 400 and error["code"] == "reference_too_long"
        status, error = post(client, wav(clip(2.6)))
        assert status == 400 and error["code"] == "reference_too_large"
        assert post(client, wav(clip(1.0)))[0] == 200  # still serving
    with TestClient(create_app(Engine(runtime_for(micro_model(voice=False))), limits)) as client:
        status, error = post(client, wav(clip(1.0)))
        assert status == 400 and error["code"] == "cloning_unsupported"
        assert client.get("/v1/audio/voices").json()["cloning"] is False
        assert client.post("/v1/audio/speech", json=body).status_code == 200


def test_duet_speak_voice_ref_on_a_real_fsq_codec(tmp_path, capsys):
    import duet
    from checkpoint_testing import write_tiny_gepard
    from duet.cli import main

    model_dir = write_tiny_gepard(tmp_path / "voice", voice=True)
    speaker = duet.load(model_dir)
    assert speaker.clone_from_audio
    ref = tmp_path / "ref.wav"
    sf.write(ref, clip(1.0), SR)  # resampled to the codec's rate on the way in
    out = tmp_path / "out.wav"
    argv = ["speak", "Hi.", "-o", str(out), "--model", str(model_dir), "--voice-ref", str(ref), "--seed", "2"]
    assert main(argv) == 0, capsys.readouterr().err
    written, rate = sf.read(out, dtype="float32")
    expected = speaker.speak("Hi.", seed=2, voice_ref=ref)
    assert rate == speaker.sample_rate and written.shape == expected.audio.shape
    np.testing.assert_allclose(written, np.clip(expected.audio, -1, 1), atol=1.5 / 32768)
    plain = speaker.speak("Hi.", seed=2)
    assert plain.audio.shape != expected.audio.shape or not np.allclose(plain.audio, expected.audio)

    without = write_tiny_gepard(tmp_path / "plain")
    assert main(["speak", "Hi.", "-o", str(out), "--model", str(without), "--voice-ref", str(ref)]) == 2
    assert "no voice compressor" in capsys.readouterr().err
    missing = str(tmp_path / "no.wav")
    assert main(["speak", "Hi.", "-o", str(out), "--model", str(model_dir), "--voice-ref", missing]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["speak", "Hi.", "-o", str(out), "--model", str(model_dir), "--voice-ref", str(ref),
                 "--prompt", str(ref), "--prompt-text", "hi"]) == 2
    assert "give one of them" in capsys.readouterr().err
    with pytest.raises(DuetError, match="voice_ref_rate goes with voice_ref"):
        speaker.speak("Hi.", voice_ref_rate=8000)
    with pytest.raises(DuetError, match="cannot clone a voice from reference audio"):
        duet.load(without).speak("Hi.", voice_ref=ref)

