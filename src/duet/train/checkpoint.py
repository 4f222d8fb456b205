"""Atomic training checkpoints without pickle: safetensors for every tensor, JSON for everything else.

A checkpoint is a directory ``RUN/checkpoints/step_00001234/`` holding
- ``model.safetensors``: each module's ``state_dict`` under ``<name>.``;
- ``optim.safetensors``: each optimizer's per-parameter state under ``<name>.state.<index>.<key>``, and the RNG
  states (``rng.torch``, ``rng.<generator name>``) as uint8 tensors;
- ``state.json``: step, the optimizers' param groups and non-tensor state, Python's ``random`` state, and whatever
  the training loop adds (config, counters).
It is written to ``step_X.tmp`` and renamed into place, then ``latest`` (a one-line text file) is replaced
atomically, so a crash at any moment leaves the previous checkpoint loadable. Older ones beyond ``keep`` go.
Restoring all of it makes the next step bit-identical to an uninterrupted run (``tests/train``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from duet.errors import DuetError

LATEST = "latest"


def _flatten_optimizer(name: str, opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for index, state in sd["state"].items():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                tensors[f"{name}.state.{index}.{key}"] = value.detach().contiguous().clone()
            else:
                scalars.setdefault(str(index), {})[key] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _unflatten_optimizer(name: str, opt: torch.optim.Optimizer, tensors: dict[str, torch.Tensor],
                         meta: dict[str, Any]) -> None:
    state: dict[int, dict[str, Any]] = {}
    prefix = f"{name}.state."
    for key, value in tensors.items():
        if key.startswith(prefix):
            index, field = key[len(prefix):].split(".", 1)
            state.setdefault(int(index), {})[field] = value
    for index, fields in meta["scalars"].items():
        state.setdefault(int(index), {}).update(fields)
    groups = meta["param_groups"]
    for group in groups:  # JSON turned tuples into lists; Adam's betas unpack either way, keep types tidy
        for key, value in group.items():
            if isinstance(value, list) and key != "params":
                group[key] = tuple(value)
    opt.load_state_dict({"state": state, "param_groups": groups})


def save_checkpoint(run_dir: str | Path, step: int, modules: dict[str, nn.Module],
                    optimizers: dict[str, torch.optim.Optimizer], generators: dict[str, torch.Generator] | None = None,
                    extra: dict[str, Any] | None = None, keep: int = 2) -> Path:
    """Write checkpoint ``step`` atomically and point ``latest`` at it; returns its directory."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step_{step:08d}"
    tmp = root / f"step_{step:08d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()

    weights = {f"{name}.{k}": v.detach().contiguous().clone()
               for name, module in modules.items() for k, v in module.state_dict().items()}
    save_file(weights, str(tmp / "model.safetensors"))

    tensors: dict[str, torch.Tensor] = {"rng.torch": torch.get_rng_state()}
    for gname, gen in (generators or {}).items():
        tensors[f"rng.{gname}"] = gen.get_state()
    optim_meta = {}
    for name, opt in optimizers.items():
        t, meta = _flatten_optimizer(name, opt)
        tensors.update(t)
        optim_meta[name] = meta
    save_file(tensors, str(tmp / "optim.safetensors"))

    py_version, py_state, py_gauss = random.getstate()
    state = {"step": step, "optimizers": optim_meta, "python_random": [py_version, list(py_state), py_gauss],
             "extra": extra or {}}
    with open(tmp / "state.json", "w") as fh:
        json.dump(state, fh)
        fh.flush()
        os.fsync(fh.fileno())

    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    pointer = root / f"{LATEST}.tmp"
    pointer.write_text(final.name + "\n")
    os.replace(pointer, root / LATEST)

    done = sorted(p for p in root.glob("step_*") if p.is_dir() and not p.name.endswith(".tmp"))
    for old in done[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The directory ``latest`` points at, or None when the run has no checkpoint yet."""
    pointer = Path(run_dir) / "checkpoints" / LATEST
    if not pointer.is_file():
        return None
    path = pointer.parent / pointer.read_text().strip()
    if not (path / "state.json").is_file():
        raise DuetError(f"checkpoint pointer {pointer} names {path.name}, which is incomplete or missing")
    return path


def read_state(ckpt_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(ckpt_dir) / "state.json").read_text())


def load_weights(ckpt_dir: str | Path, name: str) -> dict[str, torch.Tensor]:
    """One module's state dict from a checkpoint (e.g. the generator, for export)."""
    prefix = f"{name}."
    weights = load_file(str(Path(ckpt_dir) / "model.safetensors"))
    return {k[len(prefix):]: v for k, v in weights.items() if k.startswith(prefix)}


def load_checkpoint(ckpt_dir: str | Path, modules: dict[str, nn.Module],
                    optimizers: dict[str, torch.optim.Optimizer],
                    generators: dict[str, torch.Generator] | None = None) -> dict[str, Any]:
    """Restore modules, optimizers and RNG states in place; returns the JSON state (step, extra).

    A generator whose state the checkpoint does not hold keeps its own."""
    ckpt_dir = Path(ckpt_dir)
    state = read_state(ckpt_dir)
    for name, module in modules.items():
        module.load_state_dict(load_weights(ckpt_dir, name), strict=True)
    tensors = load_file(str(ckpt_dir / "optim.safetensors"))
    for name, opt in optimizers.items():
        if name not in state["optimizers"]:
            continue  # an optimizer created after this checkpoint (e.g. the discriminator's) starts fresh
        _unflatten_optimizer(name, opt, tensors, state["optimizers"][name])
    torch.set_rng_state(tensors["rng.torch"])
    for gname, gen in (generators or {}).items():
        if f"rng.{gname}" in tensors:  # else its writer kept the state elsewhere (the loop: per-rank JSON)
            gen.set_state(tensors[f"rng.{gname}"])
    version, py_state, gauss = state["python_random"]
    random.setstate((version, tuple(py_state), gauss))
    return state
