"""DNSMOS P.835 (Reddy et al. 2022): a reference-free MOS predictor for speech quality, through ONNX Runtime.

The models are the ones Microsoft's DNS Challenge publishes (``sig_bak_ovr.onnx`` for SIG / BAK / OVRL, and
``model_v8.onnx`` for the P.808 MOS), shipped inside the ``speechmos`` wheel, so nothing is downloaded. We call
speechmos's ``DNSMOS`` class (its reference implementation of the official script: 9.01 s windows hopped by 1 s,
audio shorter than that repeated until it fills one window, polynomial calibration of the raw scores) with our
own audio loading and resampling, and keep one instance per process.

Scores are on the 1-5 MOS scale: SIG = speech signal quality, BAK = background noise (higher = quieter),
OVRL = overall, P808 = the P.808 overall model. DNSMOS was trained on 16 kHz real speech; it rates synthetic
speech too but is not calibrated for it, so compare systems with each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from duet.audio import check_audio, resample, to_mono
from duet.errors import MissingDependency

DNSMOS_SAMPLE_RATE = 16_000
_EXTRA_HINT = "pip install 'duet[eval]' (speechmos, onnxruntime)"


@dataclass(frozen=True)
class DNSMOSScore:
    ovrl: float
    sig: float
    bak: float
    p808: float


class DNSMOS:
    """Loads the two ONNX sessions on first use."""

    def __init__(self, personalized: bool = False):
        self.personalized = personalized  # the personalised-DNSMOS primary model (penalises interfering talkers)
        self._model = None

    @property
    def model(self):
        if self._model is None:
            try:
                import speechmos.dnsmos as sm
            except ModuleNotFoundError as err:
                raise MissingDependency(f"DNSMOS ({err.name})", _EXTRA_HINT) from err
            root = Path(sm.__file__).parent
            primary = root / ("pdnsmos_models" if self.personalized else "dnsmos_models") / "sig_bak_ovr.onnx"
            self._model = sm.DNSMOS(str(primary), str(root / "dnsmos_models" / "model_v8.onnx"))
        return self._model

    def score(self, audio: np.ndarray, sample_rate: int) -> DNSMOSScore:
        """Mono audio at any rate -> the four MOS values (averaged over 9 s windows)."""
        wav = check_audio(resample(to_mono(audio), sample_rate, DNSMOS_SAMPLE_RATE))
        wav = np.clip(wav, -1.0, 1.0)  # speechmos rejects samples outside [-1, 1]; resampling can overshoot
        out = self.model(wav, DNSMOS_SAMPLE_RATE, self.personalized)
        return DNSMOSScore(ovrl=float(out["ovrl_mos"]), sig=float(out["sig_mos"]), bak=float(out["bak_mos"]),
                           p808=float(out["p808_mos"]))
