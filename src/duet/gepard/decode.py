"""Gepard's decode step: what enters the backbone for a prompt and for each frame, and the batched step over a KV
pool that ``duet speak`` and ``duet serve`` run (``duet.tts.gepard``).

The input layout is written here once, for every caller: ``GepardModel.prefill`` / ``step`` (the offline sampler
``duet.gepard.generate``, kept as the test oracle), the runtime (:class:`GepardStep`), and the vLLM client
(``duet.serve.vllm.engine``, which sends the prompt as embeddings and the aligned inputs as a table)::

    prompt  [ prefix (K, optional) | e(SOT) e(t_1) ... e(EOT) | e(SOS) + a_0 ]      e: the text embedding
    frame t   audio_interface(f_t) + a_{t+1}                                         a_p: the aligned input of
                                                                                     audio position p (aligned
                                                                                     models only; else 0)

:class:`GepardStep` runs the layout through the backbone and the heads in plain torch (``duet.nn.qwen3``: the stock
model's ops, without transformers' per-call machinery) over pool rows (``duet.nn.kv_pool``): a prompt into an empty
row, then one position per row and step, every running row in one batch, their caches read in place. For one row
it gives the bits of the oracle's step (``tests/gepard/test_decode.py``); the heads' two linear maps are one matmul.

Shape legend: B rows, S text ids, K prefix vectors, C channels (32), D width, R rows of a step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from duet.gepard.aligned import EOT_BACK, DurationHead
from duet.gepard.heads import FrameLogits
from duet.nn.aligned import AlignedInput
from duet.nn.kv_pool import KVPool, PoolRows
from duet.nn.qwen3 import Qwen3Step, Qwen3Weights

if TYPE_CHECKING:
    from duet.gepard.audio_interface import AudioInterface
    from duet.gepard.config import GepardConfig


def prompt_inputs(text: torch.Tensor, prefix: torch.Tensor | None = None,
                  sos: torch.Tensor | None = None) -> torch.Tensor:
    """The prompt's inputs (B, K + S, D): ``prefix`` (B, K, D), then the embedded wrapped text (B, S, D) ending in
    SOS, whose position carries ``sos`` (B, 1, D), the aligned input of audio position 0 (SOS predicts frame 0)."""
    if sos is not None:
        text = torch.cat([text[:, :-1], text[:, -1:] + sos], dim=1)
    if prefix is not None:
        text = torch.cat([prefix.to(text.dtype), text], dim=1)
    return text


def frame_inputs(audio_interface: AudioInterface, frames: torch.Tensor,
                 aligned: torch.Tensor | None = None) -> torch.Tensor:
    """Frames (R, C) fed back -> inputs (R, 1, D): the audio interface's embedding (Gepard §2.4), plus the aligned
    input (R, 1, D) of the position each frame occupies. ``AudioInterface.forward``'s ops, without module calls."""
    ai = audio_interface
    r, c = frames.shape
    e = F.embedding(frames + ai.offsets, ai.tables.weight)  # (R, C, m)
    h = F.linear(F.gelu(F.linear(e.reshape(r, 1, c * ai.embed_dim), ai.fc1.weight, ai.fc1.bias)),
                 ai.fc2.weight, ai.fc2.bias)  # (R, 1, D)
    z = F.layer_norm(h, h.shape[-1:])  # affine-free
    x = ai.s_audio.to(z.dtype) * z
    return x if aligned is None else x + aligned.to(x.dtype)


