"""Every RNG a training step may draw from, as JSON: torch's (and CUDA's), numpy's, Python's and a trainer's own
``torch.Generator`` objects. A checkpoint keeps one such state per rank, which is what makes a resume exact; the
checkpoint module's own copy (rank 0's torch and Python states) is what a checkpoint without them falls back to.
"""

from __future__ import annotations

import random
from typing import Any, Mapping

import numpy as np
import torch


def rng_state(device: torch.device, generators: Mapping[str, torch.Generator]) -> dict[str, Any]:
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    version, py_state, py_gauss = random.getstate()
    state = {"torch": torch.get_rng_state().tolist(), "numpy": [name, keys.tolist(), pos, has_gauss, gauss],
             "python": [version, list(py_state), py_gauss]}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device).tolist()
    state["generators"] = {k: g.get_state().tolist() for k, g in generators.items()}
    return state


def set_rng_state(state: dict[str, Any], device: torch.device, generators: Mapping[str, torch.Generator]) -> None:
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    version, py_state, py_gauss = state["python"]
    random.setstate((version, tuple(py_state), py_gauss))
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(torch.tensor(state["cuda"], dtype=torch.uint8), device)
    for name, gen in generators.items():
        if name in state.get("generators", {}):
            gen.set_state(torch.tensor(state["generators"][name], dtype=torch.uint8))


def seed_all(seed: int, generators: Mapping[str, torch.Generator]) -> None:
    """Seed torch, numpy and Python with ``seed``, and each generator with its own stream derived from it."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)
    for i, gen in enumerate(generators.values()):  # streams distinct from the global one and from each other
        gen.manual_seed(seed + 1_000_003 * (i + 1))
