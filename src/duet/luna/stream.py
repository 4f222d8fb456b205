"""Luna-TTS Realtime streaming generation (report §2.6.2 "streaming execution", §5.1; DESIGN.md §B).

Invariant (§2.6.2): committed blocks are immutable context; only the active block is refined.

    session = KVBlockSession(model, text_ids, prompt)   # the conditions' KV cache, built once
    for each block n = 0, 1, ...:
        x = B_k frames, all masked
        for s = 1..S:                                    # MaskGIT refinement (decode.unmask_step)
            logits, end = session.step(x)                # the active block only, over the cached context
            s = 1: e = end_frame(end)                    # the learned end-of-speech decision (realtime.py)
            commit cells of frames [0, e) by the cosine schedule; frames [e, B_k) stay masked
        yield frames [0, e) of x                         # handed out at once (audio too, with a codec)
        e < B_k  -> stop: "stop" (the end head)          # e = 0: speech ended on the block boundary
        bound    -> stop: "bound"
        session.commit(x)                                # block n joins the KV cache, never to change again

``stream_blocks`` is a pure loop over a ``BlockSession`` (tested with fake sessions, like ``decode.py`` with fake
logits functions); ``KVBlockSession`` is the real one over a ``LunaRealtime`` with a transformers KV cache.

KV cache. The prefill runs the conditions under the training mask restricted to them (conditions see conditions).
Each refinement step runs the active block's B_k frames against the cache (``masks.streaming_block_mask``: the
block sees itself, the committed blocks and the conditions) and then crops them off again, so the cache only ever
holds conditions and committed blocks. A committed block's own KV (clean block n under the block-causal mask: it
sees clean blocks <= n) is computed in the same forward as the next block's first step (queries [clean n | active
n + 1], 2 B_k positions), which saves one forward per block; when the stream ends there is no such forward.
With CFG the session holds two rows, conditional and unconditional (text dropped, prompt kept: Luna §2.5), each with
its own cache, in one batch.

Shape legend: R session rows (1, or 2 with CFG), B_k frames per block, Q codebooks, K codes per codebook, S text
tokens, P prompt frames, D model width.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable, Iterator, Protocol

import torch

from duet.codecs.base import Codec
from duet.errors import DuetError
from duet.finish import BOUND, STOP
from duet.luna.decode import DecodeConfig, guidance_rows, guide, unmask_step
from duet.luna.grid import codes_from_grid
from duet.luna.model import segment_layout
from duet.luna.realtime import LunaRealtime, RealtimeLogits
from duet.nn.backbone import new_cache, run_backbone
from duet.nn.masks import additive, streaming_block_mask, two_stream_block_mask


@dataclass(frozen=True)
class StreamConfig:
    decode: DecodeConfig = DecodeConfig(steps=8)  # S per block; §5.2 deploys 8 steps; sampling and CFG as Luna's
    max_frames: int = 750  # serving bound on the whole utterance (30 s at 25 Hz; §2.6.2 "an explicit maximum")
    end_threshold: float = 0.5  # a frame is past the end when the end head's probability exceeds this
    min_frames: int = 0  # floor: the end head is not read before this frame of the utterance (0: from the start)

    def __post_init__(self) -> None:
        if self.max_frames <= 0:
            raise DuetError(f"max_frames must be positive, got {self.max_frames}")
        if self.min_frames < 0:
            raise DuetError(f"min_frames must be >= 0, got {self.min_frames}")
        if not 0.0 < self.end_threshold < 1.0:
            raise DuetError(f"end_threshold must lie in (0, 1), got {self.end_threshold}")


@dataclass(frozen=True)
class StreamChunk:
    index: int  # block number n = 0, 1, ...
    start: int  # first frame of the chunk in the utterance (n B_k)
    codes: torch.Tensor  # (Q, n_frames) int64: B_k frames, fewer in the last chunk (possibly none)
    audio: torch.Tensor | None  # (samples,) float32 when a codec was given; the last chunk includes the flush
    end: str | None  # None while more chunks follow; STOP (the end head placed the end inside the active block, or at
    # its first frame) or BOUND (``max_frames`` was reached first) on the last one (``duet.finish``)


@dataclass(frozen=True)
class StreamResult:
    codes: torch.Tensor  # (Q, T) the whole utterance
    audio: torch.Tensor | None  # (samples,)
    end: str
    num_chunks: int


class BlockSession(Protocol):
    """What ``stream_blocks`` needs of a model: refine-step logits for the active block, and a commit."""

    block_size: int  # B_k
    num_codebooks: int  # Q
    mask_id: int  # K
    num_rows: int  # R: 1, or 2 (conditional, unconditional) for CFG

    def step(self, block: torch.Tensor) -> RealtimeLogits:
        """block (R, B_k, Q) in 0..K -> code logits (R, B_k, Q, K) and end logits (R, B_k) of the active block."""
        ...

    def commit(self, block: torch.Tensor) -> None:
        """block (B_k, Q) clean codes: append it to the immutable context (the next ``step`` sees it)."""
        ...


def end_frame(end_logits: torch.Tensor, threshold: float = 0.5, first: int = 0) -> int:
    """end_logits (B_k,) -> the first frame at or after ``first`` whose end probability exceeds ``threshold``, or
    B_k if none does (frames before ``first`` are speech whatever the head says: the utterance's floor)."""
    past = torch.sigmoid(end_logits.float()) > threshold  # (B_k,)
    past[: max(first, 0)] = False
    hits = past.nonzero()
    return int(hits[0, 0]) if hits.numel() else end_logits.shape[0]


def stream_blocks(
    session: BlockSession, cfg: StreamConfig = StreamConfig(), generator: torch.Generator | None = None
) -> Iterator[StreamChunk]:
    """Generate one utterance block by block; yields a ``StreamChunk`` (audio None) as soon as a block is final."""
    dcfg, bk, Q, mask_id = cfg.decode, session.block_size, session.num_codebooks, session.mask_id
    rows = guidance_rows(1, dcfg).shape[0]
    if session.num_rows != rows:
        raise DuetError(f"the session has {session.num_rows} rows, cfg_scale={dcfg.cfg_scale} needs {rows}")
    produced, index = 0, 0
    while True:
        room = cfg.max_frames - produced
        tokens = torch.full((1, bk, Q), mask_id, dtype=torch.long)  # (1, B_k, Q)
        still = torch.zeros_like(tokens, dtype=torch.bool)
        e_model = e = bk
        num_cells = torch.zeros(1, dtype=torch.long)  # set at step 1
        for s in range(1, dcfg.steps + 1):
            out = session.step(tokens.expand(rows, -1, -1))
            if s == 1:
                tokens, still = tokens.to(out.codes.device), still.to(out.codes.device)  # the session's device
                # conditional row (CFG is on codes only); no end before the utterance's floor
                e_model = end_frame(out.end[0], cfg.end_threshold, cfg.min_frames - produced)
                e = min(e_model, room)
                still[:, :e] = True  # frames past the end stay masked: how training shows them
                num_cells = still.flatten(1).sum(dim=1)  # (1,)
                if e == 0:
                    break
            tokens, commit = unmask_step(guide(out.codes, 1, dcfg), tokens, still, num_cells, s, dcfg, generator)
            still &= ~commit
        block = tokens[0, :e]  # (e, Q)
        if e_model < bk and e_model <= room:
            end: str | None = STOP
        elif produced + e >= cfg.max_frames:
            end = BOUND
        else:
            end = None
            session.commit(block.clone())
        yield StreamChunk(index, produced, block.T.clone(), None, end)  # (Q, e)
        if end is not None:
            return
        produced, index = produced + e, index + 1


def stream_speech(
    model: LunaRealtime,
    text_ids: torch.Tensor,
    prompt: torch.Tensor | None = None,
    cfg: StreamConfig = StreamConfig(),
    codec: Codec | None = None,
    generator: torch.Generator | None = None,
    durations: torch.Tensor | None = None,
) -> Iterator[StreamChunk]:
    """text_ids (S,), optional clean prompt grid (P, Q), ``durations`` (S,) for an aligned model -> chunks; with a
    codec, each chunk's audio comes from the codec's ``stream_decoder`` fed that chunk's codes the moment the block
    is committed."""
    session = KVBlockSession(model, text_ids, prompt, guidance=cfg.decode.cfg_scale != 1.0, durations=durations)
    decoder = codec.stream_decoder() if codec is not None else None
    for chunk in stream_blocks(session, cfg, generator):
        if decoder is not None:
            codes = codes_from_grid(model.config.luna, chunk.codes.T)  # grid (Q, n) -> codec layout (Q_c, n)
            parts = [decoder.push(codes[None])[0]] if chunk.codes.shape[1] else []  # (samples,)
            if chunk.end is not None:
                parts.append(decoder.flush()[0])
            audio = torch.cat(parts) if parts else torch.zeros(0)
            chunk = replace(chunk, audio=audio.float())
        yield chunk


def collect(chunks: Iterable[StreamChunk]) -> StreamResult:
    """Drain a stream: the utterance's codes (Q, T), audio (if any) and how it ended."""
    got = list(chunks)
    if not got or got[-1].end is None:
        raise DuetError("the stream ended without a final chunk")
    audio = None if got[0].audio is None else torch.cat([c.audio for c in got])
    return StreamResult(torch.cat([c.codes for c in got], dim=1), audio, got[-1].end, len(got))


@dataclass(frozen=True)
class BlockQuery:
    """One refinement step's input to the backbone (``KVBlockSession.query``); n_q = B_k, or 2 B_k when the step
    also computes a just-committed block's KV; L = positions in the session's cache."""

    x: torch.Tensor  # (R, n_q, D) embedded queries: [the pending clean block] + the active block
    positions: torch.Tensor  # (R, n_q) position ids
    allowed: torch.Tensor  # (R, 1, n_q, L + n_q) bool: the keys, [cache | queries], each query may attend to


class KVBlockSession:
    """One request's KV-cached state on a ``LunaRealtime``: conditions (built once), then committed blocks."""

    def __init__(
        self,
        model: LunaRealtime,
        text_ids: torch.Tensor,
        prompt: torch.Tensor | None = None,
        guidance: bool = True,
        durations: torch.Tensor | None = None,
    ):
        cfg = model.config.luna
        if cfg.is_aligned and (durations is None or durations.shape != text_ids.shape):
            raise DuetError("this model reads aligned text input: it needs one duration per text token")
        self.model = model
        self.block_size, self.num_codebooks, self.mask_id = model.block_size, cfg.num_codebooks, cfg.mask_id
        self.num_rows = R = 2 if guidance else 1
        device = next(model.parameters()).device
        if text_ids.dim() != 1:
            raise DuetError(f"text_ids must be (S,), got shape {tuple(text_ids.shape)}")
        if prompt is None:
            prompt = torch.zeros((0, cfg.num_codebooks), dtype=torch.long)
        if prompt.dim() != 2 or prompt.shape[1] != cfg.num_codebooks:
            raise DuetError(f"prompt must be (P, {cfg.num_codebooks}), got shape {tuple(prompt.shape)}")
        if prompt.numel() and not (0 <= int(prompt.min()) and int(prompt.max()) < cfg.codebook_size):
            raise DuetError(f"the prompt grid must be clean codes in 0..{cfg.codebook_size - 1}")
        S, P = text_ids.shape[0], prompt.shape[0]
        text_lengths = torch.tensor([S, 0][:R], device=device)  # row 1: the null text condition (CFG)
        valid, positions = segment_layout(
            text_lengths, torch.full((R,), P, device=device), torch.zeros(R, dtype=torch.long, device=device), S, P, 0
        )  # (R, C)
        self._cond_valid = valid
        self._offset = valid.sum(dim=1, keepdim=True)  # (R, 1): frame i sits at position offset + i
        self._cache = new_cache(model.luna.model)
        self._clean_blocks = 0  # blocks whose KV is in the cache
        self._pending: torch.Tensor | None = None  # a committed block whose KV the next step computes
        self._prompt_frames = P
        self._layout = None  # aligned models: (text embedding (R, S, D), text lengths (R,), durations (R, S))
        with torch.no_grad():
            text = text_ids.to(device)[None].expand(R, -1).masked_fill(~valid[:, :S], 0)  # (R, S)
            text_x = model.luna.model.embed_tokens(text)  # (R, S, D)
            if cfg.is_aligned:
                self._layout = (text_x, text_lengths, durations.float().to(device)[None].expand(R, -1))
        if S + P:
            with torch.no_grad():
                grid = prompt.to(device)[None].expand(R, -1, -1)  # (R, P, Q)
                frames = model.luna.embed_grid(grid) + self._aligned(0, P)  # (R, P, D)
                x = torch.cat([text_x, frames], dim=1)  # (R, C, D)
                empty = valid.new_zeros((R, 0))
                mask = additive(two_stream_block_mask(valid, empty, empty, self.block_size), x.dtype)  # conditions
                run_backbone(model.luna.model, x, cache=self._cache, position_ids=positions, attention_mask=mask)

    def _aligned(self, first: int, n: int) -> torch.Tensor | float:
        """The layout vectors (R, n, D) of utterance frames [first, first + n) (prompt frames first), or 0."""
        if self._layout is None or n == 0:
            return 0.0
        text_x, lengths, durations = self._layout
        R = text_x.shape[0]
        frames = first + torch.arange(n, device=text_x.device)[None].expand(R, -1)  # (R, n)
        a = self.model.luna.aligned(text_x, lengths.clamp(min=1), durations, frames)  # (R, n, D)
        return a * (lengths > 0)[:, None, None].to(a.dtype)  # the null-text row has no layout

    @property
    def committed_frames(self) -> int:
        return (self._clean_blocks + (self._pending is not None)) * self.block_size

    @property
    def cache(self):
        """The transformers cache: conditions, then committed blocks (tests read it; do not modify)."""
        return self._cache

    @torch.no_grad()
    def step(self, block: torch.Tensor) -> RealtimeLogits:
        q = self.query(block)
        h = run_backbone(self.model.luna.model, q.x, cache=self._cache, position_ids=q.positions,
                         attention_mask=additive(q.allowed, q.x.dtype))  # (R, n_q, D)
        self._cache.crop(-self.block_size)  # the active block never stays in the cache
        self._clean_blocks, self._pending = self._clean_blocks + (self._pending is not None), None
        return self.model.heads(h[:, -self.block_size :])

    @torch.no_grad()
    def query(self, block: torch.Tensor) -> BlockQuery:
        """What ``step`` feeds the backbone for ``block`` (R, B_k, Q), against the cache as it is; changes nothing.
        ``duet.luna.stream_batch`` runs the queries of several sessions in one forward pass."""
        bk, R = self.block_size, self.num_rows
        if block.shape != (R, bk, self.num_codebooks):
            raise DuetError(f"active block must be ({R}, {bk}, {self.num_codebooks}), got {tuple(block.shape)}")
        luna = self.model.luna
        device = self._offset.device
        parts = [block.to(device)]
        if self._pending is not None:
            parts.insert(0, self._pending.to(device)[None].expand(R, -1, -1))
        x = luna.embed_grid(torch.cat(parts, dim=1))  # (R, n_q, D): [pending clean block] + active block
        n_q = x.shape[1]
        num_clean = self._clean_blocks + (self._pending is not None)
        first = (num_clean + 1) * bk - n_q  # frame index of the first query
        x = x + self._aligned(self._prompt_frames + first, n_q)
        positions = self._offset + first + torch.arange(n_q, device=device)[None, :]  # (R, n_q)
        allowed = streaming_block_mask(self._cond_valid, num_clean, bk, n_q)  # (R, 1, n_q, L + n_q)
        return BlockQuery(x, positions, allowed)

    def absorb(self, pending: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """After a forward pass of this session's ``query`` run elsewhere (``duet.luna.stream_batch``): the pending
        clean block's keys and values, (R, H_kv, B_k, hd) per layer, join the cache, as ``step`` leaves it. An
        empty list when no block was pending."""
        if (self._pending is None) != (not pending):
            raise DuetError("absorb takes the pending block's keys and values, and only those")
        for layer, (keys, values) in enumerate(pending):
            self._cache.update(keys, values, layer)
        self._clean_blocks, self._pending = self._clean_blocks + (self._pending is not None), None

    def commit(self, block: torch.Tensor) -> None:
        if self._pending is not None:
            raise DuetError("a block is already waiting to be committed; call step first")
        if block.shape != (self.block_size, self.num_codebooks):
            raise DuetError(f"only whole blocks ({self.block_size}, {self.num_codebooks}) become context, "
                            f"got {tuple(block.shape)}")
        if int(block.min()) < 0 or int(block.max()) >= self.mask_id:
            raise DuetError("a committed block must be clean codes (no mask token)")
        self._pending = block.clone()
