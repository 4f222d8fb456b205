"""One training recipe per ``duet train`` stage: its config dataclass, presets and flags, over the one driver in
``duet.train.recipe`` (run directory, config.json, tokenizer, data, seeding, loop, export).

``gepard``         ``duet train gepard`` (pretraining)
``gepard_post``    ``duet train gepard-sft`` / ``gepard-dpo`` (Gepard report §4: SFT, then DPO with LoRA; pairs
                   scored with ``duet.metrics``)
``gepard_export``  ``duet train gepard-export``: a Gepard run of any stage -> a shipped Gepard
``luna``           ``duet train luna`` / ``luna-export`` (and the Luna data options the Realtime recipe reuses)
``luna_realtime``  ``duet train luna-realtime`` / ``luna-realtime-export`` (continual training from a Luna model)
``luna_grpo``      ``duet train luna-grpo`` / ``luna-grpo-export`` (Luna report §4: GRPO over denoising
                   trajectories, rewards from ``duet.metrics``)

Each module also runs as ``python -m duet.train.recipes.NAME STAGE ...`` (what ``torchrun`` launches).
"""
