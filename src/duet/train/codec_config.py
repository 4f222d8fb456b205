"""Codec training configuration: ``CodecTrainConfig`` and the named presets of ``duet train codec --config``.

``fsq`` and ``rvq`` are the shipped codecs' runs; ``fsq-tiny`` and ``rvq-tiny`` train in seconds, for tests.
A JSON config file (and a run's ``config.json``) holds ``{"kind": "duet-fsq" | "duet-rvq", "model": {...}, ...the
other fields...}``, read and written by ``duet.config_io`` like every duet config: ``model`` is the config class
of its ``kind`` (``duet.codecs.registry``), the codec's defaults when absent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from duet.codecs import registry
from duet.config_io import CONFIG_CLASS, read_json
from duet.errors import DuetError
from duet.train.objectives.codec import SpectralLossConfig
from duet.train.objectives.discriminators import DiscriminatorConfig


def _model_config_class(data: dict[str, Any]) -> type:
    return registry.model_classes(data.get("kind"))[0]


@dataclass(frozen=True)
class CodecTrainConfig:
    kind: str  # "duet-fsq" | "duet-rvq"
    model: Any = field(metadata={CONFIG_CLASS: _model_config_class})  # FSQCodecConfig | RVQCodecConfig (by kind)
    loss: SpectralLossConfig = field(default_factory=SpectralLossConfig)
    disc: DiscriminatorConfig = field(default_factory=DiscriminatorConfig)
    batch_size: int = 16
    crop_seconds: float = 1.0
    lr: float = 1e-3
    final_lr_ratio: float = 0.05
    warmup_steps: int = 500
    max_steps: int = 60_000  # length of the cosine schedule; a run may stop earlier or be resumed with more
    betas: tuple[float, float] = (0.8, 0.99)  # HiFi-GAN's: a short beta1 memory suits the adversarial phase
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    # Exponential moving average of the generator's weights, the one exported: at a high learning rate it is a
    # far better codec than the raw weights (Polyak averaging). None: export the raw weights.
    ema_decay: float | None = 0.999
    disc_start_step: int | None = None  # None: no discriminators (spectral losses only)
    disc_lr: float = 2e-4
    adv_weight: float = 1.0
    feature_weight: float = 2.0
    semantic_weight: float = 1.0  # RVQ only, when a teacher is given
    semantic_teacher: str | None = None  # "whisper", "whisper:DIR" or a local WavLM directory (RVQ only)
    # Fine-tune the decoder alone (encoder and quantiser frozen, in eval mode: codes, and so every model trained
    # on them, stay valid); with --init-from a shipped codec. The decoder then always sees all codebooks.
    decoder_only: bool = False
    val_every: int = 500
    val_items: int = 16
    val_seconds: float = 2.0
    log_every: int = 10
    checkpoint_minutes: float = 5.0
    seed: int = 0

    @property
    def crop_samples(self) -> int:
        """Crop length rounded to whole codec frames."""
        spf = self.model.samples_per_frame
        return max(1, round(self.crop_seconds * self.model.sample_rate / spf)) * spf


def _tiny(kind: str, model: Any) -> CodecTrainConfig:
    """The tiny presets' training around a tiny ``model``: seconds per run on a CPU, discriminators included."""
    return CodecTrainConfig(kind=kind, model=model, batch_size=2, crop_seconds=0.2, warmup_steps=2, max_steps=50,
                            val_every=4, val_items=2, val_seconds=0.2, log_every=1,
                            disc=DiscriminatorConfig(periods=(2, 3), period_channels=(4, 8), resolutions=((512, 128),),
                                                     stft_channels=4, batch=2, seconds=0.1),
                            loss=SpectralLossConfig(stft=((256, 64), (512, 128)), mel=((256, 64, 20), (512, 128, 40))))


