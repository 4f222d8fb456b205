"""``GepardForVLLM``: Gepard as an out-of-tree vLLM model (registered as architecture ``GepardForTTS``).

Parts and their vLLM names (equal to duet's checkpoint names, so ``load_weights`` is a loop):

- ``model.*``: vLLM's own ``Qwen3Model`` (paged attention, fused qkv / gate-up, its kernels); duet's backbone is a
  stock Qwen3 (``duet.nn.backbone``), so its weights load unchanged through vLLM's stacking loader;
- ``audio_interface.*``: 32 stacked lookup tables -> MLP -> affine-free LayerNorm -> x s_audio (Gepard §2.4), the
  same function as ``duet.gepard.audio_interface.AudioInterface``;
- ``heads.codes`` (D -> 216) and ``heads.stop`` (D -> 1), as ``duet.gepard.heads``.

# diff with Qwen3ForCausalLM: no lm_head. What the decode loop feeds back is a frame, not a text token:
- prefill: the prompt ([speaker prefix |] SOT text EOT SOS) comes in as ``prompt_embeds`` computed outside vLLM
  (``engine.py``), so the text embedding is never used inside vLLM;
- ``compute_logits``: the heads' 216 channel logits and the stop logit, in the first 217 columns of a
  (B, vocab) tensor; ``sampler.GepardFrameSampler`` turns them into a frame and a frame-bank slot id;
- ``embed_input_ids``: token id -> the frame stored in that slot -> the audio interface's embedding; a model with
  aligned text input adds the aligned vector of the frame's audio position, read from the request's table by the
  slot's stamp (``frames.AlignedTables``; the duration predictor and ``AlignedInput`` run in the client).
The vocabulary vLLM sees is therefore ``1 + frame_slots`` ids (STOP + slots), not text; the text embedding rows are
zero-padded up to it at load time so vLLM's embedding layer keeps its shape.

Shape legend: N scheduled tokens, B rows to sample, C channels (32), m table width, D model width.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.nn import functional as F
from vllm.config import VllmConfig
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.qwen3 import Qwen3Model
from vllm.model_executor.models.utils import maybe_prefix
from vllm.sequence import IntermediateTensors

from duet.serve.vllm.frames import AlignedTables, bank_for


class AudioInterface(nn.Module):
    """channel codes (N, C) -> frame embeddings (N, D); parameters named as duet's checkpoint."""

    def __init__(self, levels: tuple[int, ...], embed_dim: int, width: int):
        super().__init__()
        self.embed_dim = embed_dim
        self.tables = nn.Embedding(sum(levels), embed_dim)
        self.fc1 = nn.Linear(len(levels) * embed_dim, width)
        self.fc2 = nn.Linear(width, width)
        self.register_buffer("offsets", torch.cumsum(torch.tensor((0,) + levels[:-1]), 0), persistent=False)
        self.register_buffer("s_audio", torch.ones(()))

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        e = self.tables(codes + self.offsets)  # (N, C, m)
        u = e.flatten(1)  # (N, C*m)
        z = F.layer_norm(self.fc2(F.gelu(self.fc1(u))), (self.fc2.out_features,))  # affine-free
        return self.s_audio.to(z.dtype) * z  # (N, D)


class Heads(nn.Module):
    def __init__(self, levels: tuple[int, ...], width: int):
        super().__init__()
        self.codes = nn.Linear(width, sum(levels))
        self.stop = nn.Linear(width, 1)


class GepardForVLLM(nn.Module):
    def __init__(self, *, vllm_config: VllmConfig, prefix: str = ""):
        super().__init__()
        config = vllm_config.model_config.hf_config
        self.config = config
        self.levels = tuple(config.channel_levels)
        self.num_logits = sum(self.levels)
        self.model = Qwen3Model(vllm_config=vllm_config, prefix=maybe_prefix(prefix, "model"))
        self.audio_interface = AudioInterface(self.levels, config.audio_embed_dim, config.hidden_size)
        self.heads = Heads(self.levels, config.hidden_size)
        bank_path = getattr(config, "frame_bank_path", None)
        self.bank = bank_for(bank_path, config.frame_slots, len(self.levels))
        self.aligned = AlignedTables(bank_path, config.hidden_size) if getattr(config, "aligned_input", False) else None
        self.make_empty_intermediate_tensors = self.model.make_empty_intermediate_tensors

    def embed_input_ids(self, input_ids: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        """Frame-slot ids (N,) -> frame embeddings (N, D): the previous step's frame, through the audio interface."""
        codes = self.bank.frames(input_ids).to(input_ids.device)  # (N, C)
        x = self.audio_interface(codes).to(self.heads.codes.weight.dtype)  # (N, D)
        if self.aligned is not None:
            keys, index = self.bank.stamps(input_ids)  # frame t is fed at audio position t + 1
            keys = torch.where(input_ids.cpu() >= 1, keys, torch.zeros_like(keys))  # STOP / placeholders: no table
            x = x + self.aligned.rows(keys, index + 1).to(device=x.device, dtype=x.dtype)
        return x

    def forward(self, input_ids: torch.Tensor | None, positions: torch.Tensor,
                intermediate_tensors: IntermediateTensors | None = None,
                inputs_embeds: torch.Tensor | None = None) -> torch.Tensor | IntermediateTensors:
        if inputs_embeds is None:  # vLLM ran without prompt embeds (warm-up): ids are frame slots, not text
            inputs_embeds = self.embed_input_ids(input_ids)
        return self.model(None, positions, intermediate_tensors, inputs_embeds)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """hidden (B, D) -> (B, vocab): [216 channel logits | stop logit | -inf ...] for GepardFrameSampler."""
        codes = self.heads.codes(hidden_states)  # (B, 216)
        stop = self.heads.stop(hidden_states)  # (B, 1)
        out = hidden_states.new_full((hidden_states.shape[0], self.config.vocab_size), float("-inf"))
        out[:, : self.num_logits] = codes
        out[:, self.num_logits : self.num_logits + 1] = stop
        return out

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        own = dict(self.named_parameters()) | {n: b for n, b in self.named_buffers() if n.endswith("s_audio")}
        backbone: list[tuple[str, torch.Tensor]] = []
        loaded: set[str] = set()
        for name, tensor in weights:
            if name == "model.embed_tokens.weight":  # text rows, zero-padded to the frame-slot vocabulary
                padded = tensor.new_zeros((self.config.vocab_size, tensor.shape[1]))
                padded[: tensor.shape[0]] = tensor
                tensor = padded
            if name.startswith("model."):
                backbone.append((name.removeprefix("model."), tensor))
            elif name in own:
                target = own[name]
                if name.endswith("s_audio"):
                    target.copy_(tensor)
                else:
                    getattr(target, "weight_loader", default_weight_loader)(target, tensor)
                loaded.add(name)
        loaded |= {f"model.{n}" for n in self.model.load_weights(backbone)}
        return loaded
