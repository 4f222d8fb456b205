"""``duet voice train`` at micro size: a tiny aligned phoneme Gepard with a random tiny codec, fine-tuned on clips
spoken by espeak-ng. Too little data is refused in one line; --resume gives the weights of an uninterrupted run; the
exported voice loads in ``duet speak`` and the speech API; the command line."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file
from voice_testing import SENTENCES, write_ljspeech, write_manifest_folder, write_pairs, write_tiny_base

from duet.errors import DuetError
from duet.voice.checks import ClipChecks
from duet.voice.corpus import VoiceDataConfig
from duet.voice.recipe import VoiceTrainConfig, train_voice

DATA = VoiceDataConfig(min_minutes=0.1, test_fraction=0.2, val_fraction=0.1, checks=ClipChecks(max_seconds=6))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return write_tiny_base(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return write_pairs(tmp_path_factory.mktemp("data"))


def config(models, **overrides) -> VoiceTrainConfig:
    base, codec = models
    return VoiceTrainConfig(**{"data": DATA, "base_model": str(base), "codec": str(codec), "steps": 6,
                               "batch_frames": 300, "warmup_steps": 4, "calibration_steps": 2, "evaluate": False,
                               "decoder_share": 0.0, **overrides})


def weights(path):
    return load_file(str(path / "model.safetensors"))


def test_too_little_data_is_refused_in_one_line_before_any_training(models, data, tmp_path):
    cfg = config(models, data=replace(DATA, min_minutes=30))
    with pytest.raises(DuetError) as err:
        train_voice(data, tmp_path / "voice", cfg, progress=False)
    message = str(err.value)
    assert "\n" not in message and "minutes of usable recordings" in message and "needs at least 30 minutes" in message
    assert (tmp_path / "voice" / "checks.tsv").is_file()  # the report is there all the same
    assert not (tmp_path / "voice" / "build" / "run").exists()  # no training began


def test_resume_gives_the_weights_of_an_uninterrupted_run(models, data, tmp_path):
    whole = train_voice(data, tmp_path / "whole", config(models), progress=False)
    assert whole.finished and whole.facts["training"]["steps"] == 6
    cut = train_voice(data, tmp_path / "cut", config(models), progress=False, stop_at_step=3)
    assert not cut.finished and not (tmp_path / "cut" / "model.safetensors").exists()
    with pytest.raises(DuetError, match="already holds a voice run"):
        train_voice(data, tmp_path / "cut", config(models), progress=False)
    with pytest.raises(DuetError, match="began with other settings"):
        train_voice(data, tmp_path / "cut", resume=True, given={"minutes": 5.0}, progress=False)
    resumed = train_voice(data, tmp_path / "cut", resume=True, given={"steps": 6}, progress=False)
    assert resumed.finished and resumed.facts["training"]["steps"] == 6
    a, b = weights(tmp_path / "whole"), weights(tmp_path / "cut")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    for name in ("card.md", "checks.tsv", "tokenizer.json", "config.json"):
        assert (tmp_path / "cut" / name).is_file()
    info = json.loads((tmp_path / "cut" / "config.json").read_text())["info"]["voice"]
    assert info["data"]["splits"]["train"]["clips"] > 0 and info["budget"]["stages"]["train"] > 0


@pytest.mark.parametrize("trained", ["heads", "upper"])
def test_only_the_chosen_weights_move_from_the_base(models, data, tmp_path, trained):
    base = weights(models[0])
    voice = weights(train_voice(data, tmp_path / "voice", config(models, trained=trained), progress=False).out)
    layers = sorted({int(k.split(".")[2]) for k in base if k.startswith("model.layers.")})
    moving = ("model.norm.", "audio_interface.", "heads.", "duration.")
    if trained == "upper":
        moving += tuple(f"model.layers.{i}." for i in layers[-2:])
    frozen = [k for k in base if not k.startswith(moving)]
    assert frozen and all(torch.equal(base[k], voice[k]) for k in frozen)
    for group in moving:
        assert any(not torch.equal(base[k], voice[k]) for k in base if k.startswith(group)), group


def test_the_voice_decodes_through_its_own_fine_tuned_decoder(models, data, tmp_path):
    from duet.codecs import load as load_codec
    from duet.tts import load

    base_codec = models[1]
    result = train_voice(data, tmp_path / "voice", config(models, minutes=1.0, decoder_share=0.05), progress=False)
    voice = result.out
    meta = json.loads((voice / "config.json").read_text())
    assert meta["codec"]["name"] == "codec" and (voice / "codec" / "config.json").is_file()
    assert result.facts["decoder"]["steps"] >= 1 and "own decoder" in (voice / "card.md").read_text()
    before, after = weights(base_codec), weights(voice / "codec")
    assert before.keys() == after.keys()
    encoder = [k for k in before if not k.startswith("decoder.")]
    assert encoder and all(torch.equal(before[k], after[k]) for k in encoder)  # the codes stay the base codec's
    assert any(not torch.equal(before[k], after[k]) for k in before if k.startswith("decoder."))
    runtime_codec = load(str(voice)).runtime.codec  # what duet speak and the server decode with
    own = load_codec(voice / "codec")
    assert all(torch.equal(a, b) for a, b in zip(runtime_codec.state_dict().values(), own.state_dict().values()))


def test_unknown_trained_weights_are_refused():
    with pytest.raises(DuetError, match="unknown trained weights 'middle'"):
        VoiceTrainConfig(trained="middle")


def test_a_changed_data_folder_is_not_resumed(models, tmp_path):
    data = write_pairs(tmp_path / "data", SENTENCES[:8])
    train_voice(data, tmp_path / "voice", config(models), progress=False, stop_at_step=2)
    (data / "clip00.txt").write_text("Something else entirely.")
    with pytest.raises(DuetError, match="changed since this run began"):
        train_voice(data, tmp_path / "voice", resume=True, progress=False)


def test_the_voice_speaks_in_duet_speak_and_the_speech_api_and_is_scored(models, tmp_path):
    """An LJSpeech folder (WAV, stereo FLAC at 44.1 kHz, OGG) -> a voice with held-out scores, which `duet speak`,
    ``duet.load`` and the HTTP API load by its directory."""
    from fastapi.testclient import TestClient

    from duet.cli import main
    from duet.serve.api import create_app
    from duet.serve.engine import Engine
    from duet.tts import load_runtime

    data = write_ljspeech(tmp_path / "lj")
    result = train_voice(data, tmp_path / "voice", config(models, evaluate=True), progress=False)
    scores = result.facts["scores"]
    assert scores["clips"] >= 2 and 0 <= scores["wer"]["recordings"] < 0.5  # espeak-ng, heard by tiny.en
    assert set(scores["wer"]) == {"recordings", "voice", "base"} and scores["sim"]["recordings"] > 0.5
    assert "## Scores" in (tmp_path / "voice" / "card.md").read_text()
    voice = tmp_path / "voice"
    assert main(["speak", "--model", str(voice), "--seed", "1", "Hello there.", "-o", str(tmp_path / "h.wav")]) == 0
    assert (tmp_path / "h.wav").stat().st_size > 1000
    with TestClient(create_app(Engine(load_runtime(str(voice))))) as client:
        r = client.post("/v1/audio/speech", json={"model": "voice", "input": "Hello there.", "response_format": "pcm",
                                                  "seed": 1})
        assert r.status_code == 200 and len(r.content) > 0


def test_a_manifest_line_in_another_language_is_left_out(models, tmp_path):
    from duet.data.manifest import read_manifest, write_manifest

    manifest = write_manifest_folder(tmp_path / "m")
    utts = read_manifest(manifest)
    write_manifest(manifest, [replace(utts[0], language="fr"), *utts[1:]])
    train_voice(manifest, tmp_path / "voice", config(models), progress=False, stop_at_step=1)
    rows = (tmp_path / "voice" / "checks.tsv").read_text().splitlines()[1:]
    assert [r.split("\t")[:2] for r in rows] == [["u0", "other language"]]


def test_the_command_line(models, data, tmp_path, capsys):
    from duet.cli import main

    base, codec = models
    assert main(["voice", "check", str(data), "--report", str(tmp_path / "r.tsv"), "--min-minutes", "0.1",
                 "--quiet"]) == 0
    assert f"{len(SENTENCES)} of {len(SENTENCES)} clips usable" in capsys.readouterr().out
    assert main(["voice", "check", str(data), "--report", str(tmp_path / "r.tsv"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a voice needs at least 20 minutes" in err
    assert main(["voice", "train", str(data), "--out", str(tmp_path / "v"), "--language", "xx-nowhere",
                 "--quiet"]) == 2
    assert "espeak-ng has no voice" in capsys.readouterr().err


def test_a_budget_is_fitted_by_timing_a_few_steps(models, data, tmp_path):
    """Without --steps: a few timed steps inside the warm-up plan the run; it ends near the budget."""
    cfg = config(models, steps=None, minutes=0.5)
    result = train_voice(data, tmp_path / "voice", cfg, progress=False)
    plan = json.loads((tmp_path / "voice" / "build" / "plan.json").read_text())
    assert plan["steps"] > cfg.calibration_steps and plan["sec_per_step"] > 0
    assert result.facts["training"]["steps"] <= plan["steps"]
    assert result.facts["training"]["stopped"] in ("end", "time", "early_stop")
    stages = result.facts["budget"]["stages"]
    assert set(stages) >= {"data", "encode", "calibrate", "train", "export"}
