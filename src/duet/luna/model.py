"""Luna-TTS model family: frame embedding, bidirectional Qwen3 backbone, Q parallel heads. Logits only; the loss is in
``diffusion.py`` and sampling in ``decode.py``.

Luna-TTS report §2.3 ("frame-wise multi-codebook modelling") and §2.5:
  * the sequence is ``[text | prompt grid | target grid]`` (``[y; P; X_t]``), attention fully bidirectional;
  * one position per frame; its input is the sum of the frame's Q codebook embeddings, looked up in Q separate
    tables; a masked cell contributes a learned per-codebook mask embedding instead, so a frame can be partly masked
    along the depth axis;
  * Q parallel classification heads read each target frame's output state;
  * text embedding and positions come from Qwen3 (``init_from``); audio tables and heads are new;
  * duet's option ``LunaConfig.aligned_window`` (a divergence, ``duet.nn.aligned``): every prompt and target frame
    also receives the layout vector of the text token it belongs to, from per-token durations laid over
    [prompt | target] as one timeline (``LunaInputs.durations``).

Shape legend: B batch, S text tokens, P prompt frames, T target frames, L = S + P + T, Q codebooks, K codes per
codebook, D model width.

Batching. Each segment is right-padded on its own (text to S, prompt to P, target to T), so the target always sits at
``[S + P, L)``. Padding is excluded by a key-padding mask, and position ids count real positions only
(``segment_layout``), so a row's logits do not depend on what it is batched with (RoPE sees the same relative
positions as when the row is alone).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from duet.errors import DuetError
from duet.luna.backbone import build_bidirectional, load_qwen3_weights
from duet.luna.checkpoint import read_checkpoint, write_checkpoint
from duet.luna.config import LunaConfig
from duet.luna.decode import LogitsFn
from duet.nn.aligned import AlignedInput
from duet.nn.masks import additive, bidirectional_mask, lengths_to_mask

IMPOSSIBLE_LOGIT = -1e4  # a code its cell cannot take: e^-10000 is 0 in every float type, and fp16 holds it


@dataclass(frozen=True)
class LunaInputs:
    """One batch of conditions and (possibly masked) target grids. Padded entries may hold anything."""

    text_ids: torch.Tensor  # (B, S) int64
    text_lengths: torch.Tensor  # (B,) 0 = no text (the CFG null condition)
    target: torch.Tensor  # (B, T, Q) int64 in 0..K, K = mask
    target_lengths: torch.Tensor  # (B,) >= 1
    prompt: torch.Tensor | None = None  # (B, P, Q) int64 in 0..K-1: a clean grid, never masked
    prompt_lengths: torch.Tensor | None = None  # (B,) 0 = no prompt
    # Aligned models only: frames per text token (B, S) float, laid over [prompt | target] as one timeline
    # (the prompt's frames first), 0 at padding; rows add up to about prompt + target length.
    durations: torch.Tensor | None = None

    @property
    def batch_size(self) -> int:
        return self.text_ids.shape[0]

    def prompt_or_empty(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(prompt (B, P, Q), prompt_lengths (B,)), with P = 0 when there is no prompt."""
        if self.prompt is None:
            B, _, Q = self.target.shape
            empty = self.target.new_zeros((B, 0, Q))
            return empty, self.target_lengths.new_zeros(B)
        lengths = self.prompt_lengths
        if lengths is None:
            lengths = torch.full_like(self.target_lengths, self.prompt.shape[1])
        return self.prompt, lengths


