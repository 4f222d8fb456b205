"""Metric models behind `duet eval run`: DNSMOS, WavLM x-vectors, effective ranks, and the CLI end to end."""

import json

import numpy as np
import pytest
import torch

from duet.audio import load_audio
from duet.errors import DuetError
from duet.eval import cli as eval_cli


def test_dnsmos_ranks_clean_speech_above_noisy(festival, speech_dir):
    pytest.importorskip("speechmos")
    from duet.metrics.dnsmos import DNSMOS

    audio, sr = load_audio(festival("The weather today is clear and bright over the hills.", "slt",
                                    speech_dir / "dnsmos_clean.wav"))
    noisy = audio + 0.05 * np.random.default_rng(0).standard_normal(len(audio)).astype(np.float32)
    model = DNSMOS()
    clean_s, noisy_s = model.score(audio, sr), model.score(noisy, sr)
    for v in (clean_s.ovrl, clean_s.sig, clean_s.bak, clean_s.p808):
        assert 1.0 <= v <= 5.0
    assert clean_s.bak > noisy_s.bak + 1.0  # white noise at about 0 dB SNR: the background score collapses
    assert clean_s.ovrl > noisy_s.ovrl + 0.5


@pytest.fixture(scope="module")
def tiny_wavlm(tmp_path_factory):
    from transformers import WavLMConfig, WavLMForXVector

    torch.manual_seed(0)
    config = WavLMConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                         conv_dim=(16, 16), conv_stride=(5, 4), conv_kernel=(10, 8), tdnn_dim=(16, 16),
                         tdnn_kernel=(3, 1), tdnn_dilation=(1, 1), xvector_output_dim=8,
                         num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=2)
    path = tmp_path_factory.mktemp("wavlm")
    WavLMForXVector(config).eval().save_pretrained(str(path))
    return path


def test_wavlm_embedding_is_the_models_xvector(tiny_wavlm):
    from transformers import WavLMForXVector

    from duet.metrics.speaker_wavlm import WavLMSpeakerEncoder

    rng = np.random.default_rng(0)
    audio = (0.1 * rng.standard_normal(16_000)).astype(np.float32)
    enc = WavLMSpeakerEncoder(tiny_wavlm)
    emb = enc.embed(audio, 16_000)
    model = WavLMForXVector.from_pretrained(str(tiny_wavlm)).eval()
    x = torch.from_numpy((audio - audio.mean()) / np.sqrt(audio.var() + 1e-7))[None]  # zero mean, unit variance
    with torch.no_grad():
        expected = model(input_values=x).embeddings[0].numpy()
    np.testing.assert_allclose(emb, expected, rtol=1e-4, atol=1e-5)
    assert emb.shape == (8,)
    assert enc.similarity(emb, enc.embed(audio, 16_000)) == pytest.approx(1.0)
    # resampling happens first: the same signal at 32 kHz lands on (almost) the same embedding
    from scipy.signal import resample_poly

    up = resample_poly(audio, 2, 1).astype(np.float32)
    assert enc.similarity(emb, enc.embed(up, 32_000)) > 0.99
    with pytest.raises(DuetError, match="no config.json"):
        WavLMSpeakerEncoder(tiny_wavlm / "nope").embed(audio, 16_000)


def test_wavlm_weights_in_a_pickle_are_refused(tiny_wavlm, tmp_path):
    import shutil

    from duet.metrics.speaker_wavlm import WavLMSpeakerEncoder

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    shutil.copy(tiny_wavlm / "config.json", pickled / "config.json")
    (pickled / "pytorch_model.bin").write_bytes(b"a pickle would run here")  # never opened
    with pytest.raises(DuetError, match="no .safetensors weights"):
        WavLMSpeakerEncoder(pickled).embed(np.zeros(16_000, dtype=np.float32), 16_000)


