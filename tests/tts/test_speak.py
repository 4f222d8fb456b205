"""duet.load / the Speaker over a Gepard runtime / `duet speak` on a randomly initialised tiny Gepard and a tiny duet-fsq codec.

Random weights say nothing about quality; these tests pin the plumbing: seeds, sentence splitting, the length
bound, streaming equal to one-shot decoding, files written, and one-line errors for bad input.
"""

import json
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

import duet
from checkpoint_testing import write_tiny_gepard
from duet.cli import main
from duet.errors import DuetError


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_gepard(tmp_path_factory.mktemp("speak"))


def _bounded(speaker, frames: int = 6):
    """Random weights rarely fire the stop head: a small fixed bound keeps generations short and predictable."""
    from dataclasses import replace

    from duet.sampling import FrameBound

    runtime = speaker.runtime
    runtime.config = replace(runtime.config, bound=FrameBound(frames_per_token=0.0, margin_frames=frames),
                             params=replace(runtime.config.params, stop_threshold=0.999999))
    return speaker


def test_load_by_directory_and_speak_is_seeded(model_dir):
    speaker = _bounded(duet.load(model_dir))
    a = speaker.speak("Hello there.", seed=3)
    b = speaker.speak("Hello there.", seed=3)
    c = speaker.speak("Hello there.", seed=4)
    spf = speaker.codec.samples_per_frame
    assert a.sample_rate == speaker.codec.sample_rate and a.audio.dtype == np.float32
    assert a.audio.shape == (6 * spf,) and a.ended == ("bound",)
    np.testing.assert_array_equal(a.audio, b.audio)
    assert not np.array_equal(a.audio, c.audio)


def test_long_text_is_spoken_whole_sentence_by_sentence(model_dir):
    speaker = _bounded(duet.load(model_dir))
    speech = speaker.speak("Hello there. How are you? Good morning.", seed=0)
    gap = round(speaker.config.gap_seconds * speech.sample_rate)
    assert speech.pieces == ("Hello there.", "How are you?", "Good morning.")
    assert len(speech.ended) == 3
    assert len(speech.audio) == 3 * 6 * speaker.codec.samples_per_frame + 2 * gap


def test_stream_equals_one_shot_decode(model_dir):
    speaker = _bounded(duet.load(model_dir), frames=30)  # > the decoder look-ahead (8)
    ended: list[str] = []
    chunks = list(speaker.stream("The quick brown fox. Good morning.", seed=7, ended=ended))
    whole = speaker.speak("The quick brown fox. Good morning.", seed=7)
    assert len(chunks) > 4 and ended == list(whole.ended)
    np.testing.assert_allclose(np.concatenate(chunks), whole.audio, atol=1e-5)


def test_bad_input_is_a_clear_error(model_dir):
    speaker = duet.load(model_dir)
    with pytest.raises(DuetError, match="empty"):
        speaker.speak("   ")
    with pytest.raises(DuetError, match="unknown voice"):
        speaker.speak("Hi.", voice="nobody")
    with pytest.raises(DuetError, match="unknown model"):
        duet.load("no-such-model")
    with pytest.raises(DuetError, match="steps applies to Luna models only"):  # one frame per step, no refinement
        speaker.speak("Hi.", steps=8)
    with pytest.raises(DuetError, match="no duration predictor"):
        speaker.stream("Hi.", speed=2.0)  # eager: raised by the call, not by the first chunk


def test_speak_and_the_engine_give_the_same_audio_for_one_seed(model_dir):
    """duet speak and duet serve drive one runtime and read its steps with one rule: same model, text, seed and
    bound give the same frames, so the same audio up to the codec's chunking."""
    from dataclasses import replace

    from duet.serve.engine import Engine
    from duet.tts.request import SynthesisRequest

    speaker = _bounded(duet.load(model_dir), frames=20)
    speech = speaker.speak("Hello there.", seed=9)
    request = SynthesisRequest("Hello there.", params=replace(speaker.runtime.default_params, seed=9))
    with Engine(speaker.runtime) as engine:
        audio, finish = engine.submit(request).collect(timeout=120)
    assert (finish.reason,) == speech.ended and finish.frames == 20
    np.testing.assert_allclose(audio, speech.audio, atol=1e-5)


