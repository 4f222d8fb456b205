"""Weight averaging against a by-hand moving average."""

import torch
from torch import nn

from duet.train.ema import ModelEMA, ema_decay


def test_ema_matches_hand_average():
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    model.register_buffer("counter", torch.zeros(()))
    ema = ModelEMA(model)
    expected = model.weight.detach().clone()
    for step in range(5):
        with torch.no_grad():
            model.weight.add_(1.0)
            model.counter.add_(1.0)
        d = ema_decay(step, 0.9)
        expected = d * expected + (1 - d) * model.weight.detach()
        ema.update(model, d)
    torch.testing.assert_close(ema.shadow.weight, expected)
    assert float(ema.shadow.counter) == 5.0  # buffers are copied, not averaged
    assert not ema.shadow.weight.requires_grad


def test_decay_ramp():
    assert ema_decay(0, 0.999) == 0.1
    assert ema_decay(10_000, 0.999) == 0.999
