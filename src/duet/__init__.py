"""duet: Gepard (autoregressive) and Luna-TTS (masked diffusion) text-to-speech, small enough for a laptop CPU."""

__version__ = "0.1.0"
