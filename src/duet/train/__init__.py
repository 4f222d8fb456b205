"""Training: the pieces every duet training run shares (checkpoints, metrics, plots, schedules), the one loop
skeleton, and the steps it drives.

``checkpoint``, ``metrics``, ``plots``, ``schedule``, ``rng`` and ``distributed`` know nothing about any model
family. ``runner`` is the skeleton every run shares (run directory, resume, seeding, progress, stops, checkpoint
cadence, metrics, plots, validation, early stopping) around a ``StepRunner``. ``loop`` is the families' step
(AdamW with LR multipliers, warm-up + cosine, clipping, bf16, non-finite guard, accumulation, DDP); an
``objectives/`` module says what it optimises (``objectives/gepard``: Gepard pretraining, ``objectives/luna``:
Luna's masked diffusion and duration predictor). ``recipe`` holds what the families' recipes share around the loop
(resume merging, the run's tokenizer, export source, the ``duet train FAMILY`` flags); ``recipes/`` holds one
recipe per stage (``gepard``, ``luna``, ``luna_realtime``: ``duet train STAGE`` and its export).
``codec_loop`` is the codec's GAN step on the same skeleton (generator and discriminator optimizers, EMA), with
its losses in ``objectives/codec`` and ``objectives/discriminators``.
"""
