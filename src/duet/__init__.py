"""duet: Gepard (autoregressive) and Luna-TTS (masked diffusion) text-to-speech, small enough for a laptop CPU."""

__version__ = "0.1.0"


def load(name_or_path, device: str = "cpu"):
    """A shipped model by name (``"gepard-tiny"``) or a checkpoint directory, ready to ``speak``; see ``duet.tts``."""
    from duet.tts import load as _load

    return _load(name_or_path, device=device)
