"""Post-training stages: generate with a trained model, score what it said with ``duet eval``'s metrics, train on
the scores. They sit above ``duet.eval`` (whose scorers they use) and below the ``duet`` command; the shared loop,
objectives and recipe plumbing they run on stay in ``duet.train``, which knows nothing of eval.

``gepard``   ``duet train gepard-sft`` / ``gepard-dpo`` (Gepard report §4: SFT, then DPO with LoRA) and their export
             (``duet train gepard-export`` of a post-training run)
``luna``     ``duet train luna-grpo`` / ``luna-grpo-export`` (Luna report §4: GRPO over denoising trajectories)
``scoring``  one clip's ``duet.eval.clip_scorer.ClipScore`` as each stage reads it (a pair's ``Quality``, a
             candidate's ``CandidateScore``)
``cli``      adds these stages to ``duet train``

Each stage module also runs as ``python -m duet.posttrain.NAME STAGE ...`` (what ``torchrun`` launches).
"""
