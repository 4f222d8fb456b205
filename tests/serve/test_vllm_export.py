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
from duet.serve.vllm.frames import STOP_ID, AlignedTables, FrameBank, create_bank_file
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


def aligned_checkpoint(tmp_path):
    from duet.gepard.config import with_aligned_input

    torch.manual_seed(0)
    tokenizer = save_bpe(train_bpe(["hello world"] * 20, BPEConfig(vocab_size=270)), tmp_path / "tokenizer.json")
    model = GepardModel(with_aligned_input(gepard_tiny()))
    with torch.no_grad():  # a duration predictor that spreads tokens over several frames (random init gives ~0)
        model.duration.head.bias.fill_(1.2)
    return save_gepard(model, tokenizer, tmp_path / "duet", codec={"name": "duet-fsq"})


def test_an_aligned_model_exports_with_its_layout_tensors(tmp_path):
    out = export_for_vllm(aligned_checkpoint(tmp_path), tmp_path / "vllm")
    assert json.loads((out / "config.json").read_text())["aligned_input"] is True
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())
    assert {"aligned.tokens.weight", "aligned.features.weight", "duration.head.weight"} <= names


def test_aligned_tables_read_each_requests_row_by_key_and_position(tmp_path):
    path = create_bank_file(8, 4, directory=str(tmp_path))
    writer, reader = AlignedTables(path, 3), AlignedTables(path, 3)  # two processes' views of one directory
    a, b = torch.arange(12.0).view(4, 3), -torch.arange(6.0).view(2, 3)
    writer.write(7, a)
    writer.write(9, b)
    got = reader.rows(torch.tensor([7, 9, 7, 5]), torch.tensor([2, 1, 9, 0]))  # 9 is past a's end: its last row
    assert torch.equal(got, torch.stack([a[2], b[1], a[3], torch.zeros(3)]))  # key 5 has no table: zeros
    writer.remove(9)
    assert not writer.path(9).exists()
    assert torch.equal(reader.rows(torch.tensor([9]), torch.tensor([0])), torch.zeros((1, 3)))
    private = AlignedTables(None, 3)
    private.write(7, a)
    assert torch.equal(private.rows(torch.tensor([7]), torch.tensor([1])), a[1:2])
    with pytest.raises(ValueError, match="table"):
        private.write(1, torch.zeros((2, 4)))
    path.unlink()
    writer.remove(7)


def test_the_vllm_data_path_of_an_aligned_model_gives_duets_own_logits(tmp_path):
    """What vLLM does, done here with duet's backbone: prompt embeddings with the SOS row's aligned vector, then each
    frame fed as its frame-bank slot id, looked up by the slot's stamp and given its table row. The logits equal
    GepardModel.prefill / step at every position, so the bookkeeping (frame t at audio position t + 1) holds."""
    from duet.gepard.checkpoint import load_gepard
    from duet.gepard.model import GepardPrompt
    from duet.nn.backbone import run_backbone
    from duet.serve.vllm.engine import AlignedLayout
    from duet.text.prompts import gepard_prompt

    out = export_for_vllm(aligned_checkpoint(tmp_path), tmp_path / "vllm")
    loaded = load_gepard(tmp_path / "duet")
    model = loaded.model.eval()
    ids = gepard_prompt("hello world hello", loaded.tokenizer)
    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        layout = AlignedLayout.load(model.config, f)
        text_embedding = f.get_tensor("model.embed_tokens.weight").float()
    durations = layout.durations(ids)
    assert float(durations.sum()) > 8  # the text spans several tokens' worth of frames
    bound, key = 12, 4242
    bank, tables = FrameBank(64, 32), AlignedTables(None, model.config.backbone.width)
    tables.write(key, layout.table(text_embedding, ids, bound + 1))

    with torch.no_grad():
        expected, state = model.prefill(GepardPrompt(torch.tensor([ids])))
        embeds = text_embedding[torch.tensor(ids)].clone()
        embeds[-1] += tables.rows(torch.tensor([key]), torch.tensor([0]))[0]
        cache = model.new_cache()
        got = model.heads(run_backbone(model.model, embeds[None], cache=cache)[:, -1:])
        torch.testing.assert_close(got.codes, expected.codes, rtol=1e-4, atol=1e-4)
        gen = torch.Generator().manual_seed(0)
        for t in range(bound):
            frame = torch.stack([torch.randint(0, level, (1,), generator=gen) for level in model.config.channel_levels],
                                dim=1)  # (1, C)
            slot_id = bank.store(frame, torch.tensor([key]), torch.tensor([t]))  # what the sampler emits
            expected, state = model.step(frame, state)
            keys, index = bank.stamps(slot_id)
            x = model.audio_interface(bank.frames(slot_id)[:, None, :]) + tables.rows(keys, index + 1)[:, None]
            got = model.heads(run_backbone(model.model, x, cache=cache))
            torch.testing.assert_close(got.codes, expected.codes, rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(got.stop, expected.stop, rtol=1e-4, atol=1e-4)
