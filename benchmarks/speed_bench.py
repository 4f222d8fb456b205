"""A speed far from a model's natural pace, laid out or time-stretched: how each sounds (Whisper WER, DNSMOS OVRL).

N held-out sentences (``timestamps_bench.held_out_sentences``), sentence i seeded ``--seed`` + i, spoken at each of
``--speeds`` in these ways:

- layout: the model's own durations scaled by the speed (``RetimeConfig.followed_speeds`` wide open);
- wsola from G: made at speed G (layout), then time-stretched by G / speed at its pitch with duet's WSOLA
  (``duet.tts.wsola``): what the Speaker does for a speed outside ``followed_speeds`` whose nearer end is G, the
  same audio (``tests/tts/test_pace.py``);
- vocoder from G: the same making at G stretched by librosa's phase vocoder (``librosa.effects.time_stretch``),
  for comparison.

The sentences at speed 1 are the reference row. WER: Whisper tiny.en against the sentence (mean of per-sentence
rates); OVRL: DNSMOS. Where the word timings land is ``timestamps_bench.py --followed LOW,HIGH``.

    PYTHONPATH=src .venv/bin/python benchmarks/speed_bench.py --model gepard-tiny --n 30 --speeds 0.5,2 --from 1 \\
        --threads 1
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
from timestamps_bench import held_out_sentences


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gepard-tiny")
    p.add_argument("--n", type=int, default=30)
    p.add_argument("--speeds", default="0.5,2")
    p.add_argument("--from", dest="made_at", default="1", help="speeds G to make at and stretch from")
    p.add_argument("--methods", default="layout,wsola,vocoder", help="which of layout, wsola, vocoder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    import librosa
    import torch

    import duet
    from duet.metrics.asr import Transcriber
    from duet.metrics.dnsmos import DNSMOS
    from duet.metrics.wer import aggregate, word_error
    from duet.tts.retime import RetimeConfig
    from duet.tts.wsola import stretch

    if args.threads:
        torch.set_num_threads(args.threads)
    speaker = duet.load(args.model)
    every_speed = RetimeConfig(followed_speeds=(0.0, float("inf")))  # every speed laid out
    speaker.config = replace(speaker.config, retime=every_speed)
    rate = speaker.sample_rate
    texts = held_out_sentences(args.n, args.seed)
    speeds = [float(x) for x in args.speeds.split(",")]
    made_at = [float(x) for x in args.made_at.split(",")]
    methods = set(args.methods.split(","))
    rows: dict[tuple[str, str], list[tuple[np.ndarray, str]]] = {}
    started = time.perf_counter()
    for i, text in enumerate(texts):
        seed = args.seed + i
        makings = {g: speaker.speak(text, seed=seed, speed=g).audio for g in sorted({1.0, *made_at})}
        rows.setdefault(("1", "layout"), []).append((makings[1.0], text))
        for speed in speeds:
            if "layout" in methods:
                rows.setdefault((f"{speed:g}", "layout"), []).append(
                    (speaker.speak(text, seed=seed, speed=speed).audio, text))
            for g in made_at:
                if "wsola" in methods:
                    rows.setdefault((f"{speed:g}", f"wsola from {g:g}"), []).append(
                        (stretch(makings[g], g / speed, rate), text))
                if "vocoder" in methods:
                    vocoded = librosa.effects.time_stretch(makings[g], rate=speed / g).astype(np.float32)
                    rows.setdefault((f"{speed:g}", f"vocoder from {g:g}"), []).append((vocoded, text))
        print(f"{i + 1}/{len(texts)} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    generation = time.perf_counter() - started

    asr, dnsmos = Transcriber(), DNSMOS()
    lines = [f"`PYTHONPATH=src .venv/bin/python benchmarks/speed_bench.py {shlex.join(argv or sys.argv[1:])}`", "",
             f"{len(texts)} held-out sentences (joe test split, seed {args.seed}), {args.model}, greedy. WER: Whisper "
             "tiny.en against the sentence (mean of per-sentence rates); OVRL: DNSMOS.", "",
             "| speed | method | items | seconds of audio | WER | OVRL |", "|---:|---|---:|---:|---:|---:|"]
    for (speed, method), items in rows.items():
        wer = aggregate(word_error(text, asr.transcribe(audio, rate)) for audio, text in items).mean
        ovrl = np.mean([dnsmos.score(audio, rate).ovrl for audio, _ in items])
        seconds = sum(len(audio) for audio, _ in items) / rate
        lines.append(f"| {speed} | {method} | {len(items)} | {seconds:.0f} | {100 * wer:.1f}% | {ovrl:.2f} |")
    lines += ["", f"Generation {generation:.0f} s."]
    out = "\n".join(lines)
    print(out)
    if args.out:
        Path(args.out).write_text(out + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
