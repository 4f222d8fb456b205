"""Speech editing (`Speaker.edit` over a Luna runtime, `duet edit`) on a randomly initialised micro Luna and a tiny duet-rvq codec.

Random weights say nothing about quality; these tests pin the plumbing: seconds -> frames, the codes outside the span
kept bit for bit, the span resized by the change in predicted length under a new transcript, the same result as the
grid-level ``duet.luna.infill.edit``, and clear errors (one line from the CLI) before any decoding.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import soundfile as sf
import torch

from checkpoint_testing import write_tiny_gepard
from duet.cli import main
from duet.errors import DuetError
from duet.text.prompts import luna_prompt
from duet.text.tokens import service_ids
from duet.tts.luna_edit import CROSSFADE_SECONDS, span_frames_of, splice

TEXT = "Good morning."




def _recording(luna_speaker, seconds: float = 1.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(round(seconds * luna_speaker.sample_rate)) / luna_speaker.sample_rate
    return (0.3 * np.sin(2 * np.pi * 180 * t) + 0.05 * rng.standard_normal(t.shape)).astype(np.float32)


def _grid(luna_speaker, audio: np.ndarray) -> torch.Tensor:
    return luna_speaker.codec.encode(torch.from_numpy(audio)[None]).codes[0].T  # (T, Q)


def _predicted(luna_speaker, text: str) -> float:
    ids = luna_prompt(text, luna_speaker.runtime.tokenizer)
    return float(luna_speaker.runtime.duration.token_durations(torch.tensor([ids]), torch.tensor([len(ids)])).sum())


def test_seconds_become_the_frames_that_cover_them():
    assert span_frames_of((0.2, 0.5), 1.0, 25.0, 25) == (5, 13)  # floor(5.0), ceil(12.5)
    assert span_frames_of((0.0, 1.0), 1.0, 25.0, 25) == (0, 25)
    assert span_frames_of((0.21, 0.22), 1.0, 25.0, 25) == (5, 6)  # a sliver still regenerates one frame
    assert span_frames_of((0.9, 1.0), 1.0, 25.0, 24) == (22, 24)  # clipped to the grid


def test_a_retake_keeps_the_codes_outside_the_span_and_matches_the_grid_level_edit(luna_speaker):
    from duet.luna.infill import edit

    audio = _recording(luna_speaker)
    before = _grid(luna_speaker, audio)  # (T, Q)
    fps = luna_speaker.codec.frame_rate
    a, b = math.floor(0.3 * fps), math.ceil(0.6 * fps)
    edited = luna_speaker.edit(audio, TEXT, (0.3, 0.6), seed=4, steps=4)
    assert edited.span == (a, b) and edited.grid.shape == before.shape
    assert edited.span_seconds == pytest.approx((a / fps, b / fps))
    assert torch.equal(edited.grid[:a], before[:a]) and torch.equal(edited.grid[b:], before[b:])
    assert not torch.equal(edited.grid[a:b], before[a:b])  # random weights: the regenerated codes differ
    ids = torch.tensor(luna_prompt(TEXT, luna_speaker.runtime.tokenizer))
    expected = edit(luna_speaker.runtime.model, ids, before, (a, b), b - a, replace(luna_speaker.runtime.config.decode, steps=4),
                    generator=torch.Generator().manual_seed(4))
    assert torch.equal(edited.grid, expected.grid)
    decoded = luna_speaker.codec.decode(expected.grid.T[None]).audio[0].numpy()
    spf, fade = luna_speaker.codec.samples_per_frame, round(CROSSFADE_SECONDS * luna_speaker.sample_rate)
    out = edited.speech.audio
    assert out.shape == audio.shape
    np.testing.assert_array_equal(out[:a * spf - fade], audio[:a * spf - fade])  # the recording, untouched
    np.testing.assert_array_equal(out[b * spf + fade:], audio[b * spf + fade:])
    np.testing.assert_allclose(out[a * spf:b * spf], decoded[a * spf:b * spf], atol=1e-6)  # the regenerated span
    assert edited.speech.pieces == (TEXT,) and edited.speech.sample_rate == luna_speaker.sample_rate


def test_an_edit_with_an_emotion_reads_its_token_in_both_transcripts(luna_speaker):
    from duet.luna.infill import edit

    audio = _recording(luna_speaker)
    before = _grid(luna_speaker, audio)
    fps = luna_speaker.codec.frame_rate
    a, b = math.floor(0.3 * fps), math.ceil(0.6 * fps)
    edited = luna_speaker.edit(audio, TEXT, (0.3, 0.6), seed=4, steps=4, emotion="sad")
    ids = torch.tensor(luna_prompt(TEXT, luna_speaker.runtime.tokenizer, emotion="sad"))
    assert int(ids[1]) == service_ids(luna_speaker.runtime.tokenizer).emotion("sad")
    expected = edit(luna_speaker.runtime.model, ids, before, (a, b), b - a,
                    replace(luna_speaker.runtime.config.decode, steps=4), generator=torch.Generator().manual_seed(4))
    assert torch.equal(edited.grid, expected.grid)
    with pytest.raises(DuetError, match="unknown emotion 'bored'"):
        luna_speaker.edit(audio, TEXT, (0.3, 0.6), emotion="bored")


def test_a_new_transcript_resizes_the_span_by_the_change_in_predicted_length(luna_speaker):
    audio = _recording(luna_speaker)
    before = _grid(luna_speaker, audio)
    fps = luna_speaker.codec.frame_rate
    a, b = math.floor(0.2 * fps), math.ceil(0.4 * fps)
    new_text = "Good morning to you all, my friends."
    n = max(1, round((b - a) + _predicted(luna_speaker, new_text) - _predicted(luna_speaker, TEXT)))
    assert n != b - a  # the test needs a length change to mean anything
    edited = luna_speaker.edit(audio, TEXT, (0.2, 0.4), new_text=new_text, seed=1, steps=4)
    assert edited.span == (a, a + n) and edited.grid.shape[0] == before.shape[0] - (b - a) + n
    assert torch.equal(edited.grid[:a], before[:a]) and torch.equal(edited.grid[a + n:], before[b:])
    spf, fade = luna_speaker.codec.samples_per_frame, round(CROSSFADE_SECONDS * luna_speaker.sample_rate)
    out = edited.speech.audio
    assert out.shape == (len(audio) + (n - (b - a)) * spf,)  # the recording's length plus the span's change
    np.testing.assert_array_equal(out[:a * spf - fade], audio[:a * spf - fade])
    np.testing.assert_array_equal(out[(a + n) * spf + fade:], audio[b * spf + fade:])  # shifted by the change
    assert edited.speech.pieces == (new_text,)


def _naive_splice(recording, decoded, start, old_end, new_end, fade):
    f0 = min(fade, start)  # each fade shortened to the samples there are
    f1 = min(fade, len(recording) - old_end, len(decoded) - new_end)
    out = []
    for i in range(new_end + len(recording) - old_end):
        if i < start:  # before the span: the recording, fading into the decode over its last ``f0`` samples
            k = start - i  # 1..start
            w = (f0 + 1 - k) / (f0 + 1) if k <= f0 else 0.0
            out.append((1 - w) * recording[i] + w * decoded[i])
        elif i < new_end:
            out.append(decoded[i])
        else:  # after it: the decode's continuation fading into the recording
            j = i - new_end  # 0..
            w = (j + 1) / (f1 + 1) if j < f1 else 1.0
            d = decoded[i] if j < f1 else 0.0
            out.append((1 - w) * d + w * recording[old_end + j])
    return np.array(out, dtype=np.float32)


@pytest.mark.parametrize("start, old_end, new_end", [(40, 60, 60), (40, 60, 75), (40, 70, 50), (3, 60, 70),
                                                     (40, 95, 95)])
def test_splice_matches_a_sample_by_sample_reference(start, old_end, new_end):
    rng = np.random.default_rng(0)
    recording = rng.standard_normal(100).astype(np.float32)
    decoded = rng.standard_normal(new_end + 100 - old_end).astype(np.float32)
    got = splice(recording, decoded, start, old_end, new_end, fade=5)
    np.testing.assert_allclose(got, _naive_splice(recording, decoded, start, old_end, new_end, 5), atol=1e-6)


def test_editing_is_seeded(luna_speaker):
    audio = _recording(luna_speaker)
    one = luna_speaker.edit(audio, TEXT, (0.1, 0.5), seed=7, steps=4)
    two = luna_speaker.edit(audio, TEXT, (0.1, 0.5), seed=7, steps=4)
    assert torch.equal(one.grid, two.grid)


@pytest.mark.parametrize("kwargs, message", [
    (dict(span_seconds=(0.5, 0.5)), "must be non-empty and lie inside"),
    (dict(span_seconds=(-0.1, 0.2)), "must be non-empty and lie inside"),
    (dict(span_seconds=(0.2, 3.0)), "must be non-empty and lie inside"),
    (dict(span_seconds=(float("nan"), 0.2)), "must be non-empty and lie inside"),
    (dict(text="  "), "transcript"),
    (dict(new_text=" "), "new transcript is empty"),
    (dict(audio="silent"), "the recording to edit is silent"),
    (dict(audio="nan"), "NaN"),
    (dict(audio="long"), "edits at most"),
    (dict(steps=0), "steps"),
])
def test_bad_input_is_a_clear_error_before_any_decoding(luna_speaker, monkeypatch, kwargs, message):
    calls = []
    forward = luna_speaker.runtime.model.forward
    monkeypatch.setattr(luna_speaker.runtime.model, "forward", lambda inputs: calls.append(1) or forward(inputs))
    audios = {"silent": np.zeros(24000, np.float32), "nan": np.full(24000, np.nan, np.float32),
              "long": _recording(luna_speaker, seconds=31.0)}
    args = dict(audio=_recording(luna_speaker), text=TEXT, span_seconds=(0.2, 0.4)) | kwargs
    args["audio"] = audios.get(args["audio"], args["audio"]) if isinstance(args["audio"], str) else args["audio"]
    with pytest.raises(DuetError, match=message):
        luna_speaker.edit(args.pop("audio"), args.pop("text"), args.pop("span_seconds"), **args)
    assert calls == []


def test_cli_edits_a_recording_as_the_api_does(luna_dir, luna_speaker, tmp_path, capsys):
    src = tmp_path / "in.wav"
    sf.write(src, _recording(luna_speaker), luna_speaker.sample_rate)
    out = tmp_path / "out.wav"
    argv = ["edit", str(src), "--text", TEXT, "--span", "0.2:0.5", "--new-text", "Good evening.", "-o", str(out),
            "--model", str(luna_dir), "--seed", "3", "--steps", "4"]
    assert main(argv) == 0
    assert "regenerated as" in capsys.readouterr().out
    expected = luna_speaker.edit(sf.read(src, dtype="float32")[0], TEXT, (0.2, 0.5), new_text="Good evening.", seed=3,
                            steps=4)
    np.testing.assert_allclose(sf.read(out, dtype="float32")[0], expected.speech.audio, atol=1e-4)  # 16-bit file


@pytest.mark.parametrize("extra, message", [
    (["--span", "0.2-0.5"], "--span must be START:END"),
    (["--span", "0.5:0.2"], "--span must be START:END"),
    (["--span", "a:b"], "--span must be START:END"),
    (["--span", "0.2:9"], "must be non-empty and lie inside the recording"),
    (["--steps", "0"], "--steps must be a positive integer"),
    (["--model", "GEPARD"], "editing needs a Luna model"),
    (["--emotion", "bored"], "--emotion: unknown emotion"),
    (["--input", "missing.wav"], "no such file"),
])
def test_cli_errors_are_one_line_and_write_nothing(luna_dir, luna_speaker, tmp_path, capsys, extra, message):
    src = tmp_path / "in.wav"
    sf.write(src, _recording(luna_speaker), luna_speaker.sample_rate)
    gepard = write_tiny_gepard(tmp_path / "g") if "GEPARD" in extra else None
    options = {"--span": "0.2:0.5", "--model": str(luna_dir), "--input": str(src)}
    for flag, value in zip(extra[::2], extra[1::2]):
        options[flag] = {"GEPARD": str(gepard), "missing.wav": str(tmp_path / "missing.wav")}.get(value, value)
    out = tmp_path / "x.wav"
    argv = ["edit", options.pop("--input"), "--text", TEXT, "-o", str(out)]
    for flag, value in options.items():
        argv += [flag, value]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


class _Judge:
    """A recogniser stand-in: hears each making with the next WER of ``wers``; records what it was asked."""

    def __init__(self, wers):
        self.wers, self.calls = list(wers), []

    def score(self, audio, sample_rate, text, reference=None):
        from duet.metrics.clip import ClipScore

        self.calls.append((audio.copy(), text))
        return ClipScore(self.wers[len(self.calls) - 1], f"heard {len(self.calls)}")


def test_a_verified_edit_keeps_the_best_making_and_stops_once_one_is_heard(luna_speaker):
    from duet.tts.verify import SEED_STRIDE, VerifyConfig, verified_edit

    audio, new_text = _recording(luna_speaker), "Good evening."
    judge = _Judge([0.5, 0.2, 0.4])
    edited, score = verified_edit(luna_speaker.runtime, audio, TEXT, (0.2, 0.5), judge, VerifyConfig(tries=3),
                                  new_text=new_text, seed=5, steps=4)
    assert [text for _, text in judge.calls] == [new_text] * 3  # judged against the new transcript
    assert (score.tries, score.kept, score.first_wer, score.wer) == (3, 1, 0.5, 0.2)
    second = luna_speaker.edit(audio, TEXT, (0.2, 0.5), new_text=new_text, seed=5 + SEED_STRIDE, steps=4)
    assert torch.equal(edited.grid, second.grid)  # the kept making is the second, seeded seed + stride
    np.testing.assert_array_equal(edited.speech.audio, judge.calls[1][0])

    judge = _Judge([0.0, 0.9])
    _, score = verified_edit(luna_speaker.runtime, audio, TEXT, (0.2, 0.5), judge, VerifyConfig(tries=3),
                             new_text=new_text, seed=5, steps=4)
    assert len(judge.calls) == 1 and (score.tries, score.wer) == (1, 0.0)  # heard at once: no retry


def test_cli_verify_flags_are_checked_before_loading(luna_dir, tmp_path, capsys):
    src = tmp_path / "in.wav"
    sf.write(src, np.zeros(100, np.float32), 22050)
    argv = ["edit", str(src), "--text", TEXT, "--span", "0.1:0.2", "-o", str(tmp_path / "o.wav"), "--model",
            str(luna_dir)]
    assert main([*argv, "--verify-tries", "2"]) == 2
    assert "--verify-tries goes with --verify" in capsys.readouterr().err
    assert main([*argv, "--verify", "--verify-tries", "0"]) == 2
    assert "verify tries must be in [1, 16]" in capsys.readouterr().err
    assert main([*argv, "--verify-asr", "base"]) == 2
    assert "--verify-asr goes with --verify" in capsys.readouterr().err
    assert main([*argv, "--verify", "--verify-asr", str(tmp_path / "none")]) == 2
    assert "--verify-asr: ASR model" in capsys.readouterr().err


def test_a_recording_at_another_rate_is_edited_as_its_resampling_is(luna_speaker):
    from duet.audio import resample

    at_16k = resample(_recording(luna_speaker), luna_speaker.sample_rate, 16_000)
    given = luna_speaker.edit(at_16k, TEXT, (0.2, 0.5), sample_rate=16_000, seed=2, steps=4)
    resampled = luna_speaker.edit(resample(at_16k, 16_000, luna_speaker.sample_rate), TEXT, (0.2, 0.5), seed=2,
                                  steps=4)
    assert torch.equal(given.grid, resampled.grid)
    np.testing.assert_array_equal(given.speech.audio, resampled.speech.audio)  # spliced into the resampled samples
