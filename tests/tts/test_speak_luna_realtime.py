"""duet.load / the Speaker over a Luna Realtime runtime / `duet speak --stream` on a randomly initialised micro Luna Realtime (blocks of 4
frames) and a random rvq-tiny codec.

Random weights say nothing about quality; these tests pin the plumbing: dispatch on the shipped type, audio handed
out block by block and equal to speak(), the learned end against the bound, seeds, and one-line errors.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import soundfile as sf
import torch

import duet
from checkpoint_testing import write_tiny_gepard, write_tiny_luna_realtime
from duet.cli import main
from duet.errors import DuetError
from duet.text.prompts import luna_prompt
from duet.tts import MODELS
from duet.tts.luna_realtime import RealtimeRuntime, load_realtime_runtime

SPF = 960  # rvq-tiny: 24 kHz, 25 frames per second


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_tiny_luna_realtime(tmp_path_factory.mktemp("realtime"), end_bias=-20.0)  # never ends by itself


@pytest.fixture
def speaker(model_dir):
    speaker = duet.load(model_dir)
    speaker.runtime.config = replace(speaker.runtime.config, stream=replace(speaker.runtime.config.stream, max_frames=10))
    return speaker


def test_load_dispatches_on_the_config_type_and_the_name_is_known(speaker):
    assert isinstance(speaker.runtime, RealtimeRuntime) and "luna-realtime-tiny" in MODELS
    assert speaker.runtime.block_size == 4 and speaker.sample_rate == 24000 and speaker.voices == ("default",)


def test_stream_hands_out_each_block_and_equals_speak(speaker):
    chunks = list(speaker.stream("Hello there.", seed=3, steps=2))
    assert [len(c) for c in chunks] == [4 * SPF, 4 * SPF, 2 * SPF]  # blocks of 4 frames up to the bound of 10
    speech = speaker.speak("Hello there.", seed=3, steps=2)
    np.testing.assert_array_equal(np.concatenate(chunks), speech.audio)
    assert speech.ended == ("bound",) and speech.audio.dtype == np.float32
    assert not np.array_equal(speaker.speak("Hello there.", seed=4, steps=2).audio, speech.audio)


def test_the_bound_follows_the_duration_predictor(model_dir):
    speaker = duet.load(model_dir)  # max_frames 750, bound_factor 2
    ids = luna_prompt("Good morning.", speaker.runtime.tokenizer)
    predicted = float(speaker.runtime.duration.token_durations(torch.tensor([ids]), torch.tensor([len(ids)])).sum())
    bound = speaker.runtime.bound_for(ids)
    assert bound == int(np.ceil(2 * predicted)) + 4 < 750
    speech = speaker.speak("Good morning.", seed=0, steps=1)
    assert speech.ended == ("bound",) and len(speech.audio) == bound * SPF
    speaker.runtime.config = replace(speaker.runtime.config, bound_factor=None, stream=replace(speaker.runtime.config.stream, max_frames=6))
    assert speaker.runtime.bound_for(ids) == 6


def test_the_learned_end_stops_a_piece(tmp_path):
    speaker = duet.load(write_tiny_luna_realtime(tmp_path, end_bias=20.0))  # "past the end" from the first frame
    speaker.runtime.config = replace(speaker.runtime.config, floor_factor=None)  # the end head alone
    ended: list[str] = []
    chunks = list(speaker.stream("Hello there. Good morning.", seed=0, ended=ended))
    gap = round(speaker.config.gap_seconds * speaker.sample_rate)
    assert [len(c) for c in chunks] == [gap] and ended == ["stop", "stop"]  # speech ends on block 0's start


def test_bad_input_is_a_clear_error_before_any_decoding(speaker):
    for steps in (0, -3):
        with pytest.raises(DuetError, match="steps must be a positive integer"):
            speaker.speak("Hi.", steps=steps)
        with pytest.raises(DuetError, match="steps must be a positive integer"):
            speaker.stream("Hi.", steps=steps)  # eager: raised by the call, not by the first chunk
    with pytest.raises(DuetError, match="empty"):
        speaker.stream("   ")
    with pytest.raises(DuetError, match="unknown voice"):
        speaker.chunks("Hi.", voice="nobody")
    with pytest.raises(DuetError, match="temperature"):
        speaker.speak("Hi.", temperature=-1.0)
    with pytest.raises(DuetError, match="cfg_scale"):
        speaker.stream("Hi.", cfg_scale=float("inf"))


def test_a_codec_of_another_shape_is_refused(model_dir, tmp_path):
    write_tiny_gepard(tmp_path)  # its codec is fsq-tiny
    with pytest.raises(DuetError, match=r"grid \(4 codebooks x 64\) needs 4 of 64"):
        load_realtime_runtime(model_dir, codec=str(tmp_path / "codec"))


def test_cli_streams_blocks_to_the_file(model_dir, tmp_path, capsys):
    out, streamed = tmp_path / "a.wav", tmp_path / "b.wav"
    argv = ["speak", "Hello there.", "-o", str(out), "--model", str(model_dir), "--seed", "1", "--steps", "2"]
    assert main(argv) == 0
    assert "hit the length bound" in capsys.readouterr().out  # the end head never fires: the bound ends it
    assert main(argv[:3] + [str(streamed)] + argv[4:] + ["--stream"]) == 0
    assert "first audio after" in capsys.readouterr().out
    audio, sr = sf.read(streamed, dtype="float32")
    assert sr == 24000 and len(audio) > 0 and len(audio) % SPF == 0
    np.testing.assert_allclose(audio, sf.read(out, dtype="float32")[0], atol=1e-4)  # 16-bit files


@pytest.mark.parametrize("extra, message", [
    (["--steps", "0"], "--steps must be a positive integer"),
    (["--speed", "2"], "--speed applies to Gepard and Luna models only"),
])
def test_cli_errors_are_one_line_and_write_nothing(model_dir, tmp_path, capsys, extra, message):
    out = tmp_path / "x.wav"
    assert main(["speak", "Hi.", "-o", str(out), "--model", str(model_dir), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_cfg_scale_reaches_the_block_decoder(speaker, monkeypatch):
    import duet.tts.luna_realtime as stream_module

    guidance: list[bool] = []
    session = stream_module.KVBlockSession

    def recorded(*args, **kwargs):
        guidance.append(kwargs["guidance"])  # True: conditional + unconditional rows per forward
        return session(*args, **kwargs)

    monkeypatch.setattr(stream_module, "KVBlockSession", recorded)
    speaker.speak("Hello there.", seed=3, steps=2)  # the default scale (2)
    speaker.speak("Hello there.", seed=3, steps=2, cfg_scale=1.0)
    assert guidance == [True, False]


def test_no_end_before_the_floor(tmp_path):
    """An end head that fires from the first frame still lets floor_factor x the predicted frames through, across
    block boundaries (blocks of 4); the engine's floor: tests/serve/test_luna_realtime_serving.py."""
    speaker = duet.load(write_tiny_luna_realtime(tmp_path, end_bias=20.0))
    speaker.runtime.config = replace(speaker.runtime.config, floor_factor=0.75)
    ids = luna_prompt("Good morning.", speaker.runtime.tokenizer)
    floor = speaker.runtime.floor_for(ids)
    assert floor == int(np.floor(0.75 * speaker.runtime.predicted_frames(ids))) and floor % 4 != 0 and floor > 4
    ended: list[str] = []
    chunks = list(speaker.chunks("Good morning.", seed=0, steps=1, ended=ended))
    assert sum(c.codes.shape[1] for c in chunks) == floor and ended == ["stop"]