def pad_right(seqs: list[torch.Tensor], value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences (n_i, ...) -> (padded (B, max n_i, ...), lengths (B,)), padding with ``value`` at the end."""
    lengths = torch.tensor([s.shape[0] for s in seqs], dtype=torch.long)
    out = seqs[0].new_full((len(seqs), int(lengths.max()), *seqs[0].shape[1:]), value)
    for b, s in enumerate(seqs):
        out[b, : s.shape[0]] = s
    return out, lengths


def collate(
    texts: list[torch.Tensor],
    grids: list[torch.Tensor],
    text_pad_id: int,
    mask_id: int,
    prompts: list[torch.Tensor] | None = None,
    durations: list[torch.Tensor] | None = None,
) -> LunaInputs:
    """Utterances -> one batch: texts (S_i,) token ids, grids (T_i, Q) clean codes, optional prompts (P_i, Q).

    Grids are frame-major (T, Q); a codec's ``EncodeResult.codes[b]`` is (Q, T) and needs ``.T`` first. Padding holds
    ``text_pad_id`` / ``mask_id`` (the model ignores it either way). Rows without a prompt may pass a (0, Q) one.
    ``durations`` (S_i,) per row: frames per text token, for aligned models.
    """
    if not texts or len(texts) != len(grids) or (prompts is not None and len(prompts) != len(texts)):
        raise DuetError("collate needs one text and one grid (and one prompt, if any) per utterance")
    if any(g.dim() != 2 or g.shape[0] == 0 for g in grids):
        raise DuetError("every grid must be (frames >= 1, Q)")
    text_ids, text_lengths = pad_right(texts, text_pad_id)
    target, target_lengths = pad_right(grids, mask_id)
    prompt = prompt_lengths = None
    if prompts is not None:
        prompt, prompt_lengths = pad_right(prompts, mask_id)
    padded_durations = None
    if durations is not None:
        if len(durations) != len(texts) or any(d.shape != t.shape for d, t in zip(durations, texts)):
            raise DuetError("collate needs one duration per text token of every row")
        padded_durations = pad_right([d.float() for d in durations], 0)[0]
    return LunaInputs(text_ids, text_lengths, target, target_lengths, prompt, prompt_lengths, padded_durations)


def segment_layout(
    text_lengths: torch.Tensor,
    prompt_lengths: torch.Tensor,
    target_lengths: torch.Tensor,
    S: int,
    P: int,
    T: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Key validity and position ids of ``[text (S) | prompt (P) | target (T)]``, each segment right-padded.

    Returns valid (B, L) bool and position_ids (B, L) int64: real positions are numbered 0, 1, 2, ... in order, as if
    the padding were not there; a padded position repeats its predecessor's number (or 0), which is harmless because
    no query attends to it.
    """
    valid = torch.cat(
        [
            lengths_to_mask(text_lengths, S),
            lengths_to_mask(prompt_lengths, P),
            lengths_to_mask(target_lengths, T),
        ],
        dim=1,
    )  # (B, L)
    position_ids = (valid.long().cumsum(dim=1) - 1).clamp(min=0)  # (B, L)
    return valid, position_ids


class LunaModel(nn.Module):
    def __init__(self, config: LunaConfig):
        super().__init__()
        self.config = config
        Q, K, D = config.num_codebooks, config.codebook_size, config.backbone.width
        # Registered as ``model`` like Qwen3ForCausalLM does (duet.nn.backbone's convention): the state dict reads
        # model.embed_tokens.weight, model.layers.N..., model.norm.weight, i.e. Qwen3's own names.
        self.model = build_bidirectional(config.backbone)
        # Q separate tables of K + 1 rows (row K = that codebook's mask embedding), stored as one matrix: codebook q
        # owns rows [q (K + 1), (q + 1) (K + 1)). One gather instead of Q small ones; same parameters.
        self.audio_embed = nn.Embedding(Q * (K + 1), D)
        self.register_buffer("codebook_offsets", torch.arange(Q) * (K + 1), persistent=False)  # (Q,)
        # Q parallel heads D -> K, stored as one Linear D -> Q K: head q owns output rows [q K, (q + 1) K). Tied heads
        # (``config.tie_heads``) read their weights from the tables and keep only the bias (``code_logits``).
        self.audio_heads: nn.Linear | None = None
        self.audio_head_bias: nn.Parameter | None = None
        if not config.tie_heads:
            self.audio_heads = nn.Linear(D, Q * K, bias=config.head_bias)
        elif config.head_bias:
            self.audio_head_bias = nn.Parameter(torch.zeros(Q * K))
        self.aligned = AlignedInput(D, config.aligned_window) if config.is_aligned else None
        # (Q, K) 0 where cell q can take code k, else a large negative logit (an FSQ grid's cells of fewer than K
        # levels): finite, so that CFG's difference of two such logits stays finite. All zeros on an RVQ grid.
        levels = torch.tensor(config.cell_levels)[:, None]  # (Q, 1)
        self.register_buffer("code_bias", (torch.arange(K)[None] >= levels).float() * IMPOSSIBLE_LOGIT,
                             persistent=False)
        self.reset_audio_parameters()

    # -- parameters -------------------------------------------------------------------------------------------------

    def reset_audio_parameters(self, frame_std: float | None = None) -> None:
        """Initialise the new audio parameters.

        Each table gets std ``frame_std / sqrt(Q)`` so that the sum of Q lookups (a frame's input) has std
        ``frame_std``, by default ``initializer_range`` like a fresh Qwen3 embedding; ``init_from`` passes the
        loaded text embedding's std, so text and frames enter the backbone at the same scale (duet's choice; the
        report does not give its initialisation). Heads: std ``initializer_range``, zero bias (tied heads: the
        tables' initialisation, zero bias).
        """
        cfg = self.config
        std = cfg.backbone.initializer_range if frame_std is None else frame_std
        with torch.no_grad():
            self.audio_embed.weight.normal_(0.0, std / math.sqrt(cfg.num_codebooks))
            if self.audio_heads is not None:
                self.audio_heads.weight.normal_(0.0, cfg.backbone.initializer_range)
                if self.audio_heads.bias is not None:
                    self.audio_heads.bias.zero_()
            if self.audio_head_bias is not None:
                self.audio_head_bias.zero_()

    def init_from(self, path: str | Path) -> list[str]:
        """Initialise text embedding and transformer layers from a local Qwen3 checkpoint (transformers format).

        Luna §2.4: the backbone starts from Qwen3-0.6B; audio tables and heads are new (re-initialised here at the
        loaded text embedding's scale). Returns the backbone tensor names that were copied.
        """
        copied = load_qwen3_weights(self.model, path)
        text_std = float(self.model.embed_tokens.weight.detach().float().std())
        self.reset_audio_parameters(frame_std=text_std)
        return copied

    # -- forward ----------------------------------------------------------------------------------------------------

    @property
    def device(self) -> torch.device:
        return self.audio_embed.weight.device

    def code_logits(self, h: torch.Tensor) -> torch.Tensor:
        """Frame states (B, n, D) -> code logits (B, n, Q, K) from the Q heads (or the tables, when tied)."""
        Q, K = self.config.num_codebooks, self.config.codebook_size
        if self.audio_heads is not None:
            logits = self.audio_heads(h).unflatten(-1, (Q, K))
        else:
            # One product with every row of the Q tables (no copy of the weight), then each table's mask row dropped.
            logits = nn.functional.linear(h, self.audio_embed.weight)  # (B, n, Q (K + 1))
            logits = logits.unflatten(-1, (Q, K + 1))[..., :K]  # (B, n, Q, K)
            if self.audio_head_bias is not None:
                logits = logits + self.audio_head_bias.view(Q, K)
        if self.config.fsq_levels is not None:
            logits = logits + self.code_bias.to(logits.dtype)
        return logits

    def embed_grid(self, grid: torch.Tensor) -> torch.Tensor:
        """grid (B, T, Q) in 0..K (K = mask) -> frame embeddings (B, T, D): sum over the Q tables."""
        Q, K = self.config.num_codebooks, self.config.codebook_size
        if grid.shape[-1] != Q:
            raise DuetError(f"grid has {grid.shape[-1]} codebooks, the model {Q}")
        if grid.numel() and (int(grid.min()) < 0 or int(grid.max()) > K):
            raise DuetError(f"grid codes must lie in 0..{K} ({K} = mask), got {int(grid.min())}..{int(grid.max())}")
        return self.audio_embed(grid + self.codebook_offsets).sum(dim=-2)  # (B, T, Q, D) -> (B, T, D)

    def forward(self, inputs: LunaInputs) -> torch.Tensor:
        """-> logits (B, T, Q, K) for every target cell (masked or not; padded frames hold garbage)."""
        cfg = self.config
        prompt, prompt_lengths = inputs.prompt_or_empty()
        text_ids, target = inputs.text_ids, inputs.target
        B, S = text_ids.shape
        P, T = prompt.shape[1], target.shape[1]
        if T == 0 or bool((inputs.target_lengths <= 0).any()):
            raise DuetError("every row needs a target of at least one frame")
        valid, position_ids = segment_layout(inputs.text_lengths, prompt_lengths, inputs.target_lengths, S, P, T)
        prompt_valid = valid[:, S : S + P, None]  # (B, P, 1)
        if bool(((prompt == cfg.mask_id) & prompt_valid).any()):
            raise DuetError("the prompt grid must be clean: conditions are never masked (Luna §2.3)")
        # Padded entries may hold pad ids, -100 or anything else: overwrite them with a safe index (they are masked).
        text_ids = text_ids.masked_fill(~valid[:, :S], 0)
        prompt = prompt.masked_fill(~prompt_valid, cfg.mask_id)
        target = target.masked_fill(~valid[:, S + P :, None], cfg.mask_id)
        text = self.model.embed_tokens(text_ids)  # (B, S, D)
        frames = torch.cat([self.embed_grid(prompt), self.embed_grid(target)], dim=1)  # (B, P + T, D)
        if self.aligned is not None:
            frames = frames + self.aligned_input(text, inputs.text_lengths, inputs.durations, prompt_lengths, P, T)
        x = torch.cat([text, frames], dim=1)  # (B, L, D)
        mask = additive(bidirectional_mask(valid), x.dtype)  # (B, 1, L, L)
        h = self.model(inputs_embeds=x, attention_mask=mask, position_ids=position_ids).last_hidden_state
        h = h[:, S + P :]  # (B, T, D): heads on the target region only
        return self.code_logits(h)  # (B, T, Q, K)

    def aligned_input(self, text: torch.Tensor, text_lengths: torch.Tensor, durations: torch.Tensor | None,
                      prompt_lengths: torch.Tensor, P: int, T: int) -> torch.Tensor:
        """The aligned-input vectors (B, P + T, D) of the prompt and target frames; 0 for rows without text (the
        CFG null condition drops the layout with the text)."""
        if durations is None:
            raise DuetError("this Luna model reads aligned text input: it needs per-token durations")
        B = text.shape[0]
        frame = torch.arange(max(P, T), device=text.device)
        positions = torch.cat([frame[:P].expand(B, P), prompt_lengths[:, None] + frame[:T]], dim=1)  # (B, P + T)
        a = self.aligned(text, text_lengths.clamp(min=1), durations, positions)  # (B, P + T, D)
        return a * (text_lengths > 0)[:, None, None].to(a.dtype)

    def logits_fn(self, inputs: LunaInputs) -> LogitsFn:
        """A ``decode.LogitsFn`` for these conditions (``inputs.target`` is ignored; the decoder supplies tokens).

        The decoder calls it with B' = B rows (conditional) or B' = 2B rows (conditional, then unconditional, in one
        forward pass for CFG); row i belongs to request i % B. Unconditional rows drop the text (length 0, the null
        text condition also used in training, see ``diffusion.drop_text``) and keep the prompt: CFG is on text only
        (Luna §2.5).
        """

        @torch.no_grad()
        def fn(tokens: torch.Tensor, conditional: torch.Tensor) -> torch.Tensor:
            return self(condition_rows(inputs, tokens, conditional))

        return fn

    # -- persistence ------------------------------------------------------------------------------------------------

    def save(self, directory: str | Path) -> Path:
        """Write ``config.json`` (section ``luna``) and ``model.safetensors``."""
        return write_checkpoint(directory, "luna", self.config.to_dict(), self.state_dict())

    @classmethod
    def load(cls, directory: str | Path, map_location: str = "cpu") -> "LunaModel":
        cfg, state = read_checkpoint(directory, "luna", map_location)
        model = cls(LunaConfig.from_dict(cfg))
        model.load_state_dict(state)
        return model


def condition_rows(inputs: LunaInputs, tokens: torch.Tensor, conditional: torch.Tensor) -> LunaInputs:
    """The model's batch for grids tokens (B', T, Q) and flags conditional (B',): row i is condition i % B, its text
    dropped where ``conditional`` is False (the CFG null condition); prompt and layout kept. What the decoder's
    ``logits_fn`` runs (under no_grad) and what RL post-training replays (with gradients)."""
    B = inputs.batch_size
    if tokens.shape[0] % B:
        raise DuetError(f"{tokens.shape[0]} grid rows for a batch of {B} conditions")
    rows = torch.arange(tokens.shape[0], device=tokens.device) % B  # (B',)
    prompt, prompt_lengths = inputs.prompt_or_empty()
    return LunaInputs(
        text_ids=inputs.text_ids[rows],
        text_lengths=inputs.text_lengths[rows] * conditional.long(),
        target=tokens,
        target_lengths=inputs.target_lengths[rows],
        prompt=prompt[rows],
        prompt_lengths=prompt_lengths[rows],
        durations=None if inputs.durations is None else inputs.durations[rows],
    )
