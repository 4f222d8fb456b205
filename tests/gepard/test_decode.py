"""Gepard's one decode step (duet.gepard.decode) against its oracle, GepardModel.prefill / step: the same input
layout, and for one row the same logits bit for bit, with and without aligned text input and a voice prefix, on a
stock model and on one loaded without transformers. The aligned inputs are the same bits whoever computes them."""

from __future__ import annotations

import pytest
import torch
from gepard_testing import micro_config, random_codes, wrapped

from duet.gepard.aligned import AlignedState
from duet.gepard.config import with_aligned_input, with_voice_prefix
from duet.gepard.decode import AlignedLayout, GepardStep, frame_inputs
from duet.gepard.model import GepardModel, GepardPrompt
from duet.nn.aligned import BLOCK
from duet.nn.kv_pool import KVPool

VARIANTS = {"plain": lambda c: c, "aligned": lambda c: with_aligned_input(c, window=1, duration_layers=1),
            "voice": lambda c: with_voice_prefix(with_aligned_input(c, window=1, duration_layers=1), num_heads=2,
                                                 num_queries=4)}


def model_pair(variant: str, seed: int = 0) -> tuple[GepardModel, GepardModel]:
    """A stock GepardModel with random weights, and the same weights in one built without transformers."""
    torch.manual_seed(seed)
    config = VARIANTS[variant](micro_config())
    stock = GepardModel(config).eval()
    plain = GepardModel(config, stock=False).eval()
    plain.load_state_dict(stock.state_dict(), strict=True)
    return stock, plain


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("backbone", ["stock", "plain"])
def test_one_row_decodes_the_oracles_bits(variant, backbone):
    stock, plain = model_pair(variant)
    model = stock if backbone == "stock" else plain
    prompt = GepardPrompt(torch.tensor([wrapped([5, 9, 14, 3, 22, 7])]))
    step = GepardStep(model)
    bb = model.config.backbone
    pool = KVPool(bb.num_layers, bb.num_kv_heads, bb.head_dim, torch.float32, "cpu")
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        expected, state = stock.prefill(prompt)  # the stock model: the oracle
        inputs, aligned = model.prompt_inputs(prompt)
        slot = pool.alloc(inputs.shape[1] + 80)
        got = step.prefill(inputs, pool, slot)
        assert torch.equal(got.codes, expected.codes) and torch.equal(got.stop, expected.stop)
        length = inputs.shape[1]
        for t in range(BLOCK + 5):  # past one block of aligned inputs
            frame = random_codes(model.config, 1, generator).T  # (1, C)
            expected, state = stock.step(frame, state)
            vector = aligned.next_input(model.aligned) if aligned is not None else None
            got = step.step(frame_inputs(model.audio_interface, frame, vector), pool, [slot], [length])
            length += 1
            assert torch.equal(got.codes, expected.codes), f"frame {t}"
            assert torch.equal(got.stop, expected.stop), f"frame {t}"


def test_aligned_inputs_are_the_same_bits_however_many_are_asked_for():
    stock, _ = model_pair("aligned")
    ids = torch.tensor([wrapped([5, 9, 14, 3, 22, 7, 30, 31])])
    with torch.no_grad():
        _, state = stock.prefill(GepardPrompt(ids))
        assert isinstance(state, AlignedState)
        text, lengths, durations = state.text, state.text_lengths, state.durations
        whole = stock.aligned.table(text, lengths, durations, 3 * BLOCK)  # (1, P, D)
        for count in (1, 7, BLOCK, BLOCK + 1):
            assert torch.equal(stock.aligned.table(text, lengths, durations, count), whole[:, :count])
        fresh = AlignedState(None, text, lengths, durations, position=0)
        walked = torch.cat([fresh.next_input(stock.aligned) for _ in range(2 * BLOCK + 3)], dim=1)
        assert torch.equal(walked, whole[:, : 2 * BLOCK + 3])
        # the vLLM client's layout, loaded from the model's tensors as from an export
        layout = AlignedLayout(stock.config, stock.state_dict())
        assert torch.equal(layout.durations(ids[0].tolist()), durations)
        assert torch.equal(layout.table(stock.embed_tokens.weight, ids[0].tolist(), 2 * BLOCK), whole[0, : 2 * BLOCK])
