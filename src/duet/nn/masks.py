"""Attention masks as small pure functions.

Shape legend: B batch, L sequence positions (queries = keys), Q/KV in the 4-D mask are query and key positions;
block diffusion: C condition positions, F frames per stream, B_k frames per block.

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


# -- block diffusion (Luna-TTS Realtime) -----------------------------------------------------------------------------

# Stream labels of ``block_diffusion_mask``: every position is a condition (text, prompt), a frame of a noisy block
# x_t, or a frame of a clean block x_0.
COND, NOISY, CLEAN = 0, 1, 2


def block_diffusion_mask(
    q_stream: torch.Tensor,
    q_block: torch.Tensor,
    kv_stream: torch.Tensor,
    kv_block: torch.Tensor,
    kv_valid: torch.Tensor,
) -> torch.Tensor:
    """The block-diffusion attention rule (Arriola et al. 2025 "Block Diffusion", arXiv:2503.09573, the two-stream
    mask of bd3lms; Luna-TTS report §2.6 and §3.2 "Block adaptation"), over labelled queries and keys.

    q_stream (Lq,), q_block (Lq,), kv_stream (Lkv,), kv_block (Lkv,) int64 labels (stream COND / NOISY / CLEAN, and
    the block index of a frame; ignored for conditions); kv_valid (B, Lkv) bool key padding -> allowed (B, 1, Lq, Lkv).

    Query i may attend to a valid key j iff j is a condition and i is anything (conditions are visible to every
    position), or, by parts:
      M_C    condition -> condition only: conditions never see audio (bidirectional among themselves);
      M_BD   noisy block b -> noisy block b: bidirectional within the block being denoised (block diagonal);
      M_OBC  noisy block b -> clean blocks < b: the committed past (offset block-causal); never a later block,
             never another noisy block, never its own clean copy;
      M_BC   clean block b -> clean blocks <= b: block-causal over the clean stream (what the KV cache holds).
    """
    q_s, q_b = q_stream[:, None], q_block[:, None]  # (Lq, 1)
    k_s, k_b = kv_stream[None, :], kv_block[None, :]  # (1, Lkv)
    to_cond = k_s == COND  # every query sees the conditions (M_C for condition queries)
    m_bd = (q_s == NOISY) & (k_s == NOISY) & (q_b == k_b)
    m_obc = (q_s == NOISY) & (k_s == CLEAN) & (k_b < q_b)
    m_bc = (q_s == CLEAN) & (k_s == CLEAN) & (k_b <= q_b)
    rule = to_cond | m_bd | m_obc | m_bc  # (Lq, Lkv)
    return rule[None, None] & kv_valid[:, None, None, :]  # (B, 1, Lq, Lkv)


def two_stream_labels(num_cond: int, num_frames: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels of the training sequence ``[conditions (C) | noisy frames x_t (F) | clean frames x_0 (F)]``.

    -> stream (L,), block (L,) with L = C + 2F; frame i of either stream lies in block i // block_size (conditions:
    block -1). The noisy and clean copies of a frame share its block (and, in the model, its position id).
    """
    frame_block = torch.arange(num_frames) // block_size  # (F,)
    stream = torch.cat(
        [torch.full((num_cond,), COND), torch.full((num_frames,), NOISY), torch.full((num_frames,), CLEAN)]
    )
    block = torch.cat([torch.full((num_cond,), -1), frame_block, frame_block])
    return stream, block


def two_stream_block_mask(
    cond_valid: torch.Tensor, noisy_valid: torch.Tensor, clean_valid: torch.Tensor, block_size: int
) -> torch.Tensor:
    """Training mask of block diffusion over ``[conditions | x_t | x_0]`` (see ``block_diffusion_mask``).

    cond_valid (B, C), noisy_valid (B, F), clean_valid (B, F) bool -> allowed (B, 1, L, L), L = C + 2F.
    """
    stream, block = two_stream_labels(cond_valid.shape[1], noisy_valid.shape[1], block_size)
    valid = torch.cat([cond_valid, noisy_valid, clean_valid], dim=1)  # (B, L)
    dev = valid.device
    return block_diffusion_mask(stream.to(dev), block.to(dev), stream.to(dev), block.to(dev), valid)


def streaming_block_labels(num_cond: int, num_clean: int, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Labels of the inference sequence ``[conditions (C) | clean blocks 0..n-1 | active noisy block n]``.

    -> stream (L,), block (L,), L = C + (n + 1) block_size, n = ``num_clean`` committed blocks.
    """
    clean_block = torch.arange(num_clean * block_size) // block_size
    stream = torch.cat(
        [
            torch.full((num_cond,), COND),
            torch.full((num_clean * block_size,), CLEAN),
            torch.full((block_size,), NOISY),
        ]
    )
    block = torch.cat([torch.full((num_cond,), -1), clean_block, torch.full((block_size,), num_clean)])
    return stream, block


def streaming_block_mask(cond_valid: torch.Tensor, num_clean: int, block_size: int, num_queries: int) -> torch.Tensor:
    """Inference mask of block diffusion: the last ``num_queries`` positions of
    ``[conditions | clean blocks 0..n-1 | active noisy block n]`` as queries, every position as a key.

    cond_valid (B, C) bool (committed and active frames are always real) -> allowed (B, 1, num_queries, L). With a KV
    cache holding the conditions and the committed blocks, the queries are the active block (``num_queries`` = B_k)
    or a just-committed clean block followed by the active block (2 B_k: the commit's forward is fused into the next
    block's first refinement step). It is the training mask's rows and columns of those positions: the same rule.
    """
    stream, block = streaming_block_labels(cond_valid.shape[1], num_clean, block_size)
    L = stream.shape[0]
    if not 0 < num_queries <= L:
        raise ValueError(f"num_queries must lie in 1..{L}, got {num_queries}")
    B = cond_valid.shape[0]
    valid = torch.cat([cond_valid, cond_valid.new_ones((B, L - cond_valid.shape[1]))], dim=1)  # (B, L)
    dev = valid.device
    stream, block = stream.to(dev), block.to(dev)
    return block_diffusion_mask(stream[L - num_queries :], block[L - num_queries :], stream, block, valid)
