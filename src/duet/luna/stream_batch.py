"""One refinement step of several Luna Realtime sessions in one forward pass (a serving engine's batch).

Each ``KVBlockSession`` holds its own KV cache, whose length (conditions + committed blocks) differs from session to
session, and its step's queries are its active block, or a just-committed block and the active block (n_q = B_k or
2 B_k, ``stream.KVBlockSession.step``). :func:`step_sessions` groups the sessions by n_q (so no query is padding)
and runs each group as one batch:

1. every session's ``query`` (inputs, position ids, allowed keys) is built as for its own step;
2. the rows' caches are stacked right-padded to the longest, L_max, into one stock ``DynamicCache``, so keys
   [0, L_max) are cached positions (or padding) and [L_max, L_max + n_q) the queries;
3. each row's mask is its own ``allowed`` placed on those columns; padding columns are allowed to nobody, so a row
   attends to exactly the keys of its own step (additive mask: a padded key's weight is exp(min) = 0);
4. the heads read every row's active block; a session whose step computed a committed block's KV takes those
   positions of the batch's cache into its own (``KVBlockSession.absorb``), as its own step keeps them.

Nothing of a session changes unless the whole group's forward succeeded. A row's logits equal its solo step's up
to float rounding (the padded shapes may reduce in another order), the same batch invariance
``duet.tts.luna.LunaRuntime`` names for Luna's padded passes.

Shape legend: R rows of a session (1, or 2 with CFG), B_k frames per block, Q codebooks, K codes per codebook, D
model width, H_kv key/value heads, hd head_dim, L cached positions.
"""

from __future__ import annotations

from typing import Sequence

import torch

from duet.errors import DuetError
from duet.luna.realtime import RealtimeLogits
from duet.luna.stream import BlockQuery, KVBlockSession
from duet.nn.backbone import new_cache, run_backbone
from duet.nn.masks import additive


@torch.no_grad()
def step_sessions(sessions: Sequence[KVBlockSession], blocks: Sequence[torch.Tensor]) -> list[RealtimeLogits]:
    """``[s.step(b) for s, b in zip(sessions, blocks)]`` with one forward pass per query length: blocks (R, B_k, Q)
    of each session -> its logits, codes (R, B_k, Q, K) and end (R, B_k). The sessions share one model."""
    if len(sessions) != len(blocks):
        raise DuetError(f"{len(sessions)} sessions and {len(blocks)} blocks")
    if len({id(s.model) for s in sessions}) > 1:
        raise DuetError("sessions of one batch must share their model")
    if len(sessions) == 1:
        return [sessions[0].step(blocks[0])]
    queries = [s.query(b) for s, b in zip(sessions, blocks)]
    groups: dict[int, list[int]] = {}
    for i, q in enumerate(queries):
        groups.setdefault(q.x.shape[1], []).append(i)
    out: list[RealtimeLogits | None] = [None] * len(sessions)
    results = {}
    for members in groups.values():  # every forward first: a failure leaves every session as it was
        results[tuple(members)] = _forward([sessions[i] for i in members], [queries[i] for i in members])
    for members, (logits, pending) in results.items():
        for i, piece, kv in zip(members, logits, pending):
            sessions[i].absorb(kv)
            out[i] = piece
    return out  # type: ignore[return-value]


def _forward(sessions: list[KVBlockSession], queries: list[BlockQuery],
             ) -> tuple[list[RealtimeLogits], list[list[tuple[torch.Tensor, torch.Tensor]]]]:
    """One forward pass over sessions whose queries have one length n_q -> (each session's logits, each session's
    pending block's keys and values per layer, empty when it had none)."""
    model = sessions[0].model
    bk = sessions[0].block_size
    n_q = queries[0].x.shape[1]
    rows = [q.x.shape[0] for q in queries]  # R per session
    lengths = [s.cache.get_seq_length() for s in sessions]  # L per session
    L = max(lengths)
    x = torch.cat([q.x for q in queries])  # (sum R, n_q, D)
    positions = torch.cat([q.positions for q in queries])  # (sum R, n_q)
    allowed = torch.zeros((x.shape[0], 1, n_q, L + n_q), dtype=torch.bool, device=x.device)  # (sum R, 1, n_q, L+n_q)
    first = sessions[0].cache.layers[0].keys  # (R, H_kv, L, hd)
    shape = (x.shape[0], first.shape[1], L, first.shape[3])  # (sum R, H_kv, L, hd): every row right-padded to L
    keys = [first.new_zeros(shape) for _ in sessions[0].cache.layers]
    values = [first.new_zeros(shape) for _ in sessions[0].cache.layers]
    row = 0
    for s, q, r, n in zip(sessions, queries, rows, lengths):
        allowed[row : row + r, :, :, :n] = q.allowed[..., :n]  # its cached positions
        allowed[row : row + r, :, :, L:] = q.allowed[..., n:]  # its queries
        for index, layer in enumerate(s.cache.layers):
            keys[index][row : row + r, :, :n] = layer.keys
            values[index][row : row + r, :, :n] = layer.values
        row += r
    cache = new_cache(model.luna.model)
    for index in range(len(keys)):
        cache.update(keys[index], values[index], index)
    h = run_backbone(model.luna.model, x, cache=cache, position_ids=positions,
                     attention_mask=additive(allowed, x.dtype))  # (sum R, n_q, D)
    heads = model.heads(h[:, -bk:])  # codes (sum R, B_k, Q, K), end (sum R, B_k)
    logits, pending, row = [], [], 0
    for r in rows:
        logits.append(RealtimeLogits(heads.codes[row : row + r], heads.end[row : row + r]))
        if n_q > bk:  # the committed block's KV sits at [L, L + B_k) of these rows
            pending.append([(layer.keys[row : row + r, :, L : L + bk], layer.values[row : row + r, :, L : L + bk])
                            for layer in cache.layers])
        else:
            pending.append([])
        row += r
    return logits, pending

