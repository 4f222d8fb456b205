"""The voice prefix on duet's side of vLLM, for a Gepard with the voice compressor (``GepardConfig.voice``, Gepard
§2.6): K prefix vectors that sit before the text as prompt embeddings.

The compressor is small (a 2-block Q-Former that runs once per request, never in the decode loop), so the client
runs it, as it runs an aligned model's duration predictor (``duet.gepard.decode.AlignedLayout``):
:class:`VoicePrefix` loads the export's ``qformer.*`` tensors (they stay in ``model.safetensors``; vLLM's loader
skips them) and computes exactly what ``GepardModel.voice_prefix`` computes: a reference clip is encoded by the
codec and cut to the compressor's ``max_reference_frames`` (``duet.gepard.voice.reference_codes``, the built-in
runtime's own first half), then compressed to ``prefix_raw``; a request without a clip reads ``null_prefix``, as
the built-in runtime's does. Inside vLLM the prefix is just K more prompt positions: the stock backbone is
unchanged.

Shape legend: C channels (32), R reference frames, K prefix vectors, D width, S samples.
"""

from __future__ import annotations

import numpy as np
import torch

from duet.codecs.base import Codec
from duet.codecs.fsq import GroupFSQ
from duet.gepard.qformer import QFormer, QFormerConfig
from duet.gepard.voice import reference_codes

PARAMETER_PREFIX = "qformer."  # the compressor's names in a Gepard checkpoint (``duet.gepard.model``)


class VoicePrefix:
    """The voice compressor of one model, in float32 on the CPU, in eval mode (no prefix dropout)."""

    def __init__(self, config: QFormerConfig, state: dict[str, torch.Tensor]):
        self.qformer = QFormer(config)
        self.qformer.load_state_dict({k.removeprefix(PARAMETER_PREFIX): v.float() for k, v in state.items()
                                      if k.startswith(PARAMETER_PREFIX)})
        self.qformer.eval()

    @classmethod
    def load(cls, config: QFormerConfig, tensors) -> "VoicePrefix":
        """From an open safetensors file (``safe_open``) of a model whose config has this compressor."""
        names = [k for k in tensors.keys() if k.startswith(PARAMETER_PREFIX)]
        return cls(config, {k: tensors.get_tensor(k) for k in names})

    @property
    def num_vectors(self) -> int:
        """K: the prompt positions the prefix takes."""
        return self.qformer.config.num_queries

    @torch.no_grad()
    def null(self) -> torch.Tensor:
        """The prefix of a request without a reference clip (K, D): ``null_prefix``."""
        return self.qformer.null(1)[0].clone()

    @torch.no_grad()
    def of_clip(self, codec: Codec, audio: np.ndarray, fsq: GroupFSQ | None = None) -> torch.Tensor:
        """A reference clip (S,) (mono, at the codec's rate) -> its prefix (K, D)."""
        channels = reference_codes(codec, audio, self.qformer.config.max_reference_frames, fsq)  # (1, C, R)
        mask = torch.ones(1, channels.shape[2], dtype=torch.bool)  # (1, R): every frame is real
        return self.qformer.encode(channels, mask)[0][0]  # prefix_raw (K, D)
