"""A shipped Luna-TTS model on disk: ``config.json`` + ``model.safetensors`` + ``tokenizer.json`` in one directory.

``config.json``::

    {"type": "luna", "format_version": 1, "dtype": "float16",
     "config": LunaConfig.to_dict(), "duration": DurationConfig.to_dict(),
     "codec": {"name": ..., "frame_rate": ...}, "info": {...}, "decode": {"temperature": 0.0, ...}}

Tensor names are ``LunaBundle``'s state-dict names: ``acoustic.*`` (the LunaModel: ``model.*`` the stock Qwen3Model,
``audio_embed``, ``audio_heads``) and ``duration.*`` (the DurationPredictor), so loading is ``load_state_dict``.
``codec`` names the codec whose codes the model was trained on (``duet.codecs.load`` turns its grids into audio).
``decode`` (optional; keys of ``duet.luna.decode.DecodeConfig``: steps, temperature, top_k, cfg_scale) is what
``duet speak`` and ``duet serve`` decode this model with unless a request says otherwise: the settings its
evaluation favoured (``duet train luna-export --temperature --cfg-scale --steps``).

Luna-TTS Realtime ships the same way with ``"type": "luna-realtime"`` and ``"config": RealtimeConfig.to_dict()``
(the Luna config under ``luna`` plus ``block_size``); tensor names are ``RealtimeBundle``'s (``acoustic.luna.*``,
``acoustic.end_head.*``, ``duration.*``); :func:`save_luna_realtime` / :func:`load_luna_realtime`.
The directory handling (fp16 on disk, float32 back, atomic files, type checks) is ``duet.shipped``'s.

(``duet.luna.checkpoint`` is the plain per-model format of ``LunaModel.save`` / ``DurationPredictor.save``; this
module needs the bundle, which imports the models, hence its own file.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from duet.errors import DuetError
from duet.luna.bundle import LunaBundle, RealtimeBundle
from duet.luna.config import LunaConfig
from duet.luna.duration import DurationConfig
from duet.luna.realtime import RealtimeConfig
from duet.shipped import read_shipped, write_shipped

TYPE = "luna"
REALTIME_TYPE = "luna-realtime"
FORMAT_VERSION = 1
DECODE_KEYS = frozenset({"steps", "temperature", "top_k", "cfg_scale"})


@dataclass
class LoadedLuna:
    # eval mode, float32: .acoustic (LunaModel, or LunaRealtime for "luna-realtime") and .duration (DurationPredictor)
    bundle: LunaBundle | RealtimeBundle
    tokenizer: Any  # transformers PreTrainedTokenizerFast with duet's service tokens
    codec: dict[str, Any]  # {"name": ..., "frame_rate": ...}
    info: dict[str, Any]
    path: Path
    decode: dict[str, Any] = field(default_factory=dict)  # the model's own decoding defaults (DECODE_KEYS)


def save_luna(bundle: LunaBundle, tokenizer_file: str | Path, out_dir: str | Path, *,
              codec: dict[str, Any] | None = None, info: dict[str, Any] | None = None,
              dtype: torch.dtype = torch.float16, decode: dict[str, Any] | None = None) -> Path:
    """Write ``bundle`` + its tokenizer as a shippable directory (each file replaced atomically); returns it.
    ``decode``: the model's decoding defaults (``DECODE_KEYS``)."""
    return _save(TYPE, bundle, tokenizer_file, out_dir, codec, info, dtype, decode)


def load_luna(path: str | Path, device: str | torch.device = "cpu") -> LoadedLuna:
    """A model ready for inference from a directory written by :func:`save_luna`."""
    return _load(path, TYPE, "Luna", device, lambda meta: LunaBundle(
        LunaConfig.from_dict(meta["config"]), DurationConfig.from_dict(meta["duration"])))


def save_luna_realtime(bundle: RealtimeBundle, tokenizer_file: str | Path, out_dir: str | Path, *,
                       codec: dict[str, Any] | None = None, info: dict[str, Any] | None = None,
                       dtype: torch.dtype = torch.float16, decode: dict[str, Any] | None = None) -> Path:
    """Write a Realtime bundle + its tokenizer as a shippable directory (``"type": "luna-realtime"``); ``decode``:
    its decoding defaults per block."""
    return _save(REALTIME_TYPE, bundle, tokenizer_file, out_dir, codec, info, dtype, decode)


def _save(kind: str, bundle: LunaBundle | RealtimeBundle, tokenizer_file: str | Path, out_dir: str | Path,
          codec: dict[str, Any] | None, info: dict[str, Any] | None, dtype: torch.dtype,
          decode: dict[str, Any] | None = None) -> Path:
    unknown = set(decode or {}) - DECODE_KEYS
    if unknown:
        raise DuetError(f"unknown decoding defaults {sorted(unknown)}; known: {sorted(DECODE_KEYS)}")
    body = {"config": bundle.acoustic.config.to_dict(), "duration": bundle.duration.config.to_dict(),
            "codec": codec or {}, "info": info or {}}
    if decode:
        body["decode"] = dict(decode)
    return write_shipped(out_dir, kind, FORMAT_VERSION, bundle.state_dict(), tokenizer_file, body, dtype)


def load_luna_realtime(path: str | Path, device: str | torch.device = "cpu") -> LoadedLuna:
    """A Realtime model ready for streaming from a directory written by :func:`save_luna_realtime`."""
    return _load(path, REALTIME_TYPE, "Luna Realtime", device, lambda meta: RealtimeBundle(
        RealtimeConfig.from_dict(meta["config"]), DurationConfig.from_dict(meta["duration"])))


def _load(path: str | Path, kind: str, family: str, device: str | torch.device,
          build: Callable[[dict[str, Any]], torch.nn.Module]) -> LoadedLuna:
    """read_shipped -> ``build(config.json)`` -> strict weights -> tokenizer check -> ``LoadedLuna``."""
    path = Path(path)
    meta, weights, tokenizer = read_shipped(path, kind, FORMAT_VERSION, family)
    bundle = build(meta)
    bundle.load_state_dict(weights, strict=True)
    rows = bundle.duration.config.backbone.vocab_size  # the acoustic model reads the same ids (bundle checks)
    if len(tokenizer) > rows:
        raise DuetError(f"{path}: the tokenizer has {len(tokenizer)} ids, the model's text embedding only {rows} rows")
    decode = meta.get("decode", {})
    if not isinstance(decode, dict) or set(decode) - DECODE_KEYS:
        raise DuetError(f"{path}: config.json's decode section must hold only {sorted(DECODE_KEYS)}")
    return LoadedLuna(bundle.to(device).eval(), tokenizer, meta.get("codec", {}), meta.get("info", {}), path,
                      decode)