def test_cfg_needs_a_model_with_an_unconditional_path(model_dir, tmp_path, capsys):
    speaker = _bounded(duet.load(model_dir))
    with pytest.raises(DuetError, match="no unconditional path"):
        speaker.speak("Hello there.", cfg_scale=2.0)
    assert speaker.speak("Hello there.", seed=1, cfg_scale=1.0).audio.shape == speaker.speak("Hello there.",
                                                                                             seed=1).audio.shape
    assert main(["speak", "Hi.", "-o", str(tmp_path / "x.wav"), "--model", str(model_dir), "--cfg-scale", "2"]) == 2
    assert "no unconditional path" in capsys.readouterr().err and not (tmp_path / "x.wav").exists()


def test_cfg_runs_the_unconditional_pass(tmp_path):
    """With text dropout trained in, cfg_scale w != 1 samples from uncond + w (cond - uncond): the frames equal the
    sampler's own two-pass run with the prompt's unconditional twin (the formula is tested in test_generate)."""
    import torch

    from duet.gepard.checkpoint import load_gepard
    from duet.gepard.generate import stream
    from duet.gepard.model import GepardPrompt
    from duet.sampling import FrameBound, SamplingParams
    from duet.text.prompts import gepard_prompt

    model_dir = write_tiny_gepard(tmp_path, text_dropout_prob=0.1)
    speaker = _bounded(duet.load(model_dir), frames=8)
    ids = gepard_prompt("Hello there.", load_gepard(model_dir).tokenizer, language="en")
    prompt = GepardPrompt(torch.tensor([ids]))
    defaults = speaker.runtime.default_params

    def frames(w: float) -> torch.Tensor:
        sampling = SamplingParams(temperature=defaults.temperature, top_k=defaults.top_k, stop_threshold=0.999999,
                                  cfg_scale=w, seed=5)
        return torch.cat(list(stream(speaker.runtime.model, prompt, params=sampling,
                                     bound=FrameBound(frames_per_token=0.0, margin_frames=8), fsq=speaker.runtime.fsq,
                                     uncond_prompt=prompt.unconditional() if w != 1 else None)))

    guided = speaker.codec.decode(frames(3.0).T[None]).audio[0].numpy()
    np.testing.assert_allclose(speaker.speak("Hello there.", seed=5, cfg_scale=3.0).audio, guided, atol=1e-5)
    assert not torch.equal(frames(3.0), frames(1.0))
    with pytest.raises(DuetError, match="cfg_scale"):
        speaker.speak("Hello there.", cfg_scale=float("nan"))


def test_cfg_of_an_aligned_voice_model_guides_towards_the_reference_voice(tmp_path):
    """Aligned text input and the voice compressor: the unconditional pass reads the null prefix with the same text
    and layout; speak(voice_ref=, cfg_scale=) equals the sampler's two-pass run over those two prompts."""
    import torch

    from duet.gepard.checkpoint import load_gepard
    from duet.gepard.generate import stream
    from duet.gepard.model import GepardPrompt
    from duet.gepard.voice import reference_prefix
    from duet.sampling import FrameBound, SamplingParams
    from duet.text.prompts import gepard_prompt

    model_dir = write_tiny_gepard(tmp_path, voice=True, aligned=True)
    speaker = _bounded(duet.load(model_dir), frames=8)
    model = speaker.runtime.model
    rng = np.random.default_rng(3)
    reference = (0.1 * rng.standard_normal(4000)).astype(np.float32)
    ids = gepard_prompt("Hello there.", load_gepard(model_dir).tokenizer, language="en")
    prefix = reference_prefix(model, speaker.codec, reference, speaker.runtime.fsq)
    prompt = GepardPrompt(torch.tensor([ids]), prefix=prefix)
    defaults = speaker.runtime.default_params
    sampling = SamplingParams(temperature=defaults.temperature, top_k=defaults.top_k, stop_threshold=0.999999,
                              cfg_scale=3.0, seed=5)
    frames = torch.cat(list(stream(model, prompt, params=sampling, bound=FrameBound(frames_per_token=0.0, margin_frames=8),
                                   fsq=speaker.runtime.fsq, uncond_prompt=model.unconditional(prompt))))
    guided = speaker.codec.decode(frames.T[None]).audio[0].numpy()
    out = speaker.speak("Hello there.", seed=5, cfg_scale=3.0, voice_ref=reference)
    np.testing.assert_allclose(out.audio, guided, atol=1e-5)
    plain = speaker.speak("Hello there.", seed=5, voice_ref=reference)
    assert out.audio.shape != plain.audio.shape or not np.allclose(out.audio, plain.audio)  # guidance changed it


