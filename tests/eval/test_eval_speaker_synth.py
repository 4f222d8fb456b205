"""``duet eval run --model speaker:NAME|DIR``: any model through its speaker, streamed, one item at a time.

Expected audio comes from the speakers' public API called directly at the item's seed (voice_prompt + speak for
Luna, speak for Gepard and Luna Realtime), so the synthesiser is pinned to "clone the prompt with its transcript
where the model can, at the per-item seed and the set's steps", and its time to first audio to the first chunk.
"""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

import duet
from checkpoint_testing import write_tiny_gepard, write_tiny_luna, write_tiny_luna_realtime
from duet.audio import load_audio
from duet.errors import DuetError
from duet.eval.synth import SynthOptions, item_seed, load_synthesizer
from duet.eval.testset import TestItem


def _items(tmp_path, sr: int) -> list[TestItem]:
    t = np.arange(int(0.7 * sr)) / sr
    wav = tmp_path / "prompt.wav"
    sf.write(wav, (0.3 * np.sin(2 * np.pi * 150 * t)).astype(np.float32), sr)
    return [TestItem("a", "Good morning.", wav, "Hello there.", None, 1),
            TestItem("b", "", None, "How are you?", None, 2)]


def test_luna_clones_each_prompt_at_the_items_seed(tmp_path):
    model_dir = write_tiny_luna(tmp_path / "m")
    speaker = duet.load(model_dir)
    items = _items(tmp_path, speaker.sample_rate)
    synth = load_synthesizer(f"speaker:{model_dir}", SynthOptions(seed=7, steps=3))
    out = synth.synthesize(items)
    assert synth.batch_size == 1 and synth.name == f"speaker:{model_dir.name}"
    vp = speaker.voice_prompt(load_audio(items[0].prompt_wav, sample_rate=speaker.sample_rate)[0], "Good morning.")
    cloned = speaker.speak("Hello there.", seed=item_seed(7, "a"), steps=3, prompt=vp)
    plain = speaker.speak("How are you?", seed=item_seed(7, "b"), steps=3)
    np.testing.assert_allclose(out[0].audio, cloned.audio, atol=1e-6)
    np.testing.assert_allclose(out[1].audio, plain.audio, atol=1e-6)
    for r in out:
        assert r.ended == "stop" and 0 < r.ttfa_s <= r.wall_s
        assert r.frames * speaker.codec.samples_per_frame == len(r.audio)


def test_a_voice_gepard_clones_each_prompt_wav_alone(tmp_path):
    """A Gepard with the voice compressor takes the prompt wav as its reference (no transcript): the same audio as
    speak(voice_ref=), and not the null prefix's."""
    model_dir = write_tiny_gepard(tmp_path / "m", voice=True)
    speaker = duet.load(model_dir)
    items = _items(tmp_path, speaker.sample_rate)
    out = load_synthesizer(f"speaker:{model_dir}", SynthOptions(seed=5, temperature=1.0)).synthesize(items)
    clip = load_audio(items[0].prompt_wav, sample_rate=speaker.sample_rate)[0]
    cloned = speaker.speak("Hello there.", seed=item_seed(5, "a"), temperature=1.0, voice_ref=clip)
    unprompted = speaker.speak("Hello there.", seed=item_seed(5, "a"), temperature=1.0)
    np.testing.assert_allclose(out[0].audio, cloned.audio, atol=1e-6)
    assert out[0].audio.shape != unprompted.audio.shape or not np.allclose(out[0].audio, unprompted.audio)
    plain = speaker.speak("How are you?", seed=item_seed(5, "b"), temperature=1.0)
    np.testing.assert_allclose(out[1].audio, plain.audio, atol=1e-6)


@pytest.mark.parametrize("family", ["gepard", "realtime"])
def test_speakers_without_cloning_speak_the_target_text(family, tmp_path):
    if family == "gepard":
        model_dir, options = write_tiny_gepard(tmp_path / "m"), SynthOptions(seed=3, temperature=0.5, top_k=3)
        kwargs = {"temperature": 0.5, "top_k": 3}
    else:
        model_dir = write_tiny_luna_realtime(tmp_path / "m")
        options, kwargs = SynthOptions(seed=3, steps=2, cfg_scale=1.0), {"steps": 2, "cfg_scale": 1.0}
    speaker = duet.load(model_dir)
    items = _items(tmp_path, speaker.sample_rate)
    out = load_synthesizer(f"speaker:{model_dir}", options).synthesize(items)
    for item, r in zip(items, out):
        expected = speaker.speak(item.target_text, seed=item_seed(3, item.utt), **kwargs)
        np.testing.assert_allclose(r.audio, expected.audio, atol=1e-6)
        assert r.ended == ("bound" if "bound" in expected.ended else "stop")


def test_bad_specs_are_clear_errors(tmp_path):
    with pytest.raises(DuetError, match="speaker needs a model"):
        load_synthesizer("speaker")
    with pytest.raises(DuetError, match="unknown model"):
        load_synthesizer(f"speaker:{tmp_path / 'nothing'}")
    with pytest.raises(DuetError, match="steps must be a positive integer"):
        SynthOptions(steps=0)
    with pytest.raises(DuetError, match="temperature"):
        SynthOptions(temperature=-1.0)


def test_engine_runs_take_a_guidance_scale_per_request():
    synth = load_synthesizer("mock", SynthOptions(cfg_scale=2.0))  # every family runtime reads params.cfg_scale
    assert synth.params.cfg_scale == 2.0
    synth.close()


def test_engine_runs_take_the_models_sampling_defaults_where_unset():
    from duet.sampling import SamplingParams

    synth = load_synthesizer("mock", SynthOptions(temperature=0.0))
    assert synth.params == SamplingParams(temperature=0.0)  # the mock's top_k default (0) kept
    synth.close()
