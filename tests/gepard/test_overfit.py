"""End to end on CPU: overfit one fake utterance, then greedy generation reproduces it and stops."""

from __future__ import annotations

import torch
from gepard_testing import micro_config, random_codes, wrapped

from duet.gepard.generate import STOP, generate
from duet.gepard.model import GepardModel, GepardPrompt, collate
from duet.sampling import FrameBound, SamplingParams


def test_overfit_one_utterance_then_speak_it_back():
    torch.manual_seed(0)
    model = GepardModel(micro_config())
    codes = random_codes(model.config, 12, torch.Generator().manual_seed(1))  # (C, T)
    text = wrapped([7, 21, 33, 40])
    batch = collate([(text, codes)], pad_id=0)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    losses = []
    for _ in range(100):
        loss = model(batch)["loss"]
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < 0.05 * losses[0], (losses[0], losses[-1])
    assert sum(losses[-10:]) < sum(losses[:10]) / 10

    model.eval()
    result = generate(model, GepardPrompt(torch.tensor([text])),
                      params=SamplingParams(temperature=0.0), bound=FrameBound(frames_per_token=4.0, margin_frames=8))
    assert result.ended == (STOP,)
    assert torch.equal(result.codes[0], codes)
