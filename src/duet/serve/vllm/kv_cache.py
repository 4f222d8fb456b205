"""How much KV cache vLLM gets on CPU: what duet's admission limits can fill, not what the machine has.

Left alone, vLLM's CPU backend reserves a fraction of the machine's memory for its KV cache (several GiB for an
11 MB gepard-tiny) and touches all of it at start. duet admits at most ``max_num_seqs`` requests, each at most
``max_model_len`` positions long, so that is the most cache vLLM can ever fill:

    bytes = max_num_seqs x max_model_len x bytes per position,   bytes per position = layers x 2 (K, V) x
                                                                  kv heads x head dim x dtype size

capped by the built-in engine's cache budget (``SchedulerConfig.cache_budget_bytes``, ``--cache-budget-mib``) and
never below one full-length request (vLLM refuses to start with less) or :data:`FLOOR_BYTES`. An explicit setting
wins: ``VLLM_CPU_KVCACHE_SPACE`` (GiB, read by vLLM itself) over ``VLLMConfig.kv_cache_gib`` over the computed size.
"""

from __future__ import annotations

from typing import Mapping

KV_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"
FLOOR_BYTES = 32 * 1024**2  # room for vLLM's block rounding and a few short requests on the smallest model


def admitted_kv_bytes(bytes_per_position: int, max_num_seqs: int, max_model_len: int, budget_bytes: int) -> int:
    """The cache every admitted request can fill at its longest, capped by the budget, floored at one full-length
    request and :data:`FLOOR_BYTES`."""
    one_request = max_model_len * bytes_per_position
    return max(min(max_num_seqs * one_request, budget_bytes), one_request, FLOOR_BYTES)


def kv_cache_memory_bytes(bytes_per_position: int, max_num_seqs: int, max_model_len: int, budget_bytes: int,
                          kv_cache_gib: float | None, environ: Mapping[str, str]) -> int | None:
    """vLLM's ``kv_cache_memory_bytes`` for duet's limits: None when ``VLLM_CPU_KVCACHE_SPACE`` is set (vLLM reads
    it itself and it wins), ``kv_cache_gib`` when the user gave it, else :func:`admitted_kv_bytes`."""
    if environ.get(KV_SPACE_ENV):
        return None
    if kv_cache_gib is not None:
        return int(kv_cache_gib * 1024**3)
    return admitted_kv_bytes(bytes_per_position, max_num_seqs, max_model_len, budget_bytes)
