"""A shipped Gepard model on disk: ``config.json`` + ``model.safetensors`` + ``tokenizer.json`` in one directory.

``config.json``::

    {"type": "gepard", "format_version": 1, "dtype": "float16",
     "config": GepardConfig.to_dict(), "codec": {"name": ..., "frame_rate": ...}, "info": {...},
     "sampling": {"temperature": 0.0, "top_k": 0}}

Tensor names are ``GepardModel``'s state-dict names (``model.*`` the stock Qwen3Model, ``audio_interface.*``
including the ``s_audio`` buffer, ``heads.*``), so loading is ``load_state_dict`` and nothing else. Weights are
stored as float16 (half the bytes; small models ship in git) and loaded back as float32. ``codec`` names the codec
whose codes the model was trained on, so a caller knows which decoder turns its frames into audio. ``sampling``
(optional) is what ``duet speak`` and ``duet serve`` sample this model with unless told otherwise: the temperature
and top-k its evaluation favoured (``duet train gepard-export --temperature --top-k``); absent, the speaker's and
the server's defaults apply. The directory
handling (fp16 cast, atomic files, type and format checks) is every family's: ``duet.shipped``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from duet.errors import DuetError
from duet.gepard.config import GepardConfig
from duet.gepard.model import GepardModel
from duet.shipped import read_shipped, write_shipped

TYPE = "gepard"
FORMAT_VERSION = 1
SAMPLING_KEYS = frozenset({"temperature", "top_k"})


@dataclass
class LoadedGepard:
    model: GepardModel  # eval mode, float32
    tokenizer: Any  # transformers PreTrainedTokenizerFast with duet's service tokens (or a PlainBPE: stock=False)
    codec: dict[str, Any]  # {"name": ..., "frame_rate": ...}
    info: dict[str, Any]
    path: Path
    sampling: dict[str, Any] = field(default_factory=dict)  # {"temperature": ..., "top_k": ...} or {}


def save_gepard(model: GepardModel, tokenizer_file: str | Path, out_dir: str | Path, *,
                codec: dict[str, Any] | None = None, info: dict[str, Any] | None = None,
                sampling: dict[str, Any] | None = None, dtype: torch.dtype = torch.float16) -> Path:
    """Write ``model`` + its tokenizer as a shippable directory (each file replaced atomically); returns it."""
    sampling = dict(sampling or {})
    unknown = set(sampling) - SAMPLING_KEYS
    if unknown:
        raise DuetError(f"a shipped Gepard's default sampling takes {sorted(SAMPLING_KEYS)}, not {sorted(unknown)}")
    body = {"config": model.config.to_dict(), "codec": codec or {}, "info": info or {}}
    if sampling:
        body["sampling"] = sampling
    return write_shipped(out_dir, TYPE, FORMAT_VERSION, model.state_dict(), tokenizer_file, body, dtype)


def load_gepard(path: str | Path, device: str | torch.device = "cpu", stock: bool = True) -> LoadedGepard:
    """A model ready for inference from a directory written by :func:`save_gepard`. ``stock=False`` loads it for
    inference alone, without importing transformers: the backbones as ``duet.nn.qwen3.Qwen3Weights`` and the
    tokenizer through the ``tokenizers`` package (``duet.text.bpe.PlainBPE``)."""
    path = Path(path)
    meta, weights, tokenizer = read_shipped(path, TYPE, FORMAT_VERSION, "Gepard", plain_tokenizer=not stock)
    config = GepardConfig.from_dict(meta["config"])
    model = GepardModel(config, stock=stock)
    model.load_state_dict(weights, strict=True)
    if len(tokenizer) > config.backbone.vocab_size:
        raise DuetError(f"{path}: the tokenizer has {len(tokenizer)} ids, the model's text embedding only "
                        f"{config.backbone.vocab_size} rows")
    sampling = {k: v for k, v in meta.get("sampling", {}).items() if k in SAMPLING_KEYS}
    return LoadedGepard(model.to(device).eval(), tokenizer, meta.get("codec", {}), meta.get("info", {}), path,
                        sampling)
