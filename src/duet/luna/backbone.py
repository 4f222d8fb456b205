"""Luna's use of the shared backbone: the stock ``Qwen3Model`` of ``duet.nn.backbone``, made bidirectional, and
initialisation from a local Qwen3 checkpoint.

Luna-TTS report §2.4: the backbone is Qwen3-0.6B with its causal mask replaced by full bidirectional attention over
text, prompt and target. We build the stock class (``duet.nn.backbone.build_qwen3``: no fork, no hooks), set
``config.is_causal = False`` (diff with Gepard, which stays causal) and, in addition, always hand it an explicit 4-D
additive mask (``duet.nn.masks``): transformers 5.x passes a prepared 4-D mask through unchanged, and an additive
float mask is right for both the sdpa and the eager kernels (a boolean one is silently wrong under eager).

``load_qwen3_weights`` copies a local Qwen3 checkpoint in transformers format (``config.json`` + safetensors, as
written by ``save_pretrained``) into such a backbone: text embedding, every decoder layer, final norm. The rotary
embedding has no weights (``inv_freq`` is recomputed from ``rope_theta``) and Qwen3-0.6B ties its LM head to the
embedding, so nothing else carries over. (It belongs in ``duet.nn.backbone`` once Gepard needs it too.)
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import Qwen3Model

from duet.errors import DuetError
from duet.nn.backbone import BackboneConfig, build_qwen3


def build_bidirectional(cfg: BackboneConfig) -> Qwen3Model:
    """A randomly initialised stock ``Qwen3Model`` whose config says bidirectional (``is_causal = False``)."""
    model = build_qwen3(cfg)
    model.config.is_causal = False  # diff with Qwen3 / Gepard: Luna §2.4; the explicit 4-D mask says so as well
    return model


# Shape fields that must agree between a checkpoint's config.json and ours before any weight is copied.
_SHAPE_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
)


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in path.glob("*.safetensors"))
    if not files:
        raise DuetError(f"no safetensors weights in {path} (expected a transformers save_pretrained folder)")
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(str(path / name)))
    return state


def load_qwen3_weights(backbone: Qwen3Model, path: str | Path) -> list[str]:
    """Copy a local Qwen3 checkpoint (transformers format) into ``backbone``; returns the names copied.

    Accepts checkpoints of ``Qwen3ForCausalLM`` (keys ``model.*`` and ``lm_head.weight``, the latter ignored: tied)
    and of a bare ``Qwen3Model``. Every backbone tensor must be present. A checkpoint vocabulary smaller than ours
    fills the first rows of the embedding and leaves the rest as initialised (duet's service tokens past it); a
    larger one is refused.
    """
    path = Path(path)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise DuetError(f"{path} is not a transformers checkpoint folder: no config.json")
    theirs = json.loads(cfg_file.read_text())
    ours = backbone.config
    for field in _SHAPE_FIELDS:
        if field in theirs and theirs[field] != getattr(ours, field):
            raise DuetError(
                f"checkpoint {path} has {field}={theirs[field]} but the model has {getattr(ours, field)}; "
                "pick the preset that matches the checkpoint"
            )
    state = _read_safetensors(path)
    state = {k.removeprefix("model."): v for k, v in state.items() if not k.startswith("lm_head.")}
    own = backbone.state_dict()
    missing = sorted(set(own) - set(state))
    if missing:
        raise DuetError(f"checkpoint {path} lacks {len(missing)} backbone tensors, e.g. {missing[:3]}")
    copied = []
    with torch.no_grad():
        for name, target in own.items():
            src = state[name].to(target.dtype)
            if name == "embed_tokens.weight" and src.shape[0] != target.shape[0]:
                if src.shape[0] > target.shape[0] or src.shape[1:] != target.shape[1:]:
                    raise DuetError(
                        f"checkpoint text embedding {tuple(src.shape)} does not fit the model's {tuple(target.shape)}"
                    )
                target[: src.shape[0]].copy_(src)  # rows past the checkpoint's vocabulary stay new
            elif src.shape != target.shape:
                raise DuetError(f"checkpoint tensor {name} has shape {tuple(src.shape)}, model {tuple(target.shape)}")
            else:
                target.copy_(src)
            copied.append(name)
    return copied