class AlignedLayout:
    """An aligned model's text layout without the rest of the model: its duration predictor and ``AlignedInput``,
    for the vLLM client (vLLM runs the backbone; the client loads these from the export's ``duration.*`` and
    ``aligned.*`` tensors) and computed as ``GepardModel.prompt_inputs`` and ``AlignedState`` compute it."""

    def __init__(self, config: GepardConfig, state: dict[str, torch.Tensor]):
        assert config.aligned is not None
        self.aligned = AlignedInput(config.backbone.width, config.aligned.window, EOT_BACK)
        self.duration = DurationHead(config.aligned.duration, stock=False)  # inference only: no transformers
        for name, module in (("aligned", self.aligned), ("duration", self.duration)):
            module.load_state_dict({k.removeprefix(f"{name}."): v.float() for k, v in state.items()
                                    if k.startswith(f"{name}.")})
            module.eval()

    @classmethod
    def load(cls, config: GepardConfig, tensors: Any) -> "AlignedLayout":
        """From an open safetensors file (``safe_open``)."""
        names = [k for k in tensors.keys() if k.startswith(("aligned.", "duration."))]
        return cls(config, {k: tensors.get_tensor(k) for k in names})

    @torch.no_grad()
    def durations(self, token_ids: Sequence[int], speed: float = 1.0) -> torch.Tensor:
        """Wrapped ids (S,) -> predicted frames per token (1, S)."""
        ids = torch.as_tensor([list(token_ids)], dtype=torch.long)
        return self.duration.predict(ids, torch.tensor([ids.shape[1]]), speed)

    @torch.no_grad()
    def table(self, text_embedding: torch.Tensor, token_ids: Sequence[int], positions: int,
              speed: float = 1.0) -> torch.Tensor:
        """The aligned inputs (P, D) of audio positions 0 .. P - 1 (position 0 is SOS; frame t is fed at t + 1),
        in the blocks every other caller computes them in (``duet.nn.aligned.BLOCK``)."""
        ids = torch.as_tensor([list(token_ids)], dtype=torch.long)
        text = text_embedding[ids]  # (1, S, D)
        lengths = torch.tensor([ids.shape[1]])
        return self.aligned.table(text, lengths, self.durations(token_ids, speed), positions)[0]


class GepardStep:
    """A ``GepardModel``'s prompt and decode step over rows of a :class:`KVPool`. The backbone's fused weights
    are a snapshot (``duet.nn.qwen3.Qwen3Step``): build this after the model is loaded."""

    def __init__(self, model: nn.Module):  # a GepardModel (duet.gepard.model imports this module)
        self.model = model
        backbone = model.model
        self.backbone = backbone.step() if isinstance(backbone, Qwen3Weights) else Qwen3Step(backbone)
        heads = model.heads
        self.num_logits = heads.codes.out_features
        self.levels = heads.levels
        with torch.no_grad():
            self.head_weight = torch.cat([heads.codes.weight, heads.stop.weight]).detach()  # (216 + 1, D)
            self.head_bias = torch.cat([heads.codes.bias, heads.stop.bias]).detach()

    def _heads(self, hidden: torch.Tensor) -> FrameLogits:
        out = F.linear(hidden, self.head_weight, self.head_bias)  # (B, N, 217)
        return FrameLogits(out[..., : self.num_logits], out[..., self.num_logits], self.levels)

    def prefill(self, inputs: torch.Tensor, pool: KVPool, slot: int) -> FrameLogits:
        """A prompt's inputs (1, L, D) into the empty row ``slot`` -> logits of its last position (N = 1)."""
        n = inputs.shape[1]
        positions = torch.arange(n, device=inputs.device)[None]  # (1, L)
        hidden = self.backbone(inputs, positions, PoolRows(pool, [slot], [0], n))
        return self._heads(hidden[:, -1:])

    def step(self, inputs: torch.Tensor, pool: KVPool, slots: list[int], lengths: list[int]) -> FrameLogits:
        """One position per row: inputs (R, 1, D) (:func:`frame_inputs`) to rows ``slots`` holding ``lengths``
        positions -> logits (R, 1, ...) of the next frame; each row's cache gains the position."""
        positions = torch.tensor(lengths, device=inputs.device)[:, None]  # (R, 1): a row's next position is its length
        hidden = self.backbone(inputs, positions, PoolRows(pool, slots, lengths))
        return self._heads(hidden)