def test_effective_ranks_of_known_tables(tmp_path):
    from safetensors.torch import save_file

    from duet.eval.ranks import embedding_ranks, format_ranks, load_state_dict

    u, _ = torch.linalg.qr(torch.randn(64, 64, dtype=torch.float64))
    tables = {
        "model.embed_tokens.weight": torch.eye(16),  # 16 equal singular values -> rank 16
        "audio_interface.tables.0": torch.outer(torch.arange(1.0, 9.0), torch.ones(4)),  # rank one -> 1
        "rvq.layers.0.codebook": (u[:, :8] * torch.tensor([4.0, 4, 0, 0, 0, 0, 0, 0], dtype=torch.float64)).float(),
        "model.layers.0.mlp.weight": torch.eye(8),  # not an embedding: left out
        "model.embed_positions": torch.arange(4),  # 1-D: left out
    }
    save_file({k: v.contiguous() for k, v in tables.items()}, str(tmp_path / "model.safetensors"))
    ranks = {r.name: r for r in embedding_ranks(load_state_dict(tmp_path))}
    assert sorted(ranks) == ["audio_interface.tables.0", "model.embed_tokens.weight", "rvq.layers.0.codebook"]
    assert ranks["model.embed_tokens.weight"].effective_rank == pytest.approx(16.0)
    assert ranks["audio_interface.tables.0"].effective_rank == pytest.approx(1.0)
    assert ranks["rvq.layers.0.codebook"].effective_rank == pytest.approx(2.0, rel=1e-5)  # two equal values
    assert ranks["rvq.layers.0.codebook"].ceiling == 8
    assert "| model.embed_tokens.weight | 16 x 16 | 16.0 | 16 | 1.000 |" in format_ranks(list(ranks.values()))
    with pytest.raises(DuetError, match="safetensors"):
        load_state_dict(tmp_path / "model.bin")


def test_cli_build_run_compare_ground_truth(espeak, tmp_path, capsys):
    """build-set -> run (ground truth, real ASR / speaker / DNSMOS) -> compare, on a 3-utterance corpus."""
    pytest.importorskip("speechmos")
    texts = ["Please open the window before you leave the room.",
             "The children played in the garden all afternoon.",
             "Hello there."]
    rows = []
    (tmp_path / "corpus").mkdir()
    for i, text in enumerate(texts):
        path = espeak(text, "en", tmp_path / "corpus" / f"u{i}.wav")
        rows.append({"id": f"u{i}", "text": text, "language": "en", "speaker": "en", "path": f"u{i}.wav",
                     "duration": load_audio(path)[0].size / load_audio(path)[1], "source": "espeak",
                     "split": "test"})
    manifest = tmp_path / "corpus" / "manifest.jsonl"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))

    parser = __import__("argparse").ArgumentParser()
    eval_cli.register(parser.add_subparsers())

    def cli(*argv):
        args = parser.parse_args(["eval", *argv])
        return args.func(args)

    assert cli("build-set", "--manifest", str(manifest), "--kind", "clone", "--out", str(tmp_path / "set")) == 0
    assert cli("run", "--model", "ground-truth", "--set", str(tmp_path / "set"), "--out", str(tmp_path / "gt"),
               "--no-progress", "--metrics", "wer,sim,dnsmos") == 0
    summary = json.loads((tmp_path / "gt" / "summary.json").read_text())
    m = summary["metrics"]
    assert m["utterances"] == 2 and m["wer"] < 0.3  # espeak is clear; tiny.en may slip on a word
    assert m["sim"] > 0.8  # the same espeak voice on two sentences
    assert 1.0 <= m["dnsmos_ovrl"] <= 5.0
    assert (tmp_path / "gt" / "report.html").is_file() and (tmp_path / "gt" / "plots" / "wer.png").is_file()
    capsys.readouterr()
    assert cli("compare", str(tmp_path / "gt"), "--out", str(tmp_path / "cmp.md")) == 0
    out = capsys.readouterr().out
    assert "| ground-truth | 2 |" in out and (tmp_path / "cmp.md").read_text().startswith("set `set`")


def test_cli_build_set_without_a_manifest_is_one_line(tmp_path, capsys):
    from duet.cli import main

    assert main(["eval", "build-set", "--kind", "clone", "--out", str(tmp_path / "set")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--manifest" in err[0]
