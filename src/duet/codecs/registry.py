"""Load duet's own codecs by name or directory: ``duet.codecs.load("duet-fsq")``.

A shipped codec is a directory with two files and nothing executable:
- ``config.json``: ``{"type": "duet-fsq" | "duet-rvq", "config": {...the model's config dataclass...}, ...}``
  plus provenance (training steps, hours of audio, source run), which loading ignores;
- ``model.safetensors``: the weights, stored as float16 to halve the size, loaded back as float32.
Never pickle: no ``torch.load``, no ``.bin``.

The files are written and read by ``duet.checkpoint_dir``, as a model's are. Names resolve to
``<checkpoints root>/<name>`` (``duet.checkpoint_dir.checkpoints_root``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from duet.checkpoint_dir import check_header, checkpoints_root, read_config, read_weights, write_checkpoint
from duet.config_io import from_dict, to_dict
from duet.errors import DuetError

KNOWN = ("duet-fsq", "duet-rvq")  # codec types (config.json "type")
# Names under checkpoints/: duet-fsq-causal is a duet-fsq with a causal decoder; duet-fsq-joe a duet-fsq whose
# decoder was fine-tuned on the joe voice alone (the same encoder and codes), the codec the joe models decode with;
# duet-rvq-semantic a duet-rvq fine-tuned on joe with its first codebook distilled towards Whisper (new codes).
SHIPPED = KNOWN + ("duet-fsq-causal", "duet-fsq-joe", "duet-rvq-semantic")
FORMAT_VERSION = 1


def model_classes(kind: str) -> tuple[type, type]:
    """(config dataclass, model class) of a codec type; imported lazily, bound by an explicit table."""
    if kind == "duet-fsq":
        from duet.codecs.fsq_codec import FSQCodec, FSQCodecConfig

        return FSQCodecConfig, FSQCodec
    if kind == "duet-rvq":
        from duet.codecs.rvq_codec import RVQCodec, RVQCodecConfig

        return RVQCodecConfig, RVQCodec
    raise DuetError(f"unknown codec type {kind!r}; known: {', '.join(KNOWN)}")


def build(kind: str, config: Any = None) -> nn.Module:
    """A freshly initialised codec of ``kind`` from a config dataclass, a dict, or None (the defaults)."""
    config_cls, model_cls = model_classes(kind)
    if config is None:
        config = config_cls()
    elif isinstance(config, dict):
        config = from_dict(config_cls, config)
    return model_cls(config)


def resolve(name_or_path: str | Path) -> Path:
    path = Path(name_or_path)
    if path.is_dir():
        return path
    if str(name_or_path) in SHIPPED:
        shipped = checkpoints_root() / str(name_or_path)
        if (shipped / "config.json").is_file():
            return shipped
        raise DuetError(f"codec {name_or_path!r} is not in {shipped}: export a trained checkpoint there "
                        f"(duet train export RUN_DIR --out {shipped})")
    raise DuetError(f"no codec named {str(name_or_path)!r}: use one of {', '.join(SHIPPED)} or a directory "
                    "holding config.json and model.safetensors")


def _training_only(key: str) -> bool:
    """RVQ EMA statistics (``ema_sum``, ``ema_count``) only steer codebook updates; inference reads ``codebook``.
    Leaving them out halves the shipped RVQ; loading refills them from the freshly built model."""
    return key.endswith((".ema_sum", ".ema_count"))


def save_pretrained(model: nn.Module, out_dir: str | Path, dtype: torch.dtype = torch.float16,
                    info: dict[str, Any] | None = None) -> Path:
    """Write ``model`` (an FSQCodec or RVQCodec) as a shippable directory (``duet.checkpoint_dir``); returns it."""
    state = {k: v for k, v in model.state_dict().items() if not _training_only(k)}
    return write_checkpoint(out_dir, model.name, FORMAT_VERSION, state,
                            {"config": to_dict(model.cfg), "info": info or {}}, dtype)


def load(name_or_path: str | Path, device: str | torch.device = "cpu") -> nn.Module:
    """A codec ready for inference (eval mode, float32) from a shipped name or a directory."""
    path = resolve(name_or_path)
    meta = read_config(path)
    kind = meta.get("type", "")
    model = build(kind, meta.get("config", {}))
    check_header(path, meta, kind, FORMAT_VERSION, f"a {kind} codec")
    weights = read_weights(path)
    reference = model.state_dict()
    weights = {k: v.to(reference[k].dtype) if k in reference else v for k, v in weights.items()}
    for key in reference:  # refill the EMA statistics as k-means initialisation leaves them: count 1, sum = code
        if key.endswith(".ema_sum") and key not in weights:
            weights[key] = weights.get(key.removesuffix(".ema_sum") + ".codebook", reference[key]).clone()
        elif key.endswith(".ema_count") and key not in weights:
            weights[key] = torch.ones_like(reference[key])
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if missing or unexpected:
        raise DuetError(f"{path / 'model.safetensors'} does not fit a {kind} of this config: "
                        f"missing {missing[:5]}, unexpected {unexpected[:5]}")
    return model.to(device).eval()
