"""Run Gepard requests through vLLM together and write their frames as JSON (the integration test's probe).

    python -m duet.serve.vllm.run MODEL REQUESTS.json OUT.json [--max-num-seqs 4] [--dtype float32] [--codec C]

``MODEL``: a shipped model name, a duet Gepard checkpoint directory or a directory ``export.py`` wrote.

``REQUESTS.json``: a list of ``{"text", "bound", "temperature", "top_k", "top_p", "stop_threshold", "seed",
"speed", "reference"}`` (all but ``text`` and ``bound`` optional, duet's defaults; ``speed`` for a model with aligned
input; ``reference``, a sound file to clone the voice of, for a model with the voice compressor: read at the
codec's rate as ``duet speak --voice-ref`` reads it, with ``--codec``, default the model's own). ``OUT.json``: per
request ``{"frames": [[c_0 .. c_31], ...], "ended": "stop" | "bound"}``, plus the engine's start-up and generation
seconds. All requests are submitted at
once, so vLLM batches them. The ``__main__`` guard is required: vLLM starts its processes with ``spawn``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

NOT_SAMPLING = ("text", "bound", "speed", "reference")  # the request fields that are not SamplingParams'


def main(argv: list[str] | None = None) -> int:
    from duet.audio import load_audio
    from duet.codecs import load as load_codec
    from duet.sampling import SamplingParams
    from duet.serve.vllm.engine import GepardVLLM, VLLMConfig
    from duet.tts.request import SynthesisRequest

    p = argparse.ArgumentParser(description="Gepard frames through vLLM, as JSON")
    p.add_argument("model", help="a shipped model name, a Gepard checkpoint directory or a vLLM export")
    p.add_argument("requests")
    p.add_argument("out")
    p.add_argument("--max-num-seqs", type=int, default=4)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--codec", help="the codec that encodes reference clips (default: the model's own)")
    args = p.parse_args(argv)
    specs = json.loads(open(args.requests).read())
    t0 = time.perf_counter()
    with GepardVLLM(args.model, VLLMConfig(max_num_seqs=args.max_num_seqs, dtype=args.dtype)) as engine:
        t1 = time.perf_counter()
        codec = None
        reqs = []
        for spec in specs:
            params = SamplingParams(**{k: v for k, v in spec.items() if k not in NOT_SAMPLING})
            ids = engine.encode(SynthesisRequest(text=spec["text"]))
            prefix = None
            if spec.get("reference") is not None:
                codec = codec or load_codec(args.codec or engine.trained_codec)
                clip = load_audio(spec["reference"], sample_rate=codec.sample_rate)[0]  # (S,)
                prefix = engine.reference_prefix(codec, clip)  # (K, D)
            reqs.append(engine.add(ids, params, spec["bound"], params.seed or 0, spec.get("speed", 1.0), prefix))
        while not all(r.finished for r in reqs):
            engine.step()
        results = [{"frames": engine.take(r).T.tolist(), "ended": "stop" if r.stopped else "bound"} for r in reqs]
        t2 = time.perf_counter()
    with open(args.out, "w") as f:
        json.dump({"results": results, "startup_s": t1 - t0, "generate_s": t2 - t1}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
