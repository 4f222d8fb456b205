"""Luna-TTS Realtime: block-causal block diffusion over the RVQ grid, continual-trained from Luna-TTS (report §2.6,
§3.2 "Block adaptation"; DESIGN.md §B; Arriola et al. 2025 "Block Diffusion", arXiv:2503.09573).

The grid is cut along time into blocks of B_k frames (32 = 1.28 s at 25 Hz). Across blocks the model is
autoregressive, inside a block it denoises all frames and codebooks in parallel, exactly as Luna-TTS does for the
whole grid. This module holds the model (``LunaRealtime``: a ``LunaModel`` plus an end-of-speech head) and the block geometry;
its training objective (the block-wise forward process and the loss) is ``duet.luna.realtime_loss``; KV-cached
inference and streaming are in ``duet.luna.stream``.

Training sequence (two-stream, bd3lms): ``[text (S) | prompt (P) | noisy blocks x_t (F) | clean blocks x_0 (F)]``,
F = N B_k, under ``duet.nn.masks.two_stream_block_mask``: noisy block b sees itself, the clean blocks < b and the
conditions; clean block b sees clean blocks <= b and the conditions; conditions see conditions. The noisy and the
clean copy of frame i share position id ``c + i`` (c = real condition positions), which is where that frame sits at
inference, in the KV cache or in the active block. One forward trains every block at once.

Noise (§3.2: "sequence-level corruption becomes an independent noise level per block"). t_{b,n} in (t_min, 1] per
row b and block n (``diffusion.sample_noise_level``); each real cell of block n is masked with probability t_{b,n}.
Loss = sum over masked cells of CE / t_{b, block} / sum_b (T_b Q): the sum of every block's MDLM bound (the
block-diffusion NELBO), in nats per target cell, normalised like ``diffusion.masked_diffusion_loss``.

End of speech (duet's design; the report says only "a learned end-of-speech decision" and "a terminal target exists
even when speech ends exactly on a block boundary"):
  * an utterance of T frames is trained as N = floor(T / B_k) + 1 blocks. The last block always holds at least one
    frame past the end: when B_k divides T it is an extra block made only of past-the-end frames (the terminal
    target). ``num_blocks`` is that rule;
  * past-the-end frames of the last block are real positions of the noisy stream that always hold the mask token
    and carry no code target; in the clean stream they are padding (nothing at inference ever sees a partial block
    as context: the stream ends with it);
  * an end head (Linear D -> 1, new; everything else is Luna's, §3.2) reads every noisy frame and predicts "this frame
    lies past the end of speech"; binary cross-entropy over the noisy frames of the N real blocks, all noise levels,
    weighted by ``end_weight`` and added to the diffusion loss. No 1/t weight: the label is not a masked cell.
  * at inference (``stream.end_frame``) the decision is read once per block, at its first refinement step (all
    masked, the t = 1 end of training): the first frame whose probability exceeds 0.5 ends the speech; frames from
    there on stay masked, exactly as past-the-end frames look in training, so no code is generated for them.
Why not an EOS code in the first codebook: it would change the heads' shape (K + 1 classes) and the meaning of
codebook 0, and §3.2 keeps the prediction heads unchanged. A per-block "last block" flag would still need the end
frame inside that block; the per-frame head gives both.

CFG (§2.5 and §3.2 "the same conditional / unconditional block geometry in training and inference"): text is dropped
with probability 0.1 per row (``diffusion.drop_text``), prompt splits as in Luna (``diffusion.split_prompt``).

Aligned text input (a Luna trained with ``--aligned``; ``duet.nn.aligned``): the noisy and the clean copy of frame i
both receive the layout vector of frame P + i of the utterance, as Luna's target frames do; at inference the
duration predictor's durations lay the text out and the end head still decides where speech ends.

Shape legend: B batch, S text tokens, P prompt frames, T target frames, N blocks, B_k frames per block, F = N B_k
frames per stream, L = S + P + 2F, Q codebooks, K codes per codebook, D model width.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from duet.config_io import from_dict, pick_preset, to_dict
from duet.errors import DuetError
from duet.luna.checkpoint import read_checkpoint, write_checkpoint
from duet.luna.config import LunaConfig, luna_preset
from duet.luna.model import LunaInputs, LunaModel, segment_layout
from duet.nn.masks import additive, lengths_to_mask, two_stream_block_mask


@dataclass(frozen=True)
class RealtimeConfig:
    luna: LunaConfig
    block_size: int = 32  # B_k frames: 1.28 s at 25 Hz (§2.6)

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise DuetError(f"block_size must be a positive number of frames, got {self.block_size}")

    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "RealtimeConfig":
        return from_dict(cls, d)


PRESETS: dict[str, Callable[[], RealtimeConfig]] = {
    "luna-realtime-0.6b": lambda: RealtimeConfig(luna=luna_preset("luna-0.6b")),
    "luna-realtime-tiny": lambda: RealtimeConfig(luna=luna_preset("luna-tiny")),
}


def realtime_preset(name: str) -> RealtimeConfig:
    """Each Luna preset with 32-frame blocks: continual training starts from the matching Luna checkpoint."""
    return pick_preset(PRESETS, name, "Luna Realtime")


# -- block geometry (pure) -------------------------------------------------------------------------------------------


def num_blocks(target_lengths: torch.Tensor, block_size: int) -> torch.Tensor:
    """Blocks trained per utterance: floor(T / B_k) + 1 = ceil(T / B_k), plus one all-past-the-end terminal block
    when B_k divides T. target_lengths (B,) -> (B,) int64; the last block always holds a past-the-end frame."""
    return torch.div(target_lengths, block_size, rounding_mode="floor") + 1


# -- model -----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RealtimeLogits:
    codes: torch.Tensor  # (B, F, Q, K) for every noisy frame
    end: torch.Tensor  # (B, F) end-head logit: "this frame lies past the end of speech"


class LunaRealtime(nn.Module):
    """A Luna model (text embedding, audio tables, backbone, Q heads: unchanged, §3.2) plus an end-of-speech head.

    State dict: ``luna.*`` (a ``LunaModel``'s names under ``luna.``) and ``end_head.{weight,bias}``.
    """

    def __init__(self, config: RealtimeConfig):
        super().__init__()
        self.config = config
        self.luna = LunaModel(config.luna)
        D = config.luna.backbone.width
        self.end_head = nn.Linear(D, 1)  # new in continual training; duet's end-of-speech design (module docstring)
        with torch.no_grad():
            self.end_head.weight.normal_(0.0, config.luna.backbone.initializer_range)
            self.end_head.bias.zero_()

    @classmethod
    def from_luna(cls, luna: LunaModel, block_size: int = 32) -> "LunaRealtime":
        """Continual training starts here: every Luna weight copied (§3.2), a fresh end head."""
        model = cls(RealtimeConfig(luna=luna.config, block_size=block_size))
        model.luna.load_state_dict(luna.state_dict())
        return model

    @property
    def block_size(self) -> int:
        return self.config.block_size

    @property
    def mask_id(self) -> int:
        return self.config.luna.mask_id

    def heads(self, h: torch.Tensor) -> RealtimeLogits:
        """Frame states (B, n, D) -> code logits (B, n, Q, K) and end logits (B, n)."""
        codes = self.luna.code_logits(h)  # (B, n, Q, K)
        return RealtimeLogits(codes, self.end_head(h).squeeze(-1))

    def forward(self, inputs: LunaInputs, noisy: torch.Tensor) -> RealtimeLogits:
        """The two-stream training forward: conditions from ``inputs``, clean grid ``inputs.target`` (B, T, Q) with
        ``inputs.target_lengths``, noisy blocks ``noisy`` (B, F, Q) (``realtime_loss.mask_blocks``) -> logits of every noisy frame."""
        luna, cfg = self.luna, self.config.luna
        prompt, prompt_lengths = inputs.prompt_or_empty()
        text_ids, target, lengths = inputs.text_ids, inputs.target, inputs.target_lengths
        B, S = text_ids.shape
        P, T, Fr = prompt.shape[1], target.shape[1], noisy.shape[1]
        if Fr % self.block_size or int(num_blocks(lengths, self.block_size).max()) * self.block_size > Fr:
            raise DuetError(f"a noisy stream of {Fr} frames does not hold this batch's blocks of {self.block_size}")
        target, T = target[:, :Fr], min(T, Fr)  # frames past Fr are padding of every row
        noisy_lengths = num_blocks(lengths, self.block_size) * self.block_size  # (B,) real blocks incl. terminal
        valid, position_ids = segment_layout(inputs.text_lengths, prompt_lengths, noisy_lengths, S, P, Fr)  # (B, C+F)
        C = S + P
        cond_valid, noisy_valid = valid[:, :C], valid[:, C:]
        clean_valid = lengths_to_mask(lengths, Fr)  # (B, F): past-the-end frames are padding in the clean stream
        offset = cond_valid.sum(dim=1, keepdim=True)  # (B, 1) real condition positions
        clean_pos = offset + torch.arange(Fr, device=offset.device)[None, :]  # (B, F): same ids as the noisy copy
        position_ids = torch.cat([position_ids, clean_pos], dim=1)  # (B, L)

        prompt_valid = cond_valid[:, S:, None]  # (B, P, 1)
        if bool(((prompt == cfg.mask_id) & prompt_valid).any()):
            raise DuetError("the prompt grid must be clean: conditions are never masked (Luna §2.3)")
        text_ids = text_ids.masked_fill(~cond_valid[:, :S], 0)
        prompt = prompt.masked_fill(~prompt_valid, cfg.mask_id)
        clean = target.new_full((B, Fr, target.shape[2]), cfg.mask_id)
        clean[:, :T] = target
        clean = clean.masked_fill(~clean_valid[:, :, None], cfg.mask_id)
        noisy = noisy.masked_fill(~noisy_valid[:, :, None], cfg.mask_id)
        text = luna.model.embed_tokens(text_ids)  # (B, S, D)
        prompt_x, noisy_x, clean_x = luna.embed_grid(prompt), luna.embed_grid(noisy), luna.embed_grid(clean)
        if luna.aligned is not None:  # both copies of frame i sit at frame P_b + i of the utterance's timeline
            a = luna.aligned_input(text, inputs.text_lengths, inputs.durations, prompt_lengths, P, Fr)  # (B, P+F, D)
            prompt_x, noisy_x, clean_x = prompt_x + a[:, :P], noisy_x + a[:, P:], clean_x + a[:, P:]
        x = torch.cat([text, prompt_x, noisy_x, clean_x], dim=1)  # (B, L, D): [text | prompt | x_t | x_0]
        mask = additive(two_stream_block_mask(cond_valid, noisy_valid, clean_valid, self.block_size), x.dtype)
        h = luna.model(inputs_embeds=x, attention_mask=mask, position_ids=position_ids).last_hidden_state  # (B, L, D)
        return self.heads(h[:, C : C + Fr])  # heads on the noisy stream only

    # -- persistence ------------------------------------------------------------------------------------------------

    def save(self, directory: str | Path) -> Path:
        """Write ``config.json`` (section ``luna_realtime``) and ``model.safetensors``."""
        return write_checkpoint(directory, "luna_realtime", self.config.to_dict(), self.state_dict())

    @classmethod
    def load(cls, directory: str | Path, map_location: str = "cpu") -> "LunaRealtime":
        cfg, state = read_checkpoint(directory, "luna_realtime", map_location)
        model = cls(RealtimeConfig.from_dict(cfg))
        model.load_state_dict(state)
        return model
