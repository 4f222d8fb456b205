"""Gepard: autoregressive, vLLM-native TTS (DESIGN.md §A; report ``papers/000_fcd6711226948c71.txt``).

``config``           GepardConfig, the presets (gepard-500m, gepard-tiny) and the parameter arithmetic
``audio_interface``  32 FSQ channel codes -> frame embedding (32 tables, concat, GELU MLP, affine-free LN, s_audio)
``heads``            32 channel heads + stop head, FrameLogits
``model``            GepardModel: sequence layout, training loss (``model(batch)``), KV-cached inference logits
``generate``         the sampler: prefill, KV-cached steps, factorised sampling, stop / bound, CFG, seeds
``qformer``          voice-cloning compressor: reference codes -> K=8 prefix tokens, null_prefix, L_div, L_supcon
``voice``            the prefix in training: another clip of the row's speaker as reference, null-sentinel rows
``probes``           entropy and stop-probability probes, effective rank
``data``             code shards + manifest text -> tokenised, length-bucketed GepardBatch (repetition augmentation)
``checkpoint``       the shipped format: fp16 model.safetensors + config.json + tokenizer.json
"""
