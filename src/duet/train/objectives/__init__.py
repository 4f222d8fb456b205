"""Training objectives, one module per model family: ``codec`` (for ``codec_loop``), ``gepard`` (pretraining on
the shared ``duet.train.loop``), ``luna`` (masked diffusion + duration predictor on the same loop)."""
