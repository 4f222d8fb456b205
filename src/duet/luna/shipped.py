"""A shipped Luna-TTS model on disk: ``config.json`` + ``model.safetensors`` + ``tokenizer.json`` in one directory.

``config.json``::

    {"type": "luna", "format_version": 1, "dtype": "float16",
     "config": LunaConfig.to_dict(), "duration": DurationConfig.to_dict(),
     "codec": {"name": ..., "frame_rate": ...}, "info": {...}}

Tensor names are ``LunaBundle``'s state-dict names: ``acoustic.*`` (the LunaModel: ``model.*`` the stock Qwen3Model,
``audio_embed``, ``audio_heads``) and ``duration.*`` (the DurationPredictor), so loading is ``load_state_dict``.
``codec`` names the codec whose codes the model was trained on (``duet.codecs.load`` turns its grids into audio).
The directory handling (fp16 on disk, float32 back, atomic files, type checks) is ``duet.shipped``'s.

(``duet.luna.checkpoint`` is the plain per-model format of ``LunaModel.save`` / ``DurationPredictor.save``; this
module needs the bundle, which imports the models, hence its own file.)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from duet.errors import DuetError
from duet.luna.bundle import LunaBundle
from duet.luna.config import LunaConfig
from duet.luna.duration import DurationConfig
from duet.shipped import read_shipped, write_shipped

TYPE = "luna"
FORMAT_VERSION = 1


@dataclass
class LoadedLuna:
    bundle: LunaBundle  # eval mode, float32: .acoustic (LunaModel) and .duration (DurationPredictor)
    tokenizer: Any  # transformers PreTrainedTokenizerFast with duet's service tokens
    codec: dict[str, Any]  # {"name": ..., "frame_rate": ...}
    info: dict[str, Any]
    path: Path


def save_luna(bundle: LunaBundle, tokenizer_file: str | Path, out_dir: str | Path, *,
              codec: dict[str, Any] | None = None, info: dict[str, Any] | None = None,
              dtype: torch.dtype = torch.float16) -> Path:
    """Write ``bundle`` + its tokenizer as a shippable directory (each file replaced atomically); returns it."""
    body = {"config": bundle.acoustic.config.to_dict(), "duration": bundle.duration.config.to_dict(),
            "codec": codec or {}, "info": info or {}}
    return write_shipped(out_dir, TYPE, FORMAT_VERSION, bundle.state_dict(), tokenizer_file, body, dtype)


def load_luna(path: str | Path, device: str | torch.device = "cpu") -> LoadedLuna:
    """A model ready for inference from a directory written by :func:`save_luna`."""
    path = Path(path)
    meta, weights, tokenizer = read_shipped(path, TYPE, FORMAT_VERSION, "Luna")
    config = LunaConfig.from_dict(meta["config"])
    bundle = LunaBundle(config, DurationConfig.from_dict(meta["duration"]))
    bundle.load_state_dict(weights, strict=True)
    if len(tokenizer) > config.backbone.vocab_size:
        raise DuetError(f"{path}: the tokenizer has {len(tokenizer)} ids, the model's text embedding only "
                        f"{config.backbone.vocab_size} rows")
    return LoadedLuna(bundle.to(device).eval(), tokenizer, meta.get("codec", {}), meta.get("info", {}), path)
