"""duet.load / the Speaker over a Luna runtime / `duet speak --steps` on a randomly initialised micro Luna and a tiny duet-rvq codec.

Random weights say nothing about quality; these tests pin the plumbing: the length from the duration predictor
(speed, the bound), the number of refinement steps, seeds, sentence splitting, streaming equal to one-shot decoding,
and clear errors (one line from the CLI) for bad input.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import soundfile as sf
import torch

import duet
from checkpoint_testing import write_tiny_gepard
from duet.cli import main
from duet.errors import DuetError
from duet.text.prompts import luna_prompt
from duet.tts import MODELS
from duet.tts.luna import LunaRuntime, load_luna_runtime
from duet.tts.request import SynthesisRequest
from duet.tts.retime import RetimeConfig
from duet.tts.speaker import Speaker


@pytest.fixture(scope="module")
def gepard_dir(tmp_path_factory):
    return write_tiny_gepard(tmp_path_factory.mktemp("gepard"))



def _frames(luna_speaker, text: str, speed: float = 1.0) -> int:
    return luna_speaker.runtime.frame_bound(SynthesisRequest(text, speed=speed))


def _text(ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([ids]), torch.tensor([len(ids)])  # (1, S), (1,)


def _count_forwards(luna_speaker, monkeypatch) -> list[int]:
    calls: list[int] = []
    forward = luna_speaker.runtime.model.forward

    def counted(inputs):
        calls.append(inputs.target.shape[0])
        return forward(inputs)

    monkeypatch.setattr(luna_speaker.runtime.model, "forward", counted)
    return calls


def test_load_dispatches_on_the_config_type_and_luna_tiny_is_a_known_name(luna_speaker):
    assert isinstance(luna_speaker, Speaker) and isinstance(luna_speaker.runtime, LunaRuntime)
    assert "luna-tiny" in MODELS
    assert luna_speaker.sample_rate == luna_speaker.codec.sample_rate and luna_speaker.voices == ("default",)


def test_length_comes_from_the_duration_predictor_and_speed_scales_it(luna_speaker):
    text = "Hello there."
    ids = luna_prompt(text, luna_speaker.runtime.tokenizer)
    expected = float(luna_speaker.runtime.duration.token_durations(*_text(ids)).sum())
    frames = _frames(luna_speaker, text)
    assert frames == round(expected) > 0
    assert _frames(luna_speaker, text, speed=2.0) == round(expected / 2)
    speech = luna_speaker.speak(text, seed=3, steps=8)
    spf = luna_speaker.codec.samples_per_frame
    assert speech.audio.dtype == np.float32 and speech.audio.shape == (frames * spf,)
    assert speech.ended == ("stop",) and speech.pieces == (text,)
    every_speed = RetimeConfig(followed_speeds=(0.0, float("inf")))
    laid = Speaker(luna_speaker.runtime, replace(luna_speaker.config, retime=every_speed))
    fast = laid.speak(text, seed=3, steps=8, speed=2.0)  # every speed laid out
    assert fast.audio.shape == (round(expected / 2) * spf,)
    # by default, faster than the speaker follows: made at its fastest and time-stretched the rest of the way
    top = luna_speaker.config.retime.followed_speeds[1]
    stretched = luna_speaker.speak(text, seed=3, steps=8, speed=2.0)
    assert stretched.audio.shape == (round(round(expected / top) * spf * top / 2.0),)


@pytest.mark.parametrize("steps", [32, 16, 8])
def test_steps_set_the_number_of_refinement_passes(luna_speaker, monkeypatch, steps):
    calls = _count_forwards(luna_speaker, monkeypatch)
    speech = luna_speaker.speak("Good morning.", seed=0, steps=steps)
    assert len(calls) == steps and set(calls) == {2}  # one forward per step, conditional + unconditional rows (CFG)
    assert len(speech.audio) == _frames(luna_speaker, "Good morning.") * luna_speaker.codec.samples_per_frame


def test_cfg_scale_one_drops_the_unconditional_rows(luna_speaker, monkeypatch):
    calls = _count_forwards(luna_speaker, monkeypatch)
    luna_speaker.speak("Good morning.", seed=0, steps=8, cfg_scale=1.0)
    assert len(calls) == 8 and set(calls) == {1}
    with pytest.raises(DuetError, match="cfg_scale"):
        luna_speaker.stream("Hi.", cfg_scale=-1.0)


def test_default_is_32_steps(luna_speaker, monkeypatch):
    calls = _count_forwards(luna_speaker, monkeypatch)
    luna_speaker.speak("Hi.", seed=0)
    assert len(calls) == 32


def test_speak_is_seeded(luna_speaker):
    a = luna_speaker.speak("Hello there.", seed=3, steps=8)
    b = luna_speaker.speak("Hello there.", seed=3, steps=8)
    c = luna_speaker.speak("Hello there.", seed=4, steps=8)
    np.testing.assert_array_equal(a.audio, b.audio)
    assert not np.array_equal(a.audio, c.audio)


def test_long_text_is_spoken_sentence_by_sentence_and_streams_one_chunk_per_sentence(luna_speaker):
    text = "Hello there. How are you? Good morning."
    speech = luna_speaker.speak(text, seed=1, steps=8)
    gap = round(luna_speaker.config.gap_seconds * speech.sample_rate)
    pieces = ("Hello there.", "How are you?", "Good morning.")
    assert speech.pieces == pieces and speech.ended == ("stop",) * 3
    spf = luna_speaker.codec.samples_per_frame
    assert len(speech.audio) == sum(_frames(luna_speaker, p) for p in pieces) * spf + 2 * gap
    ended: list[str] = []
    chunks = list(luna_speaker.stream(text, seed=1, steps=8, ended=ended))
    assert len(chunks) == 5 and [len(c) for c in chunks[1::2]] == [gap, gap]  # piece, gap, piece, gap, piece
    assert ended == list(speech.ended)
    np.testing.assert_array_equal(np.concatenate(chunks), speech.audio)


def test_a_length_past_the_bound_is_capped(luna_dir):
    luna_speaker = duet.load(luna_dir)
    luna_speaker.runtime.config = replace(luna_speaker.runtime.config, max_frames=5)
    speech = luna_speaker.speak("The quick brown fox jumps over the lazy dog.", seed=0, steps=8)
    assert speech.ended == ("bound",) and len(speech.audio) == 5 * luna_speaker.codec.samples_per_frame


def test_bad_input_is_a_clear_error_before_any_decoding(luna_speaker, monkeypatch):
    calls = _count_forwards(luna_speaker, monkeypatch)
    for steps in (0, -3):
        with pytest.raises(DuetError, match="steps must be a positive integer"):
            luna_speaker.speak("Hi.", steps=steps)
        with pytest.raises(DuetError, match="steps must be a positive integer"):
            luna_speaker.stream("Hi.", steps=steps)  # eager: raised by the call, not by the first chunk
    with pytest.raises(DuetError, match="speed must be a positive"):
        luna_speaker.speak("Hi.", speed=0.0)
    with pytest.raises(DuetError, match="0 frames"):
        luna_speaker.speak("Hi.", speed=1e6)
    with pytest.raises(DuetError, match="empty"):
        luna_speaker.speak("   ")
    with pytest.raises(DuetError, match="unknown voice"):
        luna_speaker.speak("Hi.", voice="nobody")
    assert calls == []


def _clip(luna_speaker, seconds: float = 0.6, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * luna_speaker.sample_rate)) / luna_speaker.sample_rate
    return (0.3 * np.sin(2 * np.pi * 180 * t) + 0.05 * rng.standard_normal(t.shape)).astype(np.float32)


def test_voice_prompt_holds_the_clips_codes_and_its_pace(luna_speaker):
    clip = _clip(luna_speaker)
    vp = luna_speaker.voice_prompt(clip, "  Good morning. ")
    codes = luna_speaker.codec.encode(torch.from_numpy(clip)[None]).codes[0]  # (Q, P)
    assert torch.equal(vp.grid, codes.T) and vp.text == "Good morning."
    predicted = float(luna_speaker.runtime.duration.token_durations(*_text(luna_prompt("Good morning.", luna_speaker.runtime.tokenizer))).sum())
    assert vp.pace == pytest.approx(min(2.0, max(0.5, codes.shape[1] / round(predicted))))


def test_cloning_decodes_transcript_plus_text_after_the_prompt_grid_as_infill_clone_does(luna_speaker, monkeypatch):
    from duet.luna.infill import clone

    vp = luna_speaker.voice_prompt(_clip(luna_speaker), "Good morning.")
    seen = []
    forward = luna_speaker.runtime.model.forward

    def spy(inputs):
        seen.append(inputs)
        return forward(inputs)

    monkeypatch.setattr(luna_speaker.runtime.model, "forward", spy)
    speech = luna_speaker.speak("Hello there.", seed=5, steps=8, prompt=vp)
    ids = luna_prompt("Good morning. Hello there.", luna_speaker.runtime.tokenizer)
    predicted = float(luna_speaker.runtime.duration.token_durations(*_text(luna_prompt("Hello there.", luna_speaker.runtime.tokenizer))).sum())
    frames = round(predicted * vp.pace)
    assert seen and torch.equal(seen[0].prompt[0], vp.grid) and seen[0].text_ids[0].tolist() == ids
    assert speech.audio.shape == (frames * luna_speaker.codec.samples_per_frame,)
    monkeypatch.setattr(luna_speaker.runtime.model, "forward", forward)
    grid = clone(luna_speaker.runtime.model, torch.tensor(ids), vp.grid, frames, replace(luna_speaker.runtime.config.decode, steps=8),
                 generator=torch.Generator().manual_seed(5))  # (T, Q)
    expected = luna_speaker.codec.decode(grid.T[None]).audio[0].numpy()
    np.testing.assert_allclose(speech.audio, expected, atol=1e-6)


def test_bad_prompts_are_refused_before_any_decoding(luna_speaker, monkeypatch):
    calls = _count_forwards(luna_speaker, monkeypatch)
    with pytest.raises(DuetError, match="silent"):
        luna_speaker.voice_prompt(np.zeros(8000, np.float32), "Hi.")
    with pytest.raises(DuetError, match="transcript"):
        luna_speaker.voice_prompt(_clip(luna_speaker), "  ")
    with pytest.raises(DuetError, match="at most"):
        luna_speaker.voice_prompt(_clip(luna_speaker, seconds=21.0), "Hi.")
    with pytest.raises(DuetError, match="non-finite|NaN|finite"):
        luna_speaker.voice_prompt(np.full(8000, np.nan, np.float32), "Hi.")
    assert calls == []


def test_a_codec_of_another_shape_is_refused(luna_dir, gepard_dir):
    with pytest.raises(DuetError, match=r"grid \(4 codebooks x 64\) needs 4 of 64"):
        load_luna_runtime(luna_dir, codec=str(gepard_dir.parent / "codec"))


def test_cli_speaks_with_steps_and_streams(luna_dir, tmp_path, capsys):
    out = tmp_path / "hello.wav"
    argv = ["speak", "Hello there. Good morning.", "-o", str(out), "--model", str(luna_dir), "--seed", "1",
            "--steps", "16"]
    assert main(argv) == 0
    audio, sr = sf.read(out, dtype="float32")
    assert sr == 24000 and len(audio) > 0
    assert "hit the length bound" not in capsys.readouterr().out
    streamed = tmp_path / "streamed.wav"
    assert main(argv[:3] + [str(streamed)] + argv[4:] + ["--stream"]) == 0
    assert "first audio after" in capsys.readouterr().out
    np.testing.assert_allclose(sf.read(streamed, dtype="float32")[0], audio, atol=1e-4)  # 16-bit files


@pytest.mark.parametrize("extra, message", [
    (["--steps", "0"], "--steps must be a positive integer"),
    (["--steps", "-2"], "--steps must be a positive integer"),
    (["--speed", "0"], "--speed must be a number in [0.25, 4]"),
    (["--speed", "1e6"], "--speed must be a number in [0.25, 4]"),
])
def test_cli_luna_errors_are_one_line_and_write_nothing(luna_dir, tmp_path, capsys, extra, message):
    out = tmp_path / "x.wav"
    assert main(["speak", "Hi.", "-o", str(out), "--model", str(luna_dir), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_cli_refuses_steps_for_gepard(gepard_dir, tmp_path, capsys):
    """Gepard decodes frame by frame: --steps / --speed mean nothing to it, so they are an error, not ignored."""
    out = tmp_path / "x.wav"
    assert main(["speak", "Hi.", "-o", str(out), "--model", str(gepard_dir), "--steps", "16"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--steps applies to Luna and Luna Realtime models only" in err and "Gepard model" in err
    assert len(err.splitlines()) == 1
    assert not out.exists()
    # --speed scales an aligned Gepard's predicted durations; this one has no duration predictor
    assert main(["speak", "Hi.", "-o", str(out), "--model", str(gepard_dir), "--speed", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no duration predictor" in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_cli_clones_a_prompt_clip(luna_dir, luna_speaker, tmp_path, capsys):
    ref = tmp_path / "ref.wav"
    sf.write(ref, _clip(luna_speaker), luna_speaker.sample_rate)
    out = tmp_path / "cloned.wav"
    argv = ["speak", "Hello there.", "-o", str(out), "--model", str(luna_dir), "--seed", "2", "--steps", "4",
            "--prompt", str(ref), "--prompt-text", "Good morning."]
    assert main(argv) == 0
    vp = luna_speaker.voice_prompt(sf.read(ref, dtype="float32")[0], "Good morning.")
    expected = luna_speaker.speak("Hello there.", seed=2, steps=4, prompt=vp).audio
    np.testing.assert_allclose(sf.read(out, dtype="float32")[0], expected, atol=1e-4)  # 16-bit file


@pytest.mark.parametrize("extra, message", [
    (["--prompt", "REF"], "--prompt and --prompt-text go together"),
    (["--prompt-text", "Hi."], "--prompt and --prompt-text go together"),
    (["--prompt", "missing.wav", "--prompt-text", "Hi."], "no such file"),
    (["--prompt", "SILENT", "--prompt-text", "Hi."], "silent"),
])
def test_cli_prompt_errors_are_one_line(luna_dir, tmp_path, capsys, extra, message):
    ref, silent = tmp_path / "ref.wav", tmp_path / "silent.wav"
    sf.write(ref, np.full(8000, 0.2, np.float32), 24000)
    sf.write(silent, np.zeros(8000, np.float32), 24000)
    extra = [{"REF": str(ref), "SILENT": str(silent), "missing.wav": str(tmp_path / "missing.wav")}.get(a, a)
             for a in extra]
    out = tmp_path / "x.wav"
    assert main(["speak", "Hi.", "-o", str(out), "--model", str(luna_dir), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_cli_refuses_a_prompt_for_gepard(gepard_dir, tmp_path, capsys):
    ref = tmp_path / "ref.wav"
    sf.write(ref, np.full(8000, 0.2, np.float32), 24000)
    argv = ["speak", "Hi.", "-o", str(tmp_path / "x.wav"), "--model", str(gepard_dir), "--prompt", str(ref),
            "--prompt-text", "Hi."]
    assert main(argv) == 2
    assert "--prompt applies to Luna models only" in capsys.readouterr().err
