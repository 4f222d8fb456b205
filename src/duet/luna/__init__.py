"""Luna-TTS: masked-diffusion TTS over an RVQ token grid (report: ../shared/papers/001_*.txt, DESIGN.md §B).

``config``     LunaConfig and presets (luna-0.6b, luna-tiny)
``backbone``   duet.nn.backbone's stock Qwen3Model made bidirectional; loading a local Qwen3 checkpoint
``model``      LunaModel: [text | prompt grid | target grid] -> Q x K logits per target frame
``diffusion``  absorbing-state masking and the 1/t-weighted loss; CFG text dropout; prompt/target splits
``decode``     MaskGIT sampler (cosine schedule, annealed Gumbel selection, top-k, temperature, CFG)
``duration``   token-level duration predictor (quantised distribution per text token)
``infill``     cloning (visible prompt) and editing (masked span) as infilling; input checks
``realtime``   Luna-TTS Realtime: block diffusion (two-stream block-causal mask, noise per block), end-of-speech head
``stream``     Realtime streaming: conditions' KV cache built once, MaskGIT refinement per block, commit, audio out
``bundle``     LunaBundle: the acoustic model and its duration predictor, trained and shipped together; LunaBatch
``data``       code shards + manifest text -> length-bucketed LunaBatches with (approximate) duration targets
``shipped``    the shipped directory (fp16 weights, config with the codec's name, tokenizer) and its loader
``checkpoint`` the plain per-model format of ``LunaModel.save`` / ``DurationPredictor.save``
"""
