"""The vLLM plugin's pieces that need no vLLM: the exporter and the frame bank (run everywhere, CI included)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open

from duet.gepard.checkpoint import save_gepard
from duet.gepard.config import gepard_tiny
from duet.gepard.model import GepardModel
from duet.serve.vllm.export import export_for_vllm
from duet.serve.vllm.frames import STOP_ID, FrameBank, create_bank_file
from duet.text.bpe import BPEConfig, save_bpe, train_bpe


def test_export_writes_an_hf_config_vllm_resolves_and_keeps_duets_names(tmp_path):
    torch.manual_seed(0)
    tokenizer = save_bpe(train_bpe(["hello world"] * 20, BPEConfig(vocab_size=270)), tmp_path / "tokenizer.json")
    model = GepardModel(gepard_tiny())
    checkpoint = save_gepard(model, tokenizer, tmp_path / "duet", codec={"name": "duet-fsq"})
    out = export_for_vllm(checkpoint, tmp_path / "vllm", frame_slots=4095)
    config = json.loads((out / "config.json").read_text())
    bb = model.config.backbone
    assert config["architectures"] == ["GepardForTTS"] and config["model_type"] == "qwen3"
    assert config["vocab_size"] == 4096 and config["text_vocab_size"] == bb.vocab_size  # STOP + 4095 slots
    assert config["eos_token_id"] == STOP_ID
    assert (config["hidden_size"], config["num_hidden_layers"], config["num_key_value_heads"], config["head_dim"]) \
        == (bb.width, bb.num_layers, bb.num_kv_heads, bb.head_dim)
    assert config["rope_parameters"]["rope_theta"] == bb.rope_theta
    assert config["channel_levels"] == list(model.config.channel_levels) and config["audio_embed_dim"] == 8
    assert config["duet"]["codec"] == {"name": "duet-fsq"}
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
    assert names == set(model.state_dict())  # duet's names are the plugin's names: nothing renamed
    assert {n.split(".")[0] for n in names} == {"model", "audio_interface", "heads"}
    assert (out / "tokenizer.json").read_bytes() == (checkpoint / "tokenizer.json").read_bytes()
    assert export_for_vllm(checkpoint, tmp_path / "big")  # default slots: at least the text rows
    assert json.loads((tmp_path / "big" / "config.json").read_text())["vocab_size"] >= bb.vocab_size


def test_importing_the_plugin_package_and_exporter_never_imports_vllm():
    code = ("import sys, duet.serve.vllm, duet.serve.vllm.export, duet.serve.vllm.frames, duet.gepard.model; "
            "assert 'vllm' not in sys.modules, 'vllm was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_frame_bank_round_trip_across_mappings_and_stale_slots_are_detected(tmp_path):
    path = create_bank_file(slots=5, channels=4, directory=str(tmp_path))
    writer, reader = FrameBank(5, 4, path), FrameBank(5, 4, path)  # two mappings: as worker and client processes
    frames = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 0]])
    ids = writer.store(frames, keys=torch.tensor([11, 22]), index=torch.tensor([0, 0]))
    assert ids.tolist() == [1, 2] and STOP_ID not in ids.tolist()
    assert reader.read([1], key=11, first_index=0).T.tolist() == [[1, 2, 3, 4]]
    assert torch.equal(reader.frames(ids), frames)  # the model's input path
    more = writer.store(torch.zeros((2, 4), dtype=torch.long), torch.tensor([11, 11]), torch.tensor([1, 2]))
    assert more.tolist() == [3, 4]
    assert reader.read([1, 3, 4], key=11, first_index=0).shape == (4, 3)
    assert reader.check([1, 3, 4], key=11) and not reader.check([2], key=11)
    writer.store(torch.zeros((2, 4), dtype=torch.long), torch.tensor([33, 33]), torch.tensor([0, 1]))  # wraps: 5, 1
    with pytest.raises(RuntimeError, match="reused"):
        reader.read([1], key=11, first_index=0)  # slot 1 now belongs to another request
    path.unlink()


def test_an_aligned_model_is_refused_with_a_clear_error(tmp_path):
    from duet.errors import DuetError
    from duet.gepard.config import with_aligned_input

    tokenizer = save_bpe(train_bpe(["hello world"] * 20, BPEConfig(vocab_size=270)), tmp_path / "tokenizer.json")
    model = GepardModel(with_aligned_input(gepard_tiny()))
    checkpoint = save_gepard(model, tokenizer, tmp_path / "duet", codec={"name": "duet-fsq"})
    with pytest.raises(DuetError, match="aligned text input"):
        export_for_vllm(checkpoint, tmp_path / "vllm")