def test_cli_writes_the_file_and_streams(model_dir, tmp_path, capsys):
    out = tmp_path / "hello.wav"
    argv = ["speak", "Hello there.", "-o", str(out), "--model", str(model_dir), "--seed", "1"]
    assert main(argv) == 0
    audio, sr = sf.read(out)
    assert sr == 22050 and len(audio) > 0
    streamed = tmp_path / "streamed.wav"
    assert main(argv[:3] + [str(streamed)] + argv[4:] + ["--stream"]) == 0
    assert "first audio after" in capsys.readouterr().out
    assert sf.info(streamed).frames == len(audio)


@pytest.mark.parametrize("argv, message", [
    (["speak", "  ", "-o", "{tmp}/x.wav"], "the text is empty"),
    (["speak", "Hi.", "-o", "{tmp}/x.wav", "--model", "no-such-model"], "unknown model"),
    (["speak", "Hi.", "-o", "{tmp}/missing/x.wav"], "does not exist"),
    (["speak", "Hi.", "-o", "{tmp}/x.mp9"], "use a .wav"),
    (["speak", "Hi.", "-o", "{tmp}"], "use a .wav"),
    (["speak", "Hi.", "-o", "{tmp}/x.wav", "--temperature", "nan"], "--temperature must be a number in [0, 10]"),
    (["speak", "Hi.", "-o", "{tmp}/x.wav", "--temperature", "inf"], "--temperature must be a number in [0, 10]"),
    (["speak", "Hi.", "-o", "{tmp}/x.wav", "--top-k", "9223372036854775808"], "--top-k must be in [0, 65536]"),
    (["speak", "Hi.", "-o", "{tmp}/x.wav", "--seed", "-1"], "--seed must be in [0, 2**63)"),
    (["speak", "h\ud800i", "-o", "{tmp}/x.wav"], "not valid Unicode"),
    (["speak", "Hi. " * 6000, "-o", "{tmp}/x.wav"], "the limit is 20000"),
    (["speak", "Hi.", "-o", "/proc/duet-test.wav"], "cannot write /proc/duet-test.wav"),
    (["speak", "Hi."], "give the text to speak and -o OUTPUT"),
])
def test_cli_errors_are_one_line_and_exit_2(argv, message, tmp_path, capsys):
    assert main([a.format(tmp=tmp_path) if "{tmp}" in a else a for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "x.wav").exists()


def test_cli_lists_the_voices(model_dir, capsys):
    assert main(["speak", "--list-voices", "--model", str(model_dir)]) == 0
    assert capsys.readouterr().out.split() == ["default"]


def test_cli_unknown_voice(model_dir, tmp_path, capsys):
    assert main(["speak", "Hi.", "-o", str(tmp_path / "x.wav"), "--model", str(model_dir), "--voice", "x"]) == 2
    assert "unknown voice" in capsys.readouterr().err
    assert not (tmp_path / "x.wav").exists()
    assert json.loads((model_dir / "config.json").read_text())["type"] == "gepard"


def test_a_bad_speak_flag_is_answered_before_torch_is_imported():
    # A fresh interpreter: this test process has torch loaded already.
    code = ("import sys\nfrom duet.cli import main\n"
            "code = main(['speak', 'Hi.', '--temperature', 'nan', '-o', 'x.wav'])\n"
            "print(code, 'torch' in sys.modules, 'duet.train.cli' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["2", "False", "False"], out.stderr[-2000:]
    assert "--temperature" in out.stderr
