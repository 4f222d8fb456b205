"""Do the word timings a model reports match where its words are? Reported boundaries against a forced alignment.

Each model speaks N held-out sentences at each speed (one seed per sentence); every piece it speaks is then aligned
from its audio and text alone by two reference aligners, and each word's reported start and end is compared to
theirs:

- ``em``: duet's flat-start aligner (``duet.eval.timestamps``: phone units, one Gaussian per unit type, all pieces
  of the run in one EM fit, at ``--subdivide`` times the codec's frame rate, each value its own fit);
- ``trained``: the aligner trained on Piper `joe` reading the corpus's train-split texts at many rates, with its
  exact timing (``duet.eval.trained_aligner``; trained once, a few minutes, then cached).

Each reference's own error is measured in the same run: Piper `joe` (exact timing: the durations its graph laid
out) reads the same sentences at 1 / speed of its pace, and its true word boundaries stand in for a model's
(``--no-piper`` leaves those rows out). The table gives the median and the 95th percentile of |reported -
reference| over all word boundaries (starts and ends), the medians of starts and ends alone, and the signed
median of the starts (reported - reference; > 0: the reported start is later) in the first and the last quarter
of each piece's words. Targets: median <= 40 ms, p95 <= 120 ms.

The sentences are the test split of the `joe` corpus preset (``duet.data.plan``: held out of every shipped model's
training and of the trained aligner's; planned, not rendered, so no corpus is needed), without its one/two-word
items, drawn under ``--seed``.

    PYTHONPATH=src .venv/bin/python benchmarks/timestamps_bench.py --models gepard-tiny,luna-tiny --n 30 \\
        --speeds 1,0.5,2 --subdivide 2,4 --threads 1
"""

from __future__ import annotations

import argparse
import random
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

PIPER = "piper-joe (exact)"


def held_out_sentences(n: int, seed: int) -> list[str]:
    """``n`` sentences of the joe preset's test split (one/two-word items left out), drawn under ``seed``."""
    from duet.data.plan import plan_corpus
    from duet.data.presets import joe
    from duet.data.text_sources import WORDS

    texts = sorted({u.text for u in plan_corpus(joe()).utterances if u.split == "test" and u.text_source != WORDS})
    return random.Random(seed).sample(texts, min(n, len(texts)))


def spoken_pieces(speaker, text: str, seed: int, speed: float) -> list:
    """Each piece of ``text`` as the speaker speaks it: its own audio and the words it reported."""
    from duet.eval.timestamps import Spoken
    from duet.text.sentences import split_sentences

    pieces = split_sentences(text, speaker.config.max_chars)
    audio: dict[int, list[np.ndarray]] = {}
    words = {}
    for chunk in speaker.chunks(text, timed=True, seed=seed, speed=speed):
        audio.setdefault(chunk.piece, []).append(chunk.audio.numpy())
        if chunk.words is not None:
            words[chunk.piece] = chunk.words
    return [Spoken(pieces[i], np.concatenate(audio[i]), speaker.sample_rate, words[i]) for i in sorted(audio)]


