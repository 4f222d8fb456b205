"""Attention masks as small pure functions.

Shape legend: B batch, L sequence positions (queries = keys), Q/KV in the 4-D mask are query and key positions.

Convention: a boolean mask is True where a query MAY attend to a key. transformers 5.x takes a prepared 4-D mask
(B, 1, L, L) unchanged; with the eager kernel only an additive float mask is right (a boolean one is added as 0/1 and
silently wrong), so models hand the backbone ``additive(...)`` of a boolean mask, which sdpa accepts as well.
"""

from __future__ import annotations

import torch


def lengths_to_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """lengths (B,) -> valid (B, max_len) bool, True at positions < length (right padding)."""
    return torch.arange(max_len, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)  # (B, L)


def bidirectional_mask(valid: torch.Tensor) -> torch.Tensor:
    """Full attention with key padding: valid (B, L) bool -> allowed (B, 1, L, L) bool.

    Query i of row b may attend to key j iff key j is a real position (``valid[b, j]``); padded queries attend
    like real ones (their outputs are discarded), which keeps every row of the softmax non-empty as long as a row has
    one valid position. This is the Luna-TTS mask (report §2.4-§2.5: bidirectional over text, prompt and target).
    """
    B, L = valid.shape
    return valid[:, None, None, :].expand(B, 1, L, L)  # (B, 1, Lq, Lkv)


def additive(allowed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Boolean mask -> additive float mask: 0 where allowed, the dtype's most negative finite value elsewhere.

    A finite minimum rather than -inf, so a fully masked query row gives a uniform softmax instead of NaN.
    """
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.finfo(dtype).min)
