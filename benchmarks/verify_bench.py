"""What ``duet speak --verify`` buys and costs: sentences with a word error, WER and wall time, with and without.

N held-out sentences (the joe preset's test split, ``timestamps_bench.held_out_sentences``), each spoken by the
model with seed ``--seed`` + i, once as ``speak`` makes it and once through ``duet.tts.verify.verified_speech``
with Whisper (``duet.metrics.clip.ClipScorer``, the recogniser ``duet speak --verify`` uses): a piece heard with
a WER above ``--max-wer`` is made again (sampled: retries of a greedy model sample) up to ``--tries`` makings.
The judge is ``--asr-model`` (as ``duet speak --verify-asr``: the bundled Whisper tiny.en by default, ``base`` for
OpenAI's Whisper base from the eval extra, or a CTranslate2 Whisper directory); it reads Whisper's transcript with
``--normalizer`` (default ``whisper``: Whisper's English text normaliser, as ``duet speak --verify`` does; ``duet``:
the Seed-TTS-eval normalisation of ``duet eval``). Both are scored by the same Whisper against the sentence, under
both normalisations (a row each, so neither hides the other). That is also the recogniser verification selected
with, so the "after" numbers are what a listener gets only as far as that Whisper stands in for a listener. For the
judge's own floor, the recordings row scores the corpus voice the shipped models learnt from (Piper joe,
``duet.data.sources.piper``, rendered as the corpus renders it) on the same sentences, with the same Whisper.

    PYTHONPATH=src .venv/bin/python benchmarks/verify_bench.py --model gepard-tiny --n 40 --tries 3 --threads 1 \\
        --out benchmarks/results/verify_bench.md
    PYTHONPATH=src .venv/bin/python benchmarks/verify_bench.py --model gepard-tiny --n 40 --tries 3 --threads 1 \\
        --asr-model base
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from timestamps_bench import held_out_sentences


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gepard-tiny")
    p.add_argument("--n", type=int, default=40)
    p.add_argument("--tries", type=int, default=3)
    p.add_argument("--max-wer", type=float, default=0.0)
    p.add_argument("--normalizer", default="whisper", help="how the judge reads text: whisper or duet")
    p.add_argument("--asr-model", default=None, metavar="DIR",
                   help="the Whisper that verifies and scores: a CTranslate2 directory, 'base' or 'tiny.en' (default)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)

    import torch

    import duet
    from duet.data.sources.piper import item_seed, load_voice
    from duet.metrics.asr import resolve_model_path
    from duet.metrics.clip import ClipScoreConfig, ClipScorer
    from duet.metrics.wer import aggregate, word_error
    from duet.text.phonemes import phonemize_many
    from duet.tts.verify import VerifyConfig, verified_speech

    if args.threads:
        torch.set_num_threads(args.threads)
    asr_dir = str(resolve_model_path(args.asr_model))  # a bad --asr-model is an error before any model loads
    judge = {None: "Whisper tiny.en", "tiny.en": "Whisper tiny.en", "base": "Whisper base"}.get(args.asr_model,
                                                                                               f"Whisper {asr_dir}")
    speaker = duet.load(args.model)
    scorer = ClipScorer(ClipScoreConfig(asr_model=asr_dir, normalizer=args.normalizer))
    texts = held_out_sentences(args.n, args.seed)
    config = VerifyConfig(max_wer=args.max_wer, tries=args.tries)
    scorer.score(speaker.speak("Warm up.", seed=0).audio, speaker.sample_rate, "Warm up.")  # load Whisper first

    plain_s = verify_s = audio_s = 0.0
    normalizers = ("duet", "whisper")
    before: dict[str, list] = {n: [] for n in normalizers}
    after: dict[str, list] = {n: [] for n in normalizers}
    makings = []
    for i, text in enumerate(texts):
        t0 = time.perf_counter()
        plain = speaker.speak(text, seed=args.seed + i)
        t1 = time.perf_counter()
        verified, scores = verified_speech(speaker, text, scorer, config, seed=args.seed + i)
        t2 = time.perf_counter()
        plain_s, verify_s, audio_s = plain_s + t1 - t0, verify_s + t2 - t1, audio_s + plain.seconds
        heard = (scorer.score(plain.audio, plain.sample_rate, text).transcript,
                 scorer.score(verified.audio, verified.sample_rate, text).transcript)
        for n in normalizers:
            before[n].append(word_error(text, heard[0], n))
            after[n].append(word_error(text, heard[1], n))
        makings.append(sum(s.tries for s in scores))
        judged = args.normalizer
        print(f"{i + 1}/{len(texts)}: {before[judged][-1].rate:.2f} -> {after[judged][-1].rate:.2f} in "
              f"{makings[-1]} makings", file=sys.stderr)

    recordings: dict[str, list] = {n: [] for n in normalizers}  # the corpus voice on the same sentences
    voice = load_voice()
    for text, ipa in zip(texts, phonemize_many(texts, voice.config.espeak_voice)):
        made = voice.synthesize(ipa, item_seed(0, text))
        heard_text = scorer.score(made.audio, made.sample_rate, text).transcript
        for n in normalizers:
            recordings[n].append(word_error(text, heard_text, n))

    def row(name: str, normalizer: str, rates, seconds: float | None = None) -> str:
        agg = aggregate(rates)
        wrong = sum(r.errors > 0 for r in rates)
        timing = "- | - |" if seconds is None else f"{seconds:.1f} s | {seconds / audio_s:.2f} |"
        return (f"| {name} | {normalizer} | {wrong} / {len(rates)} ({wrong / len(rates):.0%}) | "
                f"{100 * agg.mean:.1f}% | {100 * agg.pooled:.1f}% | {timing}")

    lines = [f"`PYTHONPATH=src .venv/bin/python benchmarks/verify_bench.py {shlex.join(argv or sys.argv[1:])}`", "",
             f"{len(texts)} held-out sentences (joe test split, seed {args.seed}), {args.model}; verify: up to "
             f"{args.tries} makings while {judge} hears a WER above {args.max_wer:g} (read with the "
             f"{args.normalizer} normaliser). Scored by the same Whisper against the sentence, read with each "
             f"normaliser. {audio_s:.0f} s of audio.", "",
             "| | scored with | sentences with a word error | WER (mean) | WER (pooled) | wall time "
             "| per second of audio |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for n in normalizers:
        lines += [row("speak", n, before[n], plain_s),
                  row(f"speak --verify (tries {args.tries})", n, after[n], verify_s),
                  row("recordings (Piper joe)", n, recordings[n])]
    lines += ["", f"Makings: {sum(makings)} for {len(texts)} sentences ({sum(m > 1 for m in makings)} made "
                  f"again); wall time {verify_s / plain_s:.1f}x that of speak (Whisper's transcriptions included)."]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
