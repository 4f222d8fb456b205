"""Audio codecs behind one ``Codec`` protocol (``base``): GroupFSQ / ResidualVQ quantisers, duet's own trained
codecs ``duet-fsq`` and ``duet-rvq``, and ``load(name_or_dir)`` for the shipped checkpoints (``registry``).

``load`` is resolved lazily so that ``import duet.codecs`` stays cheap for the CLI.
"""

from __future__ import annotations

from typing import Any


def load(name_or_path: Any, device: Any = "cpu") -> Any:
    """A shipped codec by name ("duet-fsq", "duet-rvq") or a directory with config.json + model.safetensors."""
    from duet.codecs.registry import load as _load

    return _load(name_or_path, device)


__all__ = ["load"]
