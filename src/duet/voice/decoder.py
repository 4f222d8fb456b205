"""The voice's own codec decoder: the base codec's decoder fine-tuned on the voice's training clips.

A recording that the codec never heard (another speaker, another microphone, a telephone band) comes back from the
shared decoder less clear than it went in: the Asterisk English prompts lose half their intelligibility in a round
trip through duet-fsq (Whisper tiny.en 9.8% -> 20.4% WER), and a voice can never sound clearer than its decoder.
Fine-tuning the decoder alone on the same clips (``duet train codec --config fsq-decoder --init-from duet-fsq``:
encoder and quantiser frozen, so the codes, and the model trained on them, stay valid) for 15 minutes of one core
brought that round trip to 11.1%. The stage runs that recipe for its share of the budget, resumably, and exports
the decoder into the voice's own directory (``VOICE/codec``), which the voice's ``config.json`` names; every loader
of a model directory reads a codec it names by a relative path from inside it
(``duet.checkpoint_dir.own_codec``).
"""

from __future__ import annotations

import json
from pathlib import Path

from duet.errors import DuetError

CODEC_DIR = "codec"  # inside the voice directory
DECODER_PRESETS = {False: "fsq-decoder", True: "fsq-causal-decoder"}  # duet-fsq's decoder fine-tunes, by causality
MAX_STEPS = 1000  # the cosine schedule's end; the stage's time share ends it sooner on a CPU


def decoder_preset(codec) -> str:
    """The ``duet train codec`` preset that fine-tunes a loaded ``codec``'s decoder (duet-fsq, centred or causal)."""
    if codec.name != "duet-fsq":
        raise DuetError(f"a voice's own decoder fine-tunes a duet-fsq codec, not a {codec.name}")
    return DECODER_PRESETS[bool(codec.cfg.causal_decoder)]


def train_decoder(codec: str, manifest: Path, run_dir: Path, out_dir: Path, minutes: float, threads: int | None,
                  progress: bool) -> dict:
    """Fine-tune ``codec``'s decoder on ``manifest``'s train split for at most ``minutes`` more (resuming ``run_dir``)
    and export it to ``out_dir`` -> the export's info (steps, hours, best validation mel)."""
    from dataclasses import replace

    from duet.codecs import load
    from duet.train.checkpoint import latest_checkpoint
    from duet.train.codec_config import preset
    from duet.train.codec_loop import export_codec, train_codec

    resume = latest_checkpoint(run_dir) is not None
    base = load(codec)
    cfg = replace(preset(decoder_preset(base)), model=base.cfg, max_steps=MAX_STEPS)  # the codec's own size
    if minutes > 0:
        result = train_codec(None if resume else cfg, manifest, run_dir, resume=resume, max_minutes=minutes,
                             threads=threads, progress=progress, init_from=None if resume else codec)
        if result.stopped == "signal":
            raise DuetError(f"the decoder's training stopped at step {result.step} by a signal (checkpointed); run "
                            "the same command with --resume to continue")
    export_codec(run_dir, out_dir)
    return json.loads((out_dir / "config.json").read_text())["info"]
