"""A shipped Gepard model on disk: ``config.json`` + ``model.safetensors`` + ``tokenizer.json`` in one directory.

``config.json``::

    {"type": "gepard", "format_version": 1, "dtype": "float16",
     "config": GepardConfig.to_dict(), "codec": {"name": ..., "frame_rate": ...}, "info": {...}}

Tensor names are ``GepardModel``'s state-dict names (``model.*`` the stock Qwen3Model, ``audio_interface.*``
including the ``s_audio`` buffer, ``heads.*``), so loading is ``load_state_dict`` and nothing else. Weights are
stored as float16 (half the bytes; small models ship in git) and loaded back as float32. ``codec`` names the codec
whose codes the model was trained on, so a caller knows which decoder turns its frames into audio.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from duet.errors import DuetError
from duet.gepard.config import GepardConfig
from duet.gepard.model import GepardModel

TYPE = "gepard"
FORMAT_VERSION = 1


@dataclass
class LoadedGepard:
    model: GepardModel  # eval mode, float32
    tokenizer: Any  # transformers PreTrainedTokenizerFast with duet's service tokens
    codec: dict[str, Any]  # {"name": ..., "frame_rate": ...}
    info: dict[str, Any]
    path: Path


def save_gepard(model: GepardModel, tokenizer_file: str | Path, out_dir: str | Path, *,
                codec: dict[str, Any] | None = None, info: dict[str, Any] | None = None,
                dtype: torch.dtype = torch.float16) -> Path:
    """Write ``model`` + its tokenizer as a shippable directory (each file replaced atomically); returns it."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = {k: (v.to(dtype) if v.is_floating_point() else v).detach().contiguous().clone()
               for k, v in model.state_dict().items()}
    tmp = out_dir / "model.safetensors.tmp"
    save_file(weights, str(tmp), metadata={"format": "pt"})
    os.replace(tmp, out_dir / "model.safetensors")
    tmp = out_dir / "tokenizer.json.tmp"
    shutil.copyfile(tokenizer_file, tmp)
    os.replace(tmp, out_dir / "tokenizer.json")
    meta = {"type": TYPE, "format_version": FORMAT_VERSION, "dtype": str(dtype).removeprefix("torch."),
            "config": model.config.to_dict(), "codec": codec or {}, "info": info or {}}
    tmp = out_dir / "config.json.tmp"
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, out_dir / "config.json")
    return out_dir


def load_gepard(path: str | Path, device: str | torch.device = "cpu") -> LoadedGepard:
    """A model ready for inference from a directory written by :func:`save_gepard`."""
    from safetensors.torch import load_file

    from duet.text import get_tokenizer

    path = Path(path)
    files = [path / name for name in ("config.json", "model.safetensors", "tokenizer.json")]
    missing = [f.name for f in files if not f.is_file()]
    if missing:
        raise DuetError(f"{path} is not a Gepard checkpoint (missing {', '.join(missing)})")
    try:
        meta = json.loads(files[0].read_text())
    except json.JSONDecodeError as err:
        raise DuetError(f"{files[0]} is not JSON: {err}") from err
    if meta.get("type") != TYPE:
        raise DuetError(f"{path} holds a {meta.get('type')!r} checkpoint, not a Gepard model")
    if meta.get("format_version") != FORMAT_VERSION:
        raise DuetError(f"{path}: Gepard checkpoint format {meta.get('format_version')} is not supported")
    config = GepardConfig.from_dict(meta["config"])
    model = GepardModel(config)
    weights = {k: v.float() if v.is_floating_point() else v for k, v in load_file(str(files[1])).items()}
    model.load_state_dict(weights, strict=True)
    tokenizer = get_tokenizer(files[2])
    if len(tokenizer) > config.backbone.vocab_size:
        raise DuetError(f"{path}: the tokenizer has {len(tokenizer)} ids, the model's text embedding only "
                        f"{config.backbone.vocab_size} rows")
    return LoadedGepard(model.to(device).eval(), tokenizer, meta.get("codec", {}), meta.get("info", {}), path)
