"""Luna checkpoints on disk: ``config.json`` (one named section per model kind) + ``model.safetensors``.

Tensor names equal the module's state-dict names, so loading is ``load_state_dict`` and nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from duet.errors import DuetError


def write_checkpoint(directory: str | Path, section: str, config: dict, state: dict[str, torch.Tensor]) -> Path:
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({section: config}, indent=2))
    save_file({k: v.detach().contiguous() for k, v in state.items()}, str(directory / "model.safetensors"))
    return directory


def read_checkpoint(directory: str | Path, section: str, map_location: str = "cpu") -> tuple[dict, dict]:
    """-> (config section, state dict); DuetError when the folder is not a checkpoint of this kind."""
    from safetensors.torch import load_file

    directory = Path(directory)
    cfg_file, weights = directory / "config.json", directory / "model.safetensors"
    if not cfg_file.is_file() or not weights.is_file():
        raise DuetError(f"{directory} is not a duet checkpoint (needs config.json and model.safetensors)")
    raw = json.loads(cfg_file.read_text())
    if section not in raw:
        raise DuetError(f"{cfg_file} has no {section!r} section; found: {', '.join(raw) or 'nothing'}")
    return raw[section], load_file(str(weights), device=map_location)
