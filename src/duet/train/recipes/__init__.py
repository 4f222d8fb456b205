"""One training recipe per ``duet train`` stage: its config dataclass, presets and flags, over the one driver in
``duet.train.recipe`` (run directory, config.json, tokenizer, data, seeding, loop, export).

``gepard``         ``duet train gepard`` / ``gepard-export``
``luna``           ``duet train luna`` / ``luna-export`` (and the Luna data options the Realtime recipe reuses)
``luna_realtime``  ``duet train luna-realtime`` / ``luna-realtime-export`` (continual training from a Luna model)

Each module also runs as ``python -m duet.train.recipes.NAME STAGE ...`` (what ``torchrun`` launches).

Post-training (Gepard SFT / DPO, Luna GRPO) scores with ``duet eval``'s metrics and so lives in ``duet.posttrain``.
"""
