"""The one writer and reader of a shipped checkpoint directory, for models and codecs alike.

A directory holds ``config.json`` (``{"type": KIND, "format_version": N, "dtype": "float16", ...}`` and whatever the
kind adds) and ``model.safetensors`` (floating tensors stored as ``dtype``, float16 by default: half the bytes, so
small models ship in git; read back as float32). Every file is written to a temporary name and renamed into place,
readable by everyone. Never pickle: no ``torch.load``, no ``.bin``.

Where a name leads (``<checkpoints root>/<name>``): :func:`checkpoints_root`, ``$DUET_CHECKPOINTS`` when set, else
the ``checkpoints/`` directory of the source checkout this package lives in.
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

CONFIG, WEIGHTS = "config.json", "model.safetensors"


def checkpoints_root() -> Path:
    env = os.environ.get("DUET_CHECKPOINTS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "checkpoints"  # src/duet/checkpoint_dir.py -> repo root


def _replace_atomically(target: Path, write) -> None:
    """``write(tmp)`` then rename into ``target``, mode 0644 (safetensors creates files owner-only)."""
    tmp = target.with_name(target.name + ".tmp")
    write(tmp)
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)


def write_checkpoint(out_dir: str | Path, kind: str, format_version: int, state: dict[str, torch.Tensor],
                     body: dict[str, Any], dtype: torch.dtype | None = None,
                     extra_files: dict[str, str | Path] | None = None) -> Path:
    """Write ``state`` (floating tensors cast to ``dtype``, float16 by default), each of ``extra_files`` (name in the
    directory -> source file, e.g. a tokenizer) and ``config.json`` = header + ``body``, config last; -> the directory."""
    import torch
    from safetensors.torch import save_file

    dtype = torch.float16 if dtype is None else dtype
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = {k: (v.to(dtype) if v.is_floating_point() else v).detach().contiguous().clone()
               for k, v in state.items()}
    _replace_atomically(out_dir / WEIGHTS, lambda tmp: save_file(weights, str(tmp), metadata={"format": "pt"}))
    for name, source in (extra_files or {}).items():
        _replace_atomically(out_dir / name, lambda tmp, source=source: shutil.copyfile(source, tmp))
    meta = {"type": kind, "format_version": format_version, "dtype": str(dtype).removeprefix("torch."), **body}
    _replace_atomically(out_dir / CONFIG, lambda tmp: tmp.write_text(json.dumps(meta, indent=2) + "\n"))
    return out_dir


def read_config(path: str | Path) -> dict[str, Any]:
    """A checkpoint directory's ``config.json``, or a one-line DuetError."""
    file = Path(path) / CONFIG
    try:
        meta = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise DuetError(f"{file} is missing or not JSON: {err}") from err
    if not isinstance(meta, dict):
        raise DuetError(f"{file} is not a JSON object")
    return meta


def check_header(path: str | Path, meta: dict[str, Any], kind: str, format_version: int, what: str) -> None:
    """Refuse a directory of another type, or one written in a newer format than ``format_version``;
    ``what`` names the expected model in the message ("a Gepard model", "a duet-fsq codec")."""
    if meta.get("type") != kind:
        raise DuetError(f"{path} holds a {meta.get('type')!r} checkpoint, not {what}")
    found = meta.get("format_version", format_version)
    if not isinstance(found, int) or found > format_version:
        raise DuetError(f"{path}: checkpoint format {found!r} of {what} is not supported (this duet reads up to "
                        f"{format_version})")


def read_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The float32 weights (integer tensors as stored) of a checkpoint directory, or a one-line DuetError."""
    from safetensors.torch import load_file

    file = Path(path) / WEIGHTS
    if not file.is_file():
        raise DuetError(f"{path} has no {WEIGHTS}")
    return {k: v.float() if v.is_floating_point() else v for k, v in load_file(str(file)).items()}


def own_codec(model_dir: str | Path, name: str) -> str | Path:
    """The codec a model directory's config names: a directory inside the model's own when ``name`` is one there (a
    voice with its own decoder names ``codec``), else ``name`` as given (a shipped name or a path)."""
    inside = Path(model_dir) / name
    return inside if (inside / "config.json").is_file() else name