def preset(name: str) -> CodecTrainConfig:
    """Named training configs; ``tests/train`` builds each one."""
    if name == "fsq":
        from duet.codecs.fsq_codec import FSQCodecConfig

        # Sized for a small CPU: discriminators (about 2.5x the cost of a spectral step) join for the last 6,000.
        return CodecTrainConfig(kind="duet-fsq", model=FSQCodecConfig(), max_steps=16_000, disc_start_step=10_000)
    if name == "rvq":
        from duet.codecs.rvq_codec import RVQCodecConfig

        return CodecTrainConfig(kind="duet-rvq", model=RVQCodecConfig(), max_steps=14_000, disc_start_step=8_000)
    if name == "rvq-semantic":
        from duet.codecs.rvq_codec import RVQCodecConfig

        # The Luna report's semantic anchor added to a shipped duet-rvq (--init-from duet-rvq): encoder,
        # quantiser and decoder fine-tuned together while the first codebook is distilled towards the bundled
        # Whisper encoder's features, so that codebook 0 alone carries the words. Spectral losses only.
        return CodecTrainConfig(kind="duet-rvq", model=RVQCodecConfig(), lr=3e-4, warmup_steps=100, max_steps=4_000,
                                semantic_teacher="whisper")
    if name == "rvq-decoder":
        from duet.codecs.rvq_codec import RVQCodecConfig

        # Decoder-only adversarial fine-tune of a shipped duet-rvq (--init-from duet-rvq): the discriminators
        # from the first step, a gentler learning rate than training from scratch.
        return CodecTrainConfig(kind="duet-rvq", model=RVQCodecConfig(), decoder_only=True, lr=3e-4,
                                warmup_steps=100, max_steps=4_000, disc_start_step=0)
    if name == "fsq-decoder":
        from duet.codecs.fsq_codec import FSQCodecConfig

        # The same fine-tune for a shipped duet-fsq (--init-from duet-fsq), whose run stopped before its
        # discriminator phase: FSQ codes (and gepard-tiny, trained on them) stay valid.
        return CodecTrainConfig(kind="duet-fsq", model=FSQCodecConfig(), decoder_only=True, lr=3e-4,
                                warmup_steps=100, max_steps=4_000, disc_start_step=0)
    if name == "fsq-causal-decoder":
        from duet.codecs.fsq_codec import FSQCodecConfig

        # The shipped duet-fsq's decoder made causal (--init-from duet-fsq: same weight shapes, the convolutions
        # read only earlier frames) and fine-tuned alone, so streaming needs no look-ahead and no re-decoded
        # context; the codes stay duet-fsq's. Exported as duet-fsq-causal.
        return CodecTrainConfig(kind="duet-fsq", model=FSQCodecConfig(causal_decoder=True), decoder_only=True,
                                lr=3e-4, warmup_steps=100, max_steps=4_000, disc_start_step=0)
    if name == "fsq-tiny":  # for tests: seconds per run
        from duet.codecs.fsq_codec import FSQCodecConfig

        model = FSQCodecConfig(n_mels=20, enc_sub_dim=16, enc_sub_blocks=1, enc_dim=32, enc_blocks=1, dec_dim=32,
                               dec_blocks=1, dec_sub_dim=16, dec_sub_blocks=1)
        return _tiny("duet-fsq", model)
    if name == "rvq-tiny":
        from duet.codecs.rvq import RVQConfig
        from duet.codecs.rvq_codec import RVQCodecConfig

        model = RVQCodecConfig(n_mels=20, enc_sub_dim=16, enc_sub_blocks=1, enc_dim=32, enc_blocks=1,
                               enc_transformer_layers=1, enc_heads=2, dec_dim=32, dec_blocks=1, dec_sub_dim=16,
                               dec_sub_blocks=1, rvq=RVQConfig(dim=16, num_quantizers=4, codebook_size=64))
        return _tiny("duet-rvq", model)
    raise DuetError(f"unknown codec training preset {name!r}: fsq, rvq, rvq-semantic, rvq-decoder, fsq-decoder, "
                    "fsq-causal-decoder, fsq-tiny, "
                    "rvq-tiny or a JSON file")


def load_config(name_or_path: str) -> CodecTrainConfig:
    path = Path(name_or_path)
    if path.suffix == ".json" or path.is_file():
        try:
            return read_json(path, CodecTrainConfig)
        except (OSError, json.JSONDecodeError) as err:
            raise DuetError(f"cannot read codec config {path}: {err}") from err
    return preset(name_or_path)
