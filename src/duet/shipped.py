"""A shipped TTS model directory, whatever the family: ``config.json`` + ``model.safetensors`` + ``tokenizer.json``;
and where a model's name leads (``resolve_model``: ``<checkpoints root>/<name>`` or a directory; ``model_type``: its
family, read from ``config.json`` without loading weights).

``config.json`` starts ``{"type": FAMILY, "format_version": N, "dtype": "float16", ...}``; what follows is the
family's (``duet.gepard.checkpoint``, ``duet.luna.shipped``). The files are written and read by
``duet.checkpoint_dir``, as a codec's are; tensor names are the family module's state-dict names, so loading is
``load_state_dict``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from duet.checkpoint_dir import check_header, checkpoints_root, read_config, read_weights, write_checkpoint
from duet.errors import DuetError
from duet.families import shipped_models

if TYPE_CHECKING:  # torch is imported where weights are read or written, so the CLI starts without it
    import torch

FILES = ("config.json", "model.safetensors", "tokenizer.json")


def write_shipped(out_dir: str | Path, kind: str, format_version: int, state: dict[str, torch.Tensor],
                  tokenizer_file: str | Path, body: dict[str, Any], dtype: torch.dtype | None = None) -> Path:
    """Write weights (floating tensors cast to ``dtype``, float16 by default), the tokenizer and ``config.json`` =
    header + ``body`` (``duet.checkpoint_dir``)."""
    return write_checkpoint(out_dir, kind, format_version, state, body, dtype,
                            extra_files={"tokenizer.json": tokenizer_file})


def read_shipped(path: str | Path, kind: str, format_version: int, family: str,
                 plain_tokenizer: bool = False) -> tuple[dict[str, Any], dict[str, torch.Tensor], Any]:
    """-> (config.json, float32 weights, tokenizer) of a directory written by :func:`write_shipped`.

    ``family`` names the model in errors ("Gepard", "Luna"): a missing file, a directory of another type or format.
    ``plain_tokenizer``: the tokenizer for inference alone, without transformers (``duet.text.get_tokenizer``).
    """
    from duet.text import get_tokenizer

    path = Path(path)
    missing = [name for name in FILES if not (path / name).is_file()]
    if missing:
        raise DuetError(f"{path} is not a {family} checkpoint (missing {', '.join(missing)})")
    meta = read_config(path)
    check_header(path, meta, kind, format_version, f"a {family} model")
    return meta, read_weights(path), get_tokenizer(path / "tokenizer.json", plain=plain_tokenizer)


MODELS = shipped_models()  # `duet speak --model` knows them by name (``duet.families``)
DEFAULT_MODEL = MODELS[0]  # what a bare `duet speak` speaks with and a bare `duet serve` serves


def resolve_model(name_or_path: str | Path) -> Path:
    """A shipped model name or a checkpoint directory -> the directory (with a clear error when absent)."""
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
    return path, read_config(path).get("type")
