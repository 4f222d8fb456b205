"""GepardModel: the stock Qwen3 backbone + audio interface + heads, with the training loss and inference logits.

Sequence (Gepard §2.1), one row::

    [ prefix (K, optional) | SOT  text ...  EOT  SOS | f_0  f_1 ... f_{T-1} | padding ]
                             `------ S_b text ids ---'  `--- T_b frames ---'

Text ids are embedded by the backbone's own ``model.embed_tokens``; frames (32 FSQ channel codes each) by the
audio interface (§2.4); the prefix is K speaker vectors (B, K, D). A model with the voice compressor
(``GepardConfig.voice``, §2.6: ``duet.gepard.qformer``, its ``qformer.*`` parameters) computes them from each row's
reference codes (``duet.gepard.voice``), or reads ``null_prefix`` for a row without a reference, a null-sentinel
row, or one the training dropout (0.15) picks; every row of such a model has the K positions, in training and at
inference alike, and they enter in prefill only, never in the decode loop (§1.2). A model without the compressor
has no prefix unless a caller gives one as embeddings. A batch is right-padded as a whole, so rows with different
text lengths start their audio at different places; with causal attention no real position ever sees padding (it
comes after), so no padding mask is needed and the backbone stays on its plain causal path.

Heads run on the audio region only (§2.5: "the K-position prefix slice is discarded before the heads"):
positions SOS, f_0, ..., f_{T-1} of each row, gathered into (B, T + 1, D). Causal shift: the position of SOS
predicts f_0 and the position of f_{t-1} predicts f_t. The position of the last real frame f_{T-1} predicts the
terminal "phantom" frame f_T: it has no codes (label -100 in all 32 heads) and carries the only stop = 1 (§2.5);
all earlier audio positions carry stop = 0. This is the report's trajectory likelihood (§3.3): p_stop,t is read at
frame t's position, log(1 - p_stop,t) for t < T-1 and log p_stop,T-1 at the last frame. At inference the same
rule reads: after feeding frame t, stop if p_stop crosses the threshold (the next frame would be the phantom).

Loss (§2.5): L = sum_k CE_k + w_stop * BCE(stop, pos_weight = 25), w_stop = 2; each CE_k is a mean over its
valid labels, and a head whose labels are all -100 contributes ``logits * 0`` (zero, finite, still in the graph)
instead of mean-CE's 0/0 = NaN. With the voice compressor, + L_div + L_supcon on its ``q_normed`` (§2.5:
unweighted; ``QFormerConfig.supcon_weight`` can scale L_supcon; logged as ``div`` and ``supcon``).

Parameter names: ``model.*`` (a stock ``Qwen3Model``, exactly as in ``Qwen3ForCausalLM``; see
``duet.nn.backbone``), ``audio_interface.*``, ``heads.*``, ``qformer.*`` (the voice compressor, when configured).

Shape legend: B batch, K prefix vectors, S text ids (incl. SOT/EOT/SOS), T frames, N audio positions (T + 1 in
training), C channels (32), D model width.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from duet.errors import DuetError
from duet.gepard.aligned import EOT_BACK, AlignedState, DurationHead
from duet.gepard.alignment import GuidedAttentionConfig, guided_attention_loss
from duet.gepard.audio_interface import AudioInterface
from duet.gepard.config import GepardConfig
from duet.gepard.decode import prompt_inputs
from duet.gepard.heads import FrameLogits, GepardHeads
from duet.gepard.qformer import QFormer, QFormerOutput, voice_regularisers
from duet.nn.aligned import AlignedInput
from duet.nn.backbone import build_qwen3, new_cache, run_backbone, run_backbone_attentions
from duet.nn.qwen3 import Qwen3Weights

IGNORE = -100  # label of a position that is not scored
NUM_SERVICE_TOKENS = 3  # SOT, EOT, SOS around the text (Gepard §4.1.1: "service SOT/EOT/SOS tokens")


@dataclass(frozen=True)
class GepardBatch:
    """A right-padded training batch.

    text_ids (B, S) int64: wrapped text [SOT, text, EOT, SOS] (``duet.text.prompts``), padding after ``text_lengths`` (any valid id).
    codes (B, C, T) int64: channel codes (``GroupFSQ.unfold`` of the packed tokens), padding after
    ``audio_lengths`` (ignored; any value). prefix (B, K, D) float or None: given embeddings (a model with the voice
    compressor reads them instead of running it, e.g. a prefix computed once for many rows). durations (B, S) float frames per wrapped token (aligned text input,
    ``duet.gepard.aligned``; 0 past ``text_lengths``) or None.

    For a model with the voice compressor (``duet.gepard.voice``): reference (B, C, R) int64 channel codes of each
    row's reference, reference_mask (B, R) bool, speaker_ids (B,) int64, no_speaker (B,) bool (null-sentinel
    rows); all None (and no prefix) reads ``null_prefix`` in every row.
    """

    text_ids: torch.Tensor
    text_lengths: torch.Tensor
    codes: torch.Tensor
    audio_lengths: torch.Tensor
    prefix: torch.Tensor | None = None
    durations: torch.Tensor | None = None
    reference: torch.Tensor | None = None
    reference_mask: torch.Tensor | None = None
    speaker_ids: torch.Tensor | None = None
    no_speaker: torch.Tensor | None = None

    def __post_init__(self) -> None:
        given = [x is not None for x in (self.reference, self.reference_mask, self.speaker_ids, self.no_speaker)]
        if any(given) and not all(given):
            raise DuetError("a batch's reference, reference_mask, speaker_ids and no_speaker go together")

    def to(self, device: torch.device | str) -> "GepardBatch":
        move = lambda x: None if x is None else x.to(device)  # noqa: E731
        return GepardBatch(*(move(getattr(self, f.name)) for f in fields(self)))


def collate(items: Sequence[tuple[Sequence[int], torch.Tensor]], pad_id: int,
            durations: Sequence[Sequence[float]] | None = None) -> GepardBatch:
    """(wrapped text ids, channel codes (C, T_i)) pairs -> a right-padded GepardBatch (codes padded with 0);
    ``durations`` (one per item, frames per wrapped token) are padded with 0."""
    if not items:
        raise DuetError("cannot collate an empty list of utterances")
    b = len(items)
    s = max(len(ids) for ids, _ in items)
    c = items[0][1].shape[0]
    t = max(codes.shape[1] for _, codes in items)
    text = torch.full((b, s), pad_id, dtype=torch.long)
    codes_out = torch.zeros((b, c, t), dtype=torch.long)
    for i, (ids, codes) in enumerate(items):
        text[i, : len(ids)] = torch.as_tensor(list(ids), dtype=torch.long)
        codes_out[i, :, : codes.shape[1]] = codes
    frames = None
    if durations is not None:
        frames = torch.zeros((b, s), dtype=torch.float32)
        for i, d in enumerate(durations):
            if len(d) != len(items[i][0]):
                raise DuetError(f"item {i}: {len(d)} durations for {len(items[i][0])} wrapped tokens")
            frames[i, : len(d)] = torch.as_tensor(list(d), dtype=torch.float32)
    return GepardBatch(
        text_ids=text,
        text_lengths=torch.tensor([len(ids) for ids, _ in items]),
        codes=codes_out,
        audio_lengths=torch.tensor([codes.shape[1] for _, codes in items]),
        durations=frames,
    )


def drop_text(batch: GepardBatch, rows: torch.Tensor) -> GepardBatch:
    """Replace the text of the selected rows (bool (B,)) by the empty text [SOT, EOT, SOS].

    This is duet's unconditional path for two-pass CFG (see ``duet.gepard.generate``): the report routes it through
    ``null_prefix`` (§2.6.2) and calls it CFG "over text" (abstract); without the voice-cloning compressor duet
    drops the text. The service ids are read from each row itself (first id, last two ids), never hard-coded.
    """
    b, s = batch.text_ids.shape
    ar = torch.arange(b, device=batch.text_ids.device)
    empty = torch.stack([batch.text_ids[:, 0], batch.text_ids[ar, batch.text_lengths - 2],
                         batch.text_ids[ar, batch.text_lengths - 1]], dim=1)  # (B, 3)
    text = batch.text_ids.clone()
    text[rows, :NUM_SERVICE_TOKENS] = empty[rows]
    lengths = torch.where(rows, torch.full_like(batch.text_lengths, NUM_SERVICE_TOKENS), batch.text_lengths)
    return replace(batch, text_ids=text, text_lengths=lengths)


def pack_sequence(text: torch.Tensor, text_lengths: torch.Tensor, audio: torch.Tensor,
                  audio_lengths: torch.Tensor) -> torch.Tensor:
    """Per row [text[:S_b] | audio[:T_b] | zeros]: text (B, S, D), audio (B, T, D) -> (B, S + T, D).

    Vectorised form of the per-row concatenation (tested against a naive loop).
    """
    b, s, d = text.shape
    t = audio.shape[1]
    p = torch.arange(s + t, device=text.device).expand(b, -1)  # (B, S+T) output position
    in_text = p < text_lengths[:, None]
    in_audio = ~in_text & (p < (text_lengths + audio_lengths)[:, None])
    text_src = text.gather(1, p.clamp(max=s - 1)[..., None].expand(-1, -1, d))  # (B, S+T, D)
    audio_idx = (p - text_lengths[:, None]).clamp(0, max(t - 1, 0))
    audio_src = audio.gather(1, audio_idx[..., None].expand(-1, -1, d)) if t else torch.zeros_like(text_src)
    zero = text.new_zeros(())
    return torch.where(in_text[..., None], text_src, torch.where(in_audio[..., None], audio_src, zero))


def audio_labels(codes: torch.Tensor, audio_lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """codes (B, C, T) -> code labels (B, T + 1, C) int64 and stop labels (B, T + 1) float (-100 = ignore).

    Audio position j (0 = SOS, j = frame j-1) predicts frame j: codes[:, :, j] for j < T_b, -100 from the phantom
    frame j = T_b on. Stop: 0 for j < T_b, 1 at j = T_b (the phantom frame, Gepard §2.5), -100 after.
    """
    b, c, t = codes.shape
    j = torch.arange(t + 1, device=codes.device)  # (T+1,)
    lengths = audio_lengths[:, None]  # (B, 1)
    code_labels = torch.full((b, t + 1, c), IGNORE, dtype=torch.long, device=codes.device)
    code_labels[:, :t] = codes.transpose(1, 2)  # (B, T, C)
    code_labels = code_labels.masked_fill((j >= lengths)[..., None], IGNORE)
    stop_labels = torch.where(j < lengths, 0.0, torch.where(j == lengths, 1.0, float(IGNORE)))  # (B, T+1)
    return code_labels, stop_labels


def gepard_loss(logits: FrameLogits, code_labels: torch.Tensor, stop_labels: torch.Tensor,
                config: GepardConfig) -> dict[str, torch.Tensor]:
    """Gepard §2.5 loss over audio positions: logits (B, N, ...), code_labels (B, N, C), stop_labels (B, N).

    Returns ``loss`` (with graph), ``ce`` (sum of the 32 CE), ``stop_bce``, ``ce_per_channel`` (C,) and
    ``stop_frames`` (number of scored stop positions); all but ``loss`` detached.
    """
    padded = logits.padded().float()  # (B, N, C, Lmax), -inf past L_k
    b, n, c, lmax = padded.shape
    per_cell = F.cross_entropy(padded.reshape(-1, lmax), code_labels.reshape(-1), ignore_index=IGNORE,
                               reduction="none").view(b, n, c)  # 0 where ignored
    valid = (code_labels != IGNORE).sum(dim=(0, 1))  # (C,)
    # Guard (§2.5): a head with no valid label gives logits * 0 (finite zero, graph kept), not 0/0 = NaN.
    anchor = logits.codes.float().sum() * 0
    ce_per_channel = torch.where(valid > 0, per_cell.sum(dim=(0, 1)) / valid.clamp(min=1), anchor)  # (C,)
    ce = ce_per_channel.sum()

    stop_valid = stop_labels >= 0
    stop_logits = logits.stop.float()
    pos_weight = torch.tensor(config.stop_pos_weight, device=stop_logits.device)
    per_stop = F.binary_cross_entropy_with_logits(stop_logits, stop_labels.clamp(min=0), pos_weight=pos_weight,
                                                  reduction="none")  # (B, N)
    n_stop = stop_valid.sum()
    stop_bce = torch.where(n_stop > 0, (per_stop * stop_valid).sum() / n_stop.clamp(min=1), stop_logits.sum() * 0)

    loss = ce + config.stop_loss_weight * stop_bce
    return {"loss": loss, "ce": ce.detach(), "stop_bce": stop_bce.detach(),
            "ce_per_channel": ce_per_channel.detach(), "stop_frames": n_stop.detach()}


@dataclass(frozen=True)
class GepardPrompt:
    """What generation starts from: wrapped text ids (B, S), the same length in every row, and an optional prefix.

    For a model with aligned text input, ``durations`` (B, S) lays the text out over the frames; None lets the
    model's duration predictor do it (at ``speed``, > 1 faster).
    """

    text_ids: torch.Tensor
    prefix: torch.Tensor | None = None
    durations: torch.Tensor | None = None
    speed: float = 1.0

    @property
    def num_text_tokens(self) -> int:
        """Text ids without the service tokens (drives the sampler's frame bound)."""
        return self.text_ids.shape[1] - NUM_SERVICE_TOKENS

    def unconditional(self, null_prefix: torch.Tensor | None = None) -> "GepardPrompt":
        """The CFG unconditional prompt (:meth:`GepardModel.unconditional` picks the path).

        With ``null_prefix`` (B, K, D), a model with the voice compressor (§2.6.2): the same text and layout, the
        speaker replaced by the null prefix, so guidance pushes towards the reference voice. Without: the text
        dropped to [SOT, EOT, SOS], the prefix kept, for a model trained with ``text_dropout_prob > 0`` (see
        :func:`drop_text`); aligned text input has no such path.
        """
        if null_prefix is not None:
            return replace(self, prefix=null_prefix)
        if self.durations is not None:
            raise DuetError("aligned text input has no text-dropped unconditional path; CFG needs a voice prefix")
        return GepardPrompt(self.text_ids[:, [0, -2, -1]], self.prefix)


class GepardModel(nn.Module):
    """Backbone (``model``) + ``audio_interface`` + ``heads``; ``forward(batch)`` is the training loss.

    ``stock=False`` builds the backbones without transformers (``duet.nn.qwen3.Qwen3Weights``, the same parameter
    names): for inference only, as ``duet speak`` loads a shipped model."""

    def __init__(self, config: GepardConfig, stock: bool = True):
        super().__init__()
        self.config = config
        self.model = build_qwen3(config.backbone) if stock else Qwen3Weights(config.backbone)
        self.audio_interface = AudioInterface(config)
        self.heads = GepardHeads(config)
        self.audio_interface.set_scale(self.model.embed_tokens.weight)
        if config.aligned is not None:
            self.aligned = AlignedInput(config.width, config.aligned.window, EOT_BACK)
            self.duration = DurationHead(config.aligned.duration, stock=stock)
        self.qformer = QFormer(config.voice) if config.voice is not None else None

    @property
    def is_aligned(self) -> bool:
        return self.config.aligned is not None

    @property
    def has_voice(self) -> bool:
        """Whether the model carries the voice compressor (and so a K-vector prefix in every row)."""
        return self.qformer is not None

    @property
    def embed_tokens(self) -> nn.Embedding:
        return self.model.embed_tokens

    # ---- voice prefix -----------------------------------------------------------------------------------------------
    def voice_prefix(self, reference: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                     batch_size: int = 1) -> torch.Tensor:
        """The prefix (B, K, D) at inference: the compressor's ``prefix_raw`` of reference codes (B, C, R) with
        ``mask`` (B, R) (default: every frame), or ``null_prefix`` for ``batch_size`` rows without a reference.
        Deterministic: no dropout, whatever the module's mode."""
        if self.qformer is None:
            raise DuetError("this Gepard has no voice compressor: it cannot clone a voice")
        if reference is None:
            return self.qformer.null(batch_size)
        if mask is None:
            mask = torch.ones(reference.shape[0], reference.shape[2], dtype=torch.bool, device=reference.device)
        return self.qformer.encode(reference, mask)[0]

    def _voice_terms(self, batch: GepardBatch, voice: QFormerOutput | None) -> dict[str, torch.Tensor]:
        """L_div and L_supcon of the batch (``duet.gepard.voice``); zeros when the batch brought its own prefix
        (the compressor did not run) or no references (no row qualifies)."""
        if voice is None:
            zero = torch.zeros((), device=batch.text_ids.device)
            return {"div": zero, "supcon": zero}
        if batch.reference_mask is None:  # every row read null_prefix: nothing was encoded
            zero = voice.q_normed.sum() * 0.0
            return {"div": zero, "supcon": zero}
        assert batch.speaker_ids is not None and batch.no_speaker is not None
        return voice_regularisers(voice, batch.reference_mask, batch.speaker_ids, batch.no_speaker)

    def _voice(self, batch: GepardBatch) -> QFormerOutput:
        """The compressor's output for a training batch: each row's prefix, ``null_prefix`` where the row has no
        reference frame, is a null-sentinel, or (training mode) the 0.15 dropout draws it (§2.6.2)."""
        assert self.qformer is not None
        b = batch.text_ids.shape[0]
        device = batch.text_ids.device
        if batch.reference is None:  # no references at all: every row reads null_prefix
            codes = torch.zeros((b, self.config.num_channels, 1), dtype=torch.long, device=device)
            mask = torch.zeros((b, 1), dtype=torch.bool, device=device)
            no_speaker = torch.ones(b, dtype=torch.bool, device=device)
        else:
            assert batch.reference_mask is not None and batch.no_speaker is not None
            codes, mask = batch.reference, batch.reference_mask
            no_speaker = batch.no_speaker | ~mask.any(dim=1)  # a row without a reference frame: nothing to read
        return self.qformer(codes, mask, no_speaker)

    def refresh_audio_scale(self) -> None:
        """Re-align s_audio with the text embedding (call after loading a pretrained text embedding)."""
        self.audio_interface.set_scale(self.model.embed_tokens.weight)

    # ---- training -------------------------------------------------------------------------------------------------
    def audio_logits(self, batch: GepardBatch) -> FrameLogits:
        """Teacher-forced logits over each row's audio region: codes (B, N = T + 1, 216), stop (B, N); a model with
        the voice compressor reads its prefix from the batch's references (dropout only in training mode) unless
        the batch gives one."""
        if self.qformer is not None and batch.prefix is None:
            batch = replace(batch, prefix=self._voice(batch).prefix)
        return self._teacher_forced(batch, attentions=False)[0]

    def _teacher_forced(self, batch: GepardBatch, attentions: bool) -> tuple[FrameLogits, tuple[torch.Tensor, ...]]:
        """-> (audio_logits, with ``attentions`` every layer's weights (B, H, S+T, S+T) without the prefix)."""
        text = self.model.embed_tokens(batch.text_ids)  # (B, S, D)
        b, c, t = batch.codes.shape
        frame_ok = torch.arange(t, device=batch.codes.device) < batch.audio_lengths[:, None]  # (B, T)
        codes = torch.where(frame_ok[:, None, :], batch.codes, 0).transpose(1, 2)  # (B, T, C); padding -> code 0
        audio = self.audio_interface(codes).to(text.dtype)  # (B, T, D)
        if self.is_aligned:
            if batch.durations is None:
                raise DuetError("a model with aligned text input trains on batches with durations")
            positions = torch.arange(t + 1, device=text.device).expand(b, -1)  # (B, T+1)
            added = self.aligned(text, batch.text_lengths, batch.durations, positions)  # (B, T+1, D)
            audio = audio + added[:, 1:]  # frame j-1's position predicts frame j
            sos = F.one_hot(batch.text_lengths - 1, text.shape[1]).to(text.dtype)  # (B, S)
            text = text + sos[..., None] * added[:, :1]  # SOS predicts frame 0
        x = pack_sequence(text, batch.text_lengths, audio, batch.audio_lengths)  # (B, S+T, D)
        k = 0
        if batch.prefix is not None:
            k = batch.prefix.shape[1]
            x = torch.cat([batch.prefix.to(x.dtype), x], dim=1)  # (B, K+S+T, D)
        if attentions:
            hidden, weights = run_backbone_attentions(self.model, x)
            weights = tuple(w[..., k:, k:] for w in weights)
        else:
            hidden, weights = run_backbone(self.model, x), ()
        hidden = hidden[:, k:]  # (B, S+T, D): prefix slice dropped (§2.5)
        # Audio region: SOS at text_length - 1, then one position per frame.
        idx = (batch.text_lengths[:, None] - 1 + torch.arange(t + 1, device=x.device)).clamp(max=hidden.shape[1] - 1)
        audio_hidden = hidden.gather(1, idx[..., None].expand(-1, -1, hidden.shape[-1]))  # (B, T+1, D)
        return self.heads(audio_hidden), weights

    def forward(self, batch: GepardBatch, guided: GuidedAttentionConfig | None = None) -> dict[str, torch.Tensor]:
        """The training loss dict (see :func:`gepard_loss`); ``loss`` is what the training loop backpropagates.
        With ``guided`` enabled (``duet.gepard.alignment``; the backbone in eager attention) ``loss`` also has
        ``guided.weight`` x the guided-attention penalty, logged as ``guided``."""
        if self.training and self.config.text_dropout_prob > 0:
            rows = torch.rand(batch.text_ids.shape[0], device=batch.text_ids.device) < self.config.text_dropout_prob
            batch = drop_text(batch, rows)
        code_labels, stop_labels = audio_labels(batch.codes, batch.audio_lengths)
        use_guided = guided is not None and guided.enabled
        voice = None
        if self.qformer is not None and batch.prefix is None:
            voice = self._voice(batch)
            batch = replace(batch, prefix=voice.prefix)  # (B, K, D)
        logits, weights = self._teacher_forced(batch, attentions=use_guided)
        out = gepard_loss(logits, code_labels, stop_labels, self.config)
        if self.qformer is not None:
            terms = self._voice_terms(batch, voice)
            out = {**out, "loss": out["loss"] + terms["div"] + self.qformer.config.supcon_weight * terms["supcon"],
                   "div": terms["div"].detach(), "supcon": terms["supcon"].detach()}
        if self.is_aligned:
            assert self.config.aligned is not None and batch.durations is not None
            duration = self.duration.loss(batch.text_ids, batch.text_lengths, batch.durations)
            out = {**out, "loss": out["loss"] + self.config.aligned.duration_weight * duration,
                   "duration": duration.detach()}
        if use_guided:
            assert guided is not None
            penalty = guided_attention_loss([weights[i] for i in guided.layers], batch.text_lengths,
                                            batch.audio_lengths, guided, durations=batch.durations)
            out = {**out, "loss": out["loss"] + guided.weight * penalty, "guided": penalty}
        return out

    # ---- inference --------------------------------------------------------------------------------------------------
    def new_cache(self) -> Any:
        """An empty KV cache for :meth:`logits` (transformers' DynamicCache for a stock backbone)."""
        return new_cache(self.model)

    def logits(self, *, text_ids: torch.Tensor | None = None, prefix: torch.Tensor | None = None,
               frames: torch.Tensor | None = None, cache: Any = None) -> FrameLogits:
        """Logits at the audio positions of this call, continuing ``cache`` (extended in place) if given.

        Prefill: ``text_ids`` (B, S) ending in SOS (and ``prefix`` (B, K, D), first call only), optionally followed
        by known ``frames`` (B, n, C). Decode step: ``frames`` (B, n, C) only, usually n = 1. Returns N = n (+ 1 for
        SOS when text is given) positions; position i predicts the frame after it and carries its stop logit.
        """
        parts = []
        if prefix is not None:
            parts.append(prefix)
        if text_ids is not None:
            parts.append(self.model.embed_tokens(text_ids))  # (B, S, D)
        if frames is not None:
            parts.append(self.audio_interface(frames))  # (B, n, D)
        if not parts or (text_ids is None and frames is None):
            raise DuetError("GepardModel.logits needs text_ids (prefill) and/or frames (decode)")
        dtype = self.model.embed_tokens.weight.dtype
        x = torch.cat([p.to(dtype) for p in parts], dim=1)  # (B, L, D)
        n = (frames.shape[1] if frames is not None else 0) + (1 if text_ids is not None else 0)
        hidden = run_backbone(self.model, x, cache=cache)  # (B, L, D)
        return self.heads(hidden[:, -n:])  # (B, N, ...)

    # The sampler's FrameModel protocol (duet.gepard.generate): prefill once, then one frame per step. The serving
    # runtime runs the same layout through duet.gepard.decode.GepardStep; these two are its test oracle.
    def prefill(self, prompt: GepardPrompt) -> tuple[FrameLogits, Any]:
        """Run the prompt once: [prefix | text ending in SOS] -> logits of frame 0 and the decode state (a KV cache,
        or an :class:`AlignedState` around one). A model with the voice compressor reads ``null_prefix`` when the
        prompt has no prefix (as it trained on rows without a reference)."""
        x, state = self.prompt_inputs(prompt)
        cache = self.new_cache()
        logits = self.heads(run_backbone(self.model, x, cache=cache)[:, -1:])
        if state is None:
            return logits, cache
        state.cache = cache
        return logits, state

    def prompt_inputs(self, prompt: GepardPrompt) -> tuple[torch.Tensor, AlignedState | None]:
        """The prompt as the backbone reads it (``duet.gepard.decode.prompt_inputs``): inputs (B, K + S, D), with
        ``null_prefix`` where the model has the voice compressor and the prompt no prefix; for aligned text input
        also the state its frames continue from (the duration predictor's layout at ``prompt.speed`` unless the
        prompt brings durations; no cache yet)."""
        prompt = self.with_prefix(prompt)
        text = self.model.embed_tokens(prompt.text_ids)  # (B, S, D)
        if not self.is_aligned:
            return prompt_inputs(text, prompt.prefix), None
        b, s = prompt.text_ids.shape
        lengths = torch.full((b,), s, dtype=torch.long, device=prompt.text_ids.device)
        durations = prompt.durations
        if durations is None:
            durations = self.duration.predict(prompt.text_ids, lengths, prompt.speed)  # (B, S)
        state = AlignedState(None, text, lengths, durations.to(text.device).float(), position=0)
        return prompt_inputs(text, prompt.prefix, state.next_input(self.aligned)), state  # SOS predicts frame 0

    @property
    def has_unconditional_path(self) -> bool:
        """Whether CFG can run: the null prefix of the voice compressor, or text dropout in training (not both
        needed; the null prefix is used when there is one)."""
        return self.qformer is not None or (self.config.text_dropout_prob > 0 and not self.is_aligned)

    def unconditional(self, prompt: GepardPrompt) -> GepardPrompt:
        """``prompt``'s CFG unconditional counterpart: the null prefix for the speaker where the model has the voice
        compressor (the report's path, §2.6.2; text and durations kept), else the text dropped."""
        if not self.has_unconditional_path:
            raise DuetError("this Gepard has no unconditional path for classifier-free guidance: train it with the "
                            "voice compressor (--voice-prefix) or, without aligned text input, --text-dropout 0.1")
        if self.qformer is None:
            return prompt.unconditional()
        return prompt.unconditional(null_prefix=self.voice_prefix(batch_size=prompt.text_ids.shape[0]))

    def with_prefix(self, prompt: GepardPrompt) -> GepardPrompt:
        """``prompt`` as this model reads it: ``null_prefix`` added where the model has the voice compressor and
        the prompt no prefix."""
        if self.qformer is None or prompt.prefix is not None:
            return prompt
        return replace(prompt, prefix=self.voice_prefix(batch_size=prompt.text_ids.shape[0]))

    def step(self, frame: torch.Tensor, state: Any) -> tuple[FrameLogits, Any]:
        """frame (B, C) -> logits for the next frame (N = 1), the state extended by one position."""
        if not isinstance(state, AlignedState):
            return self.logits(frames=frame[:, None, :], cache=state), state
        x = self.audio_interface(frame[:, None, :]).to(state.text.dtype) + state.next_input(self.aligned)  # (B, 1, D)
        hidden = run_backbone(self.model, x, cache=state.cache)
        return self.heads(hidden), state
