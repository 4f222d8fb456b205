"""Gepard's per-step sampling inside vLLM, as a vLLM (v1) logits processor.

``GepardForVLLM.compute_logits`` returns each row's raw head outputs in the first 217 columns of a
``(B, vocab)`` tensor (216 channel logits + the stop logit; the rest -inf). This processor runs next in vLLM's
sampler, where it knows each row's request and sampling parameters (``update_state``), and does what
``duet.gepard.generate`` / the built-in engine do per step:

1. stop: p = sigmoid(stop logit); above the request's ``stop_threshold`` the row emits ``STOP_ID`` (the frame that
   would come next is training's phantom frame, Gepard §2.5 / §3.3);
2. otherwise sample the 32 channels with ``duet.gepard.sampling.sample_requests`` (temperature, top-k, top-p; Gumbel
   noise from the request's own seeded generator, exactly as the built-in engine draws it, so a seed gives the same
   frames on both engines), write the frame into the frame bank and emit its slot id (``frames.py``);
3. return one-hot logits, so vLLM's own sampler (run greedy) picks that id.

Duet's parameters travel in ``SamplingParams.extra_args["duet"]`` (``engine.request_params``); a request without
them decodes greedily with threshold 0.5. Registered per engine (``LLM(logits_processors=[GepardFrameSampler])``),
never through the global ``vllm.logits_processors`` entry point, so other models in the same vLLM never see it.

Shape legend: B rows, C channels (32), Lmax widest alphabet (8).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.interface import MoveDirectionality

from duet.gepard.heads import pad_channels
from duet.gepard.sampling import sample_requests
from duet.sampling import SamplingParams
from duet.serve.vllm.frames import EXTRA_KEY, STOP_ID, bank_for


@dataclass(eq=False)
class _Row:
    params: SamplingParams
    generator: torch.Generator
    key: int
    output_ids: list[int]  # vLLM's live list of this request's output token ids


class GepardFrameSampler(LogitsProcessor):
    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        hf = vllm_config.model_config.hf_config
        self.active = "GepardForTTS" in (getattr(hf, "architectures", None) or [])
        self.device = device
        self.rows: dict[int, _Row] = {}
        if self.active:
            self.levels = tuple(hf.channel_levels)
            self.num_logits = sum(self.levels)
            self.bank = bank_for(getattr(hf, "frame_bank_path", None), hf.frame_slots, len(self.levels))

    def is_argmax_invariant(self) -> bool:
        return False  # it decides the token outright

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None or not self.active:
            return
        for index in batch_update.removed:
            self.rows.pop(index, None)
        for index, params, _, output_ids in batch_update.added:
            extra = (params.extra_args or {}).get(EXTRA_KEY, {})
            duet = SamplingParams(**{k: v for k, v in extra.items() if k in _PARAM_FIELDS})
            key = int(extra.get("key", 0))
            if output_ids and not self.bank.check(output_ids, key):
                # vLLM preempted this request and now recomputes it from its token ids, but their slots were reused
                raise RuntimeError("a preempted Gepard request's frames were overwritten in the frame bank; give vLLM "
                                   "enough KV cache for max_num_seqs x max_model_len or export with more frame slots")
            generator = torch.Generator(device=self.device).manual_seed(duet.seed if duet.seed is not None else 0)
            self.rows[index] = _Row(duet, generator, key, output_ids)
        for a, b, direction in batch_update.moved:
            row_a, row_b = self.rows.pop(a, None), self.rows.pop(b, None)
            if row_a is not None:
                self.rows[b] = row_a
            if direction == MoveDirectionality.SWAP and row_b is not None:
                self.rows[a] = row_b

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.active:
            return logits
        b = logits.shape[0]
        rows = [self.rows.get(i) for i in range(b)]  # None: a row vLLM runs without a request (warm-up)
        params = [r.params if r is not None else _GREEDY for r in rows]
        generators = [r.generator if r is not None else torch.Generator(device=self.device) for r in rows]
        raw = logits[:, : self.num_logits + 1].float()  # (B, 217)
        p_stop = torch.sigmoid(raw[:, self.num_logits])  # (B,)
        threshold = torch.tensor([p.stop_threshold for p in params], device=logits.device)
        stop = p_stop > threshold  # (B,)
        frames = sample_requests(pad_channels(raw[:, : self.num_logits], self.levels), params, generators)  # (B, C)
        keys = torch.tensor([r.key if r is not None else 0 for r in rows])
        index = torch.tensor([len(r.output_ids) if r is not None else 0 for r in rows])
        ids = self.bank.store(frames, keys, index).to(logits.device)  # (B,)
        ids = torch.where(stop, torch.full_like(ids, STOP_ID), ids)
        out = torch.full_like(logits, float("-inf"))
        out[torch.arange(b, device=logits.device), ids] = 0.0
        return out


_GREEDY = SamplingParams(temperature=0.0)
_PARAM_FIELDS = ("temperature", "top_k", "top_p", "stop_threshold", "seed")
