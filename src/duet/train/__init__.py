"""Training: the pieces every duet training loop shares (checkpoints, metrics, plots, schedules) and the loops.

``checkpoint``, ``metrics``, ``plots`` and ``schedule`` know nothing about any model family. ``loop`` is the one
shared training loop (AdamW with LR multipliers, warm-up + cosine, clipping, bf16, non-finite guard, accumulation,
exact resume, DDP); an ``objectives/`` module says what it optimises (``objectives/gepard``: Gepard pretraining,
``objectives/luna``: Luna's masked diffusion and duration predictor). ``recipe`` holds what the families' recipes
share around the loop (resume merging, the run's tokenizer, export source, the ``duet train FAMILY`` flags);
``recipes/`` holds one recipe per stage (``gepard``, ``luna``, ``luna_realtime``: ``duet train STAGE`` and its
export).
``codec_loop`` and ``objectives/codec`` are the codec's own GAN loop (two optimizers, alternating updates).
"""
