"""Luna-TTS Realtime latency: first-block latency and full-utterance latency of one ~10-second utterance, measured in
the same run, their ratio, and RTF (DESIGN.md §B "Serving and numbers"; issue 6).

    PYTHONPATH=src .venv/bin/python benchmarks/realtime_bench.py --random-init [--preset luna-realtime-tiny]
    PYTHONPATH=src .venv/bin/python benchmarks/realtime_bench.py --model luna-realtime-tiny|DIR [--learned-end]
        [--seconds 10] [--steps 8] [--runs 5] [--threads N] [--device cpu|cuda] [--json out.json]

Model: ``--model`` loads a shipped Luna Realtime (name or directory) with the codec its config names;
``--random-init`` builds ``--preset`` with random weights (a small BPE trained on the benchmark text as its
tokenizer) and the shipped ``duet-rvq`` codec (random weights of the same shape when this checkout lacks it): the same
compute as a trained model of that shape, nothing about quality.

Length. By default every run is exactly ``--seconds`` of audio: the end head is silenced (its bias set to -30) and the
bound is ``--seconds`` x the frame rate, so every run does the same work whatever the weights. ``--learned-end``
(with ``--model``) lets the trained end head stop the utterance instead (the speaker's defaults: no end before 0.8x
the duration predictor's length, a bound at twice it + one block), and the audio length is whatever the model made.

One run = ``Speaker.chunks`` over one sentence, through the same code path as ``duet speak --stream``:
prefill of the text, then per block S refinement steps over the active block with committed blocks in the KV cache,
commit, and the causal codec's streaming decode of that block. Timed with ``time.perf_counter`` from the call:

- first block: until the first chunk with audio arrives (prefill + S steps + one block's codec decode);
- full utterance: until the last chunk, plus the WAV serialisation of the whole waveform (into memory), as in the
  report's full-response latency;
- ratio = first / full; RTF = full / audio seconds (< 1 is faster than real time);
- per block: the median time between consecutive chunks; streaming never runs dry while it is under one block's
  audio duration (B_k / frame rate).

One warm-up run, then ``--runs`` timed runs; medians are printed with the min and max. The sampling seed is fixed per
run (``seed = run``). Nothing here is hard-coded: every number printed was measured in this run.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

TEXT = ("The old lighthouse keeper climbed the narrow stairs every evening at dusk, lit the great lamp, and watched "
        "the ships pass safely into the harbour")  # one sentence (no final stop: one piece), ~10 s when spoken


def random_speaker(preset: str, device: str):
    """A Speaker over a Luna Realtime runtime with random ``preset`` weights, a BPE trained on TEXT, and the duet-rvq codec."""
    from duet.codecs import load as load_codec
    from duet.codecs.registry import build
    from duet.errors import DuetError
    from duet.luna.bundle import RealtimeBundle
    from duet.luna.duration import duration_preset
    from duet.luna.realtime import realtime_preset
    from duet.text import get_tokenizer
    from duet.text.bpe import BPEConfig, save_bpe, train_bpe
    from duet.train.codec_config import preset as codec_preset
    from duet.tts.luna_realtime import RealtimeRuntime
    from duet.tts.speaker import Speaker

    torch.manual_seed(0)
    bundle = RealtimeBundle(realtime_preset(preset), duration_preset(preset.replace("realtime-", "")))
    tmp = Path(tempfile.mkdtemp(prefix="realtime-bench-"))
    tokenizer = get_tokenizer(save_bpe(train_bpe([TEXT] * 4, BPEConfig(vocab_size=300)), tmp / "tokenizer.json"))
    try:
        codec, where = load_codec("duet-rvq", device=device), "shipped duet-rvq codec"
    except DuetError:
        codec, where = build("duet-rvq", codec_preset("rvq").model).eval().to(device), "duet-rvq codec, random weights"
    bundle = bundle.to(device).eval()
    runtime = RealtimeRuntime(bundle.acoustic, bundle.duration, tokenizer, codec, f"random {preset}")
    return Speaker(runtime), f"{preset}, random weights; {where}"


def one_run(speaker, steps: int, seed: int) -> dict[str, float]:
    import soundfile as sf

    started = time.perf_counter()
    first, stamps, parts = None, [], []
    for chunk in speaker.chunks(TEXT, seed=seed, steps=steps):
        audio = chunk.audio.cpu().numpy()  # on a GPU this waits for the block's work
        now = time.perf_counter() - started
        stamps.append(now)
        if first is None and len(audio):
            first = now
        parts.append(audio)
    waveform = np.concatenate(parts)
    sf.write(io.BytesIO(), waveform, speaker.sample_rate, format="WAV")
    full = time.perf_counter() - started
    seconds = len(waveform) / speaker.sample_rate
    gaps = np.diff(stamps)
    return {"first_block_s": first if first is not None else float("nan"), "full_s": full, "audio_s": seconds,
            "ratio": (first or float("nan")) / full, "rtf": full / seconds if seconds else float("nan"),
            "blocks": len(stamps), "per_block_s": float(np.median(gaps)) if len(gaps) else float("nan")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="shipped Luna Realtime model: name or directory")
    which.add_argument("--random-init", action="store_true", help="random weights of --preset")
    parser.add_argument("--preset", default="luna-realtime-tiny")
    parser.add_argument("--seconds", type=float, default=10.0, help="audio per run (ignored with --learned-end)")
    parser.add_argument("--learned-end", action="store_true", help="let the trained end head stop the utterance")
    parser.add_argument("--steps", type=int, default=8, help="refinement steps per block (the report deploys 8)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", default=None, help="also write the runs and medians here")
    args = parser.parse_args(argv)
    if args.learned_end and args.random_init:
        parser.error("--learned-end needs a trained --model (a random end head stops anywhere)")
    if args.threads:
        torch.set_num_threads(args.threads)

    if args.random_init:
        speaker, what = random_speaker(args.preset, args.device)
    else:
        from duet.tts import load

        speaker, what = load(args.model, device=args.device), f"{args.model}"
    frames = round(args.seconds * speaker.codec.frame_rate)
    if not args.learned_end:
        with torch.no_grad():
            speaker.runtime.model.end_head.bias.fill_(-30.0)  # never "past the end": every run is exactly --seconds
        speaker.runtime.config = replace(speaker.runtime.config, bound_factor=None,
                                         stream=replace(speaker.runtime.config.stream, max_frames=frames))
    bk = speaker.runtime.block_size
    print(f"model: {what}; block {bk} frames ({bk / speaker.codec.frame_rate:.2f} s), {args.steps} steps per block, "
          f"CFG {speaker.runtime.config.stream.decode.cfg_scale:g}; device {args.device}, {torch.get_num_threads()} threads")
    with torch.inference_mode():
        one_run(speaker, args.steps, seed=-1)  # warm-up
        runs = [one_run(speaker, args.steps, seed=i) for i in range(args.runs)]

    def line(key: str, label: str, unit: str = "") -> str:
        values = [r[key] for r in runs]
        return (f"{label:<24} median {statistics.median(values):9.4f}{unit}   "
                f"min {min(values):9.4f}{unit}   max {max(values):9.4f}{unit}")

    print(f"{len(runs)} runs after one warm-up; text: {len(TEXT)} characters, one piece")
    print(line("audio_s", "audio", " s"))
    print(line("first_block_s", "first-block latency", " s"))
    print(line("full_s", "full-utterance latency", " s"))
    print(line("ratio", "first / full"))
    print(line("rtf", "RTF (full / audio)"))
    print(line("per_block_s", "time per block", " s") + f"   (one block is {bk / speaker.codec.frame_rate:.2f} s "
          "of audio)")
    if args.json:
        medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        Path(args.json).write_text(json.dumps({"model": what, "steps": args.steps, "device": args.device,
                                               "threads": torch.get_num_threads(), "runs": runs,
                                               "median": medians}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
