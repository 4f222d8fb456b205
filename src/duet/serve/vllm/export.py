"""Export a duet Gepard checkpoint (``duet.gepard.checkpoint``) as a directory vLLM loads.

    PYTHONPATH=src python -m duet.serve.vllm.export CHECKPOINT_DIR OUT_DIR [--frame-slots N]

Writes ``OUT_DIR/config.json``: a Qwen3 config (what vLLM's ``Qwen3Model`` reads) with
``architectures = ["GepardForTTS"]`` plus Gepard's own fields (``channel_levels``, ``audio_embed_dim``,
``frame_slots``, ``text_vocab_size``, ``aligned_input``) and the original duet checkpoint metadata under ``duet`` (config, codec);
``model.safetensors`` unchanged (duet's names are already vLLM's: ``model.*``, ``audio_interface.*``,
``heads.*``; the text embedding stays in it, because the client computes prompt embeddings from it, and so do an
aligned model's ``aligned.*`` and ``duration.*`` and a cloning model's voice compressor ``qformer.*``, which the
client runs and vLLM's loader skips); and
``tokenizer.json`` (the client's, vLLM runs with ``skip_tokenizer_init``).

``vocab_size`` is what vLLM believes the vocabulary is: ``1 + frame_slots`` token ids (STOP + frame-bank slots,
see ``frames.py``), or the text embedding's rows if that is more. More slots tolerate more concurrent streams
before a slot is reused (a slot lives ``frame_slots / streams`` decode steps) at the cost of a wider logits row.
``VLLMModelDir.open`` is what serving and ``run`` call: a shipped model name or a directory, resolved as the
built-in engine resolves it (``duet.shipped.resolve_model``); a duet checkpoint is exported into a temporary
directory that ``cleanup`` removes, so a server start leaves nothing behind. No vLLM import here: exporting runs in
duet's own environment.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from duet.errors import DuetError

ARCHITECTURE = "GepardForTTS"
DEFAULT_FRAME_SLOTS = 65_535


def vllm_config(meta: dict, frame_slots: int = DEFAULT_FRAME_SLOTS) -> dict:
    """duet checkpoint metadata (``config.json`` of ``save_gepard``) -> the HF-style config vLLM reads."""
    from duet.gepard.config import GepardConfig
    from duet.nn.backbone import qwen3_config

    config = GepardConfig.from_dict(meta["config"])
    bb = config.backbone
    hf = qwen3_config(bb).to_dict()
    hf.pop("attn_implementation", None)
    hf.pop("_attn_implementation", None)
    hf.update({
        "architectures": [ARCHITECTURE],
        "model_type": "qwen3",
        "vocab_size": max(bb.vocab_size, frame_slots + 1),
        "text_vocab_size": bb.vocab_size,
        "tie_word_embeddings": False,  # there is no lm_head at all
        "use_cache": True,
        "bos_token_id": None,
        "eos_token_id": 0,  # frames.STOP_ID
        "pad_token_id": None,
        "dtype": meta.get("dtype", "float16"),
        "channel_levels": list(config.channel_levels),
        "audio_embed_dim": config.audio_embed_dim,
        "frame_slots": frame_slots,
        "aligned_input": config.aligned is not None,  # the client sends each request's aligned vectors (frames.py)
        "duet": {k: meta[k] for k in ("type", "format_version", "config", "codec", "info") if k in meta},
    })
    return hf


def export_for_vllm(checkpoint: str | Path, out_dir: str | Path, frame_slots: int = DEFAULT_FRAME_SLOTS) -> Path:
    checkpoint, out_dir = Path(checkpoint), Path(out_dir)
    if frame_slots < 1:
        raise DuetError(f"frame_slots must be >= 1, got {frame_slots}")
    try:
        meta = json.loads((checkpoint / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise DuetError(f"{checkpoint} is not a duet Gepard checkpoint: {err}") from err
    if meta.get("type") != "gepard":
        raise DuetError(f"{checkpoint} holds a {meta.get('type')!r} checkpoint, not a Gepard model")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ("model.safetensors", "tokenizer.json"):
        tmp = out_dir / f"{name}.tmp"
        shutil.copyfile(checkpoint / name, tmp)
        os.replace(tmp, out_dir / name)
    tmp = out_dir / "config.json.tmp"
    tmp.write_text(json.dumps(vllm_config(meta, frame_slots), indent=2) + "\n")
    os.replace(tmp, out_dir / "config.json")
    return out_dir


def is_vllm_export(path: Path) -> bool:
    """Whether ``path`` holds a directory :func:`export_for_vllm` wrote (vLLM loads it as it is)."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return ARCHITECTURE in config.get("architectures", [])


@dataclass
class VLLMModelDir:
    """The directory vLLM loads for a model name or directory. ``source`` is where the name led (its directory
    name is the model id, as the built-in engine's); ``path`` is ``source`` for an export, else a temporary export
    of the checkpoint, which ``cleanup`` removes (the owner calls it on close and on a failed start)."""

    source: Path
    path: Path
    temporary: tempfile.TemporaryDirectory | None = None

    @classmethod
    def open(cls, name_or_path: str | os.PathLike) -> "VLLMModelDir":
        """A shipped name, a duet Gepard checkpoint directory or an export -> the directory (one-line DuetErrors
        for a name that leads nowhere or a checkpoint of another family)."""
        from duet.shipped import resolve_model

        source = resolve_model(name_or_path)
        if is_vllm_export(source):
            return cls(source, source)
        temporary = tempfile.TemporaryDirectory(prefix="duet-vllm-")
        try:
            return cls(source, export_for_vllm(source, temporary.name), temporary)
        except BaseException:
            temporary.cleanup()
            raise

    def cleanup(self) -> None:
        """Remove the temporary export, if any (safe to call twice)."""
        if self.temporary is not None:
            self.temporary.cleanup()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="duet Gepard checkpoint directory (save_gepard)")
    p.add_argument("out", help="directory to write the vLLM model into")
    p.add_argument("--frame-slots", type=int, default=DEFAULT_FRAME_SLOTS)
    args = p.parse_args(argv)
    print(export_for_vllm(args.checkpoint, args.out, args.frame_slots))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