def _quarter_bias(pieces, references, quarter: int) -> float:
    """The median of reported - reference word starts (s) over the words in ``quarter`` (0-3) of each piece."""
    out = []
    for piece, reference in zip(pieces, references):
        n = len(piece.words)
        out += [a.start - b.start for i, (a, b) in enumerate(zip(piece.words, reference))
                if min(4 * i // max(n, 1), 3) == quarter]
    return float(np.median(out)) if out else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="gepard-tiny,luna-tiny", help="comma-separated shipped names or directories")
    p.add_argument("--n", type=int, default=30, help="held-out sentences")
    p.add_argument("--speeds", default="1,0.5,2")
    p.add_argument("--seed", type=int, default=0, help="draws the sentences; sentence i speaks with seed + i")
    p.add_argument("--references", default="em,trained", help="reference aligners: em, trained (comma-separated)")
    p.add_argument("--subdivide", default="2,4", help="em: aligner frames per codec frame (comma-separated: one fit "
                                                      "each)")
    p.add_argument("--no-piper", dest="piper", action="store_false",
                   help="leave out Piper joe's own (exact) timing, each reference's own error")
    p.add_argument("--threads", type=int, default=None, help="torch threads")
    p.add_argument("--followed", default=None, metavar="LOW,HIGH",
                   help="the speeds a model lays out; others are made at the nearest and time-stretched "
                        "(default: RetimeConfig.followed_speeds; 0,inf: every speed laid out)")
    p.add_argument("--out", default=None, help="also write the table (markdown) here")
    args = p.parse_args(argv)

    import torch

    import duet
    from duet.eval.timestamps import boundary_errors, forced_words
    from duet.eval.trained_aligner import joe_aligner, piper_spoken

    if args.threads:
        torch.set_num_threads(args.threads)
    texts = held_out_sentences(args.n, args.seed)
    speeds = [float(s) for s in args.speeds.split(",")]
    references = args.references.split(",")
    runs = []  # (model, speed, pieces)
    tokenizers, frame_rates = {}, {}
    started = time.perf_counter()
    for name in args.models.split(","):
        speaker = duet.load(name)
        if args.followed is not None:
            low, high = (float(x) for x in args.followed.split(","))
            speaker.config = replace(speaker.config, retime=replace(speaker.config.retime, followed_speeds=(low, high)))
        if not speaker.has_timings:
            raise SystemExit(f"{name} reports no word timings")
        tokenizers[name], frame_rates[name] = speaker.runtime.tokenizer, speaker.codec.frame_rate
        for speed in speeds:
            pieces = [piece for i, text in enumerate(texts) for piece in spoken_pieces(speaker, text, args.seed + i,
                                                                                      speed)]
            runs.append((name, speed, pieces))
            print(f"{name} speed {speed:g}: {len(pieces)} pieces ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr)
    first = args.models.split(",")[0]
    if args.piper:  # its truth read as the first model's tokenizer reads the text
        tokenizers[PIPER], frame_rates[PIPER] = tokenizers[first], frame_rates[first]
        for speed in speeds:
            runs.append((PIPER, speed, [piper_spoken(text, tokenizers[first], 1.0 / speed, args.seed)
                                        for text in texts]))
    forced: dict[tuple[str, str, float], list] = {}  # (reference, model, speed) -> each piece's words
    labels: dict[str, str] = {}
    frame_ms = 1000 / frame_rates[first]
    if "em" in references:
        # one EM fit per subdivision over every piece a tokenizer reads (the shipped models and Piper: one in all)
        groups: dict[str, list[tuple[str, float]]] = {}
        for name, speed, _ in runs:
            groups.setdefault(tokenizers[name].backend_tokenizer.to_str(), []).append((name, speed))
        for sub in [int(x) for x in args.subdivide.split(",")]:
            ref = f"em{sub}"
            labels[ref] = f"EM, {frame_ms / sub:.1f} ms"
            for members in groups.values():
                pieces = [(m, piece) for m in members for name, speed, ps in runs if (name, speed) == m
                          for piece in ps]
                name = members[0][0]
                words = forced_words([piece for _, piece in pieces], tokenizers[name], frame_rates[name], sub)
                for (m, _), w in zip(pieces, words):
                    forced.setdefault((ref, *m), []).append(w)
    if "trained" in references:
        aligners = {}
        for name, speed, pieces in runs:
            key = tokenizers[name].backend_tokenizer.to_str()
            if key not in aligners:
                aligners[key] = joe_aligner(tokenizers[name], frame_rates[name])
                print(f"trained aligner ready ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
            forced[("trained", name, speed)] = aligners[key].words(pieces, tokenizers[name])
            labels["trained"] = f"trained, {1000 / aligners[key].rate:.1f} ms"

    low, high = speaker.config.retime.followed_speeds
    followed = f"[{low:g}, {high:g}]"
    lines = [f"`PYTHONPATH=src .venv/bin/python benchmarks/timestamps_bench.py {shlex.join(argv or sys.argv[1:])}`",
             "", f"{len(texts)} held-out sentences (joe test split, seed {args.seed}); speeds outside "
             f"{followed} made at the nearest of them and time-stretched; {PIPER}: Piper joe reading the same "
             "sentences at 1 / speed of its pace, its exact timing in place of a model's (the reference's own "
             f"error). The model's frame is {frame_ms:.1f} ms. |reported - reference| in ms over every word start "
             "and end (targets: median <= 40, p95 <= 120); bias: the median of reported - reference starts in the "
             "first / last quarter of each piece's words.", "",
             "| reference | model | speed | pieces | words | median | p95 | median of starts | median of ends | "
             "bias, first / last quarter |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for ref, label in labels.items():
        for name, speed, pieces in runs:
            reference = forced[(ref, name, speed)]
            starts, ends = [], []
            for piece, words in zip(pieces, reference):
                s, e = boundary_errors(piece.words, words)
                starts += s
                ends += e
            both = 1000 * np.array(starts + ends)
            bias = [1000 * _quarter_bias(pieces, reference, q) for q in (0, 3)]
            lines.append(f"| {label} | {name} | {speed:g} | {len(pieces)} | {len(starts)} | "
                         f"{np.median(both):.0f} | {np.percentile(both, 95):.0f} | {1000 * np.median(starts):.0f} | "
                         f"{1000 * np.median(ends):.0f} | {bias[0]:+.0f} / {bias[1]:+.0f} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
