"""A shipped TTS model directory, whatever the family: ``config.json`` + ``model.safetensors`` + ``tokenizer.json``;
and where a model's name leads (``resolve_model``: ``<checkpoints root>/<name>`` or a directory; ``model_type``: its
family, read from ``config.json`` without loading weights).

``config.json`` starts ``{"type": FAMILY, "format_version": N, "dtype": "float16", ...}``; what follows is the
family's (``duet.gepard.checkpoint``, ``duet.luna.checkpoint``). Weights are stored as float16 (half the bytes;
small models ship in git) and read back as float32; tensor names are the family module's state-dict names, so
loading is ``load_state_dict``. Each file is written to a temporary name and renamed into place. Never pickle.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from duet.errors import DuetError

if TYPE_CHECKING:  # torch is imported where weights are read or written, so the CLI starts without it
    import torch

FILES = ("config.json", "model.safetensors", "tokenizer.json")


def write_shipped(out_dir: str | Path, kind: str, format_version: int, state: dict[str, torch.Tensor],
                  tokenizer_file: str | Path, body: dict[str, Any], dtype: torch.dtype | None = None) -> Path:
    """Write weights (floating tensors cast to ``dtype``, float16 by default), the tokenizer and ``config.json`` =
    header + ``body``."""
    import torch
    from safetensors.torch import save_file

    dtype = torch.float16 if dtype is None else dtype

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = {k: (v.to(dtype) if v.is_floating_point() else v).detach().contiguous().clone()
               for k, v in state.items()}
    tmp = out_dir / "model.safetensors.tmp"
    save_file(weights, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, out_dir / "model.safetensors")
    tmp = out_dir / "tokenizer.json.tmp"
    shutil.copyfile(tokenizer_file, tmp)
    os.replace(tmp, out_dir / "tokenizer.json")
    meta = {"type": kind, "format_version": format_version, "dtype": str(dtype).removeprefix("torch."), **body}
    tmp = out_dir / "config.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, out_dir / "config.json")
    return out_dir


def read_shipped(path: str | Path, kind: str, format_version: int,
                 family: str) -> tuple[dict[str, Any], dict[str, torch.Tensor], Any]:
    """-> (config.json, float32 weights, tokenizer) of a directory written by :func:`write_shipped`.

    ``family`` names the model in errors ("Gepard", "Luna"): a missing file, a directory of another type or format.
    """
    from safetensors.torch import load_file

    from duet.text import get_tokenizer

    path = Path(path)
    files = [path / name for name in FILES]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise DuetError(f"{path} is not a {family} checkpoint (missing {', '.join(missing)})")
    try:
        meta = json.loads(files[0].read_text())
    except json.JSONDecodeError as err:
        raise DuetError(f"{files[0]} is not JSON: {err}") from err
    if meta.get("type") != kind:
        raise DuetError(f"{path} holds a {meta.get('type')!r} checkpoint, not a {family} model")
    if meta.get("format_version") != format_version:
        raise DuetError(f"{path}: {family} checkpoint format {meta.get('format_version')} is not supported")
    weights = {k: v.float() if v.is_floating_point() else v for k, v in load_file(str(files[1])).items()}
    return meta, weights, get_tokenizer(files[2])


MODELS = ("gepard-tiny", "luna-tiny", "luna-realtime-tiny", "gepard-clone-tiny")  # `duet speak --model` knows by name
DEFAULT_MODEL = MODELS[0]  # what a bare `duet speak` speaks with and a bare `duet serve` serves


def resolve_model(name_or_path: str | Path) -> Path:
    """A shipped model name or a checkpoint directory -> the directory (with a clear error when absent)."""
    from duet.codecs.registry import checkpoints_root

    path = Path(name_or_path)
    if path.is_dir():
        return path
    shipped = checkpoints_root() / str(name_or_path)
    if (shipped / "config.json").is_file():
        return shipped
    if str(name_or_path) in MODELS:
        raise DuetError(f"model {name_or_path!r} is not in {checkpoints_root()} (this checkout does not ship it)")
    raise DuetError(f"unknown model {str(name_or_path)!r}: use one of {', '.join(MODELS)} or a checkpoint directory")


def model_type(name_or_path: str | Path) -> tuple[Path, str]:
    """-> (directory, its config.json "type") without loading any weights."""
    path = resolve_model(name_or_path)
    try:
        kind = json.loads((path / "config.json").read_text()).get("type")
    except (OSError, json.JSONDecodeError) as err:
        raise DuetError(f"{path / 'config.json'} is missing or not JSON: {err}") from err
    return path, kind
