"""How long SSML breaks last in the audio, and whether a break laid into the model's own durations sounds worse
than silence spliced into its audio.

Each of N held-out sentences gets one break of each length (``--breaks``) between two words near its middle,
where the text has no punctuation (so the comma ``duet.tts.pace`` puts there is exercised), and is spoken by the
model (seed = ``--seed`` + i) in two ways:

- durations: ``<speak>... <break time="T"/> ...</speak>``, the pause token's frames in the layout (``duet.tts.pace``),
  the audio as the model made it (``RetimeConfig.fit_pauses`` off);
- fitted: the same, then the quiet stretch the model made fitted to T in its middle (``duet.tts.pause_fit``, the
  default);
- splice: the same text with the comma and no break, then silence spliced into the middle of the quiet stretch
  between the two words, long enough that the stretch lasts T.

The pause is the quiet stretch between the two words by an energy threshold (``duet.eval.pauses``: 10 ms frames,
-40 dB under the clip's loudest), and its error is |measured - T| (target: within 60 ms). Both ways are scored by
Whisper WER against the sentence and by DNSMOS OVRL; the sentence spoken without any break is the reference row.
Pairs of sentences joined by a break (``S1 <break/> S2``: two pieces) are measured too: the silence between them
sized from word to word by the layout's timings (fitting off), or from the quiet measured at the pieces' edges
(fitted).

The sentences are the joe preset's test split (``timestamps_bench.held_out_sentences``).

``--tail`` measures instead why a break after the last word is silence appended to the audio rather than a
longer tail in the layout: each sentence is spoken with its end-of-text token's frames set to the break (a Gepard:
its duration predictor's output patched for the run), and the table counts the sentences that stopped within
0.3 s of the layout's end, against the plain layout.

    PYTHONPATH=src .venv/bin/python benchmarks/break_bench.py --model gepard-tiny --n 30 --breaks 0.3,1 \\
        --threads 1 --out benchmarks/results/break_bench.md
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path
from xml.sax.saxutils import escape

import numpy as np
from timestamps_bench import held_out_sentences


def break_place(text: str) -> int | None:
    """The whitespace word index k (a break before word k) nearest the middle whose word before ends in no
    punctuation; None for a sentence too short."""
    words = text.split()
    places = [k for k in range(2, len(words) - 1) if words[k - 1][-1].isalnum()]
    return min(places, key=lambda k: abs(k - len(words) / 2), default=None)


def spoken_index(text: str, k: int) -> int:
    """How many reported words come before whitespace word k (numbers may read as several)."""
    from duet.text.prompts import prepare_input
    from duet.text.tags import spoken_words

    return len(spoken_words(prepare_input(" ".join(text.split()[:k]))))


def splice(audio: np.ndarray, sample_rate: int, start: float, end: float, target: float) -> np.ndarray:
    """``audio`` with silence put in the middle of the quiet run between ``start`` and ``end`` so it lasts
    ``target``."""
    from duet.eval.pauses import quiet_runs

    runs = [(a, b) for a, b in quiet_runs(audio, sample_rate) if a <= end and b >= start]
    a, b = max(runs, key=lambda r: r[1] - r[0]) if runs else (start, end)
    extra = max(0.0, target - (b - a))
    at = int((a + b) / 2 * sample_rate)
    return np.concatenate([audio[:at], np.zeros(int(round(extra * sample_rate)), np.float32), audio[at:]])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gepard-tiny")
    p.add_argument("--n", type=int, default=30, help="held-out sentences")
    p.add_argument("--breaks", default="0.3,1", help="break lengths in seconds")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch threads")
    p.add_argument("--out", default=None)
    p.add_argument("--tail", action="store_true", help="measure a trailing break laid into the layout's tail")
    args = p.parse_args(argv)
    if args.tail:
        return tail_bench(args, argv)

    import torch

    import duet
    from duet.eval.pauses import pause_at
    from duet.metrics.asr import Transcriber
    from duet.metrics.dnsmos import DNSMOS
    from duet.metrics.wer import aggregate, word_error
    from duet.tts.speaker import Speaker

    if args.threads:
        torch.set_num_threads(args.threads)
    speaker = duet.load(args.model)
    # pauses as the layout puts them
    laid = Speaker(speaker.runtime, replace(speaker.config, retime=replace(speaker.config.retime, fit_pauses=False)))
    rate = speaker.sample_rate
    targets = [float(x) for x in args.breaks.split(",")]
    texts = [t for t in held_out_sentences(args.n * 2, args.seed) if break_place(t) is not None][: args.n]
    started = time.perf_counter()
    rows: dict[tuple[str, str], list[tuple[float, float, np.ndarray, str]]] = {}  # (where, method) -> items
    reported: dict[str, list[float]] = {}  # method -> |gap between the two words' timings - break|

    def add(where: str, method: str, pause: float, target: float, audio: np.ndarray, text: str) -> None:
        rows.setdefault((where, method), []).append((pause, target, audio, text))

    for i, text in enumerate(texts):
        seed = args.seed + i
        words = text.split()
        k = break_place(text)
        j = spoken_index(text, k)
        plain = speaker.speak(text, seed=seed)
        add("none", "plain", 0.0, 0.0, plain.audio, text)
        comma = " ".join(words[:k - 1] + [words[k - 1] + ","] + words[k:])
        reference = speaker.speak(comma, seed=seed)
        w = reference.words
        for target in targets:
            ssml = (f"<speak>{escape(' '.join(words[:k]))} <break time=\"{int(target * 1000)}ms\"/> "
                    f"{escape(' '.join(words[k:]))}</speak>")
            for method, by in (("durations", laid), ("fitted", speaker)):
                made = by.speak(ssml, seed=seed)
                before, after = made.words[j - 1], made.words[j]
                reported.setdefault(method, []).append(abs((after.start - before.end) - target))
                add(f"{target:g} s", method, pause_at(made.audio, rate, before.end, after.start), target,
                    made.audio, text)
            spliced = splice(reference.audio, rate, w[j - 1].end, w[j].start, target)
            add(f"{target:g} s", "splice", pause_at(spliced, rate, w[j - 1].end, w[j].start), target, spliced, text)
        print(f"{i + 1}/{len(texts)} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    for i in range(0, len(texts) - 1, 2):  # pairs: the break between two pieces
        first, second = texts[i], texts[i + 1]
        for target in targets:
            ssml = f"<speak>{escape(first)} <break time=\"{int(target * 1000)}ms\"/> {escape(second)}</speak>"
            for method, by in (("gap, layout", laid), ("gap, fitted", speaker)):
                made = by.speak(ssml, seed=args.seed + i)
                n = spoken_index(first, len(first.split()))
                before, after = made.words[n - 1], made.words[n]
                add(f"{target:g} s between sentences", method, pause_at(made.audio, rate, before.end, after.start),
                    target, made.audio, f"{first} {second}")
    generation = time.perf_counter() - started

    asr, dnsmos = Transcriber(), DNSMOS()
    lines = [f"`PYTHONPATH=src .venv/bin/python benchmarks/break_bench.py {shlex.join(argv or sys.argv[1:])}`", "",
             f"{len(texts)} held-out sentences (joe test split, seed {args.seed}), {args.model}, greedy. Pause: the "
             "quiet stretch between the two words (10 ms frames under -40 dB of the clip's loudest); error = "
             "|pause - break|, target within 60 ms. WER: Whisper tiny.en against the sentence (mean of "
             "per-sentence rates); OVRL: DNSMOS.", "",
             "| break | method | items | median pause | median error | p95 error | within 60 ms | WER | OVRL |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (where, method), items in rows.items():
        pauses = np.array([x[0] for x in items])
        errors = np.abs(pauses - np.array([x[1] for x in items]))
        wer = aggregate(word_error(text, asr.transcribe(audio, rate)) for _, _, audio, text in items).mean
        ovrl = np.mean([dnsmos.score(audio, rate).ovrl for _, _, audio, _ in items])
        timing = ("| - | - | - | - |" if method == "plain" else
                  f"| {1000 * np.median(pauses):.0f} ms | {1000 * np.median(errors):.0f} ms | "
                  f"{1000 * np.percentile(errors, 95):.0f} ms | {np.mean(errors <= 0.06):.0%} |")
        lines.append(f"| {where} | {method} | {len(items)} {timing} {100 * wer:.1f}% | {ovrl:.2f} |")
    lines += ["", f"Timings: the gap between the two words' reported timings is the break to within "
                  f"{1000 * max(reported['durations']):.2f} ms in all {len(reported['durations'])} sentences "
                  f"(durations); fitted, where they move with the audio, |gap - break| has median "
                  f"{1000 * np.median(reported['fitted']):.0f} ms and p95 "
                  f"{1000 * np.percentile(reported['fitted'], 95):.0f} ms. Generation {generation:.0f} s."]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


def tail_bench(args, argv) -> int:
    """``--tail``: the end-of-text token's frames set to each break length; does the model stop at the layout's end?"""
    import torch

    import duet

    if args.threads:
        torch.set_num_threads(args.threads)
    speaker = duet.load(args.model)
    runtime = speaker.runtime
    predict = runtime.model.duration.predict
    rate = speaker.codec.frame_rate
    texts = held_out_sentences(args.n, args.seed)
    lines = [f"`PYTHONPATH=src .venv/bin/python benchmarks/break_bench.py {shlex.join(argv or sys.argv[1:])}`", "",
             f"{len(texts)} held-out sentences, {args.model}: the end-of-text token's frames set to the break.", "",
             "| tail | stopped within 0.3 s of the layout's end | ran to the length bound | median overrun |",
             "|---|---:|---:|---:|"]
    for target in [0.0] + [float(x) for x in args.breaks.split(",")]:
        def patched(ids, lengths, speed=1.0, target=target):
            d = predict(ids, lengths, speed)
            if target:
                d[:, -2] = target * rate  # [SOT, text, EOT, SOS]: EOT is the silence after the text
            return d

        runtime.model.duration.predict = patched  # plain text: the runtime asks the predictor at every request
        good, bound, overruns = 0, 0, []
        for i, text in enumerate(texts):
            ids = torch.tensor([runtime.encode(text)])
            layout = float(patched(ids, torch.tensor([ids.shape[1]])).sum()) / rate
            speech = speaker.speak(text, seed=args.seed + i)
            overruns.append(speech.seconds - layout)
            good += abs(speech.seconds - layout) <= 0.3 and speech.ended == ("stop",)
            bound += "bound" in speech.ended
        runtime.model.duration.predict = predict
        lines.append(f"| {'predicted' if not target else f'{target:g} s'} | {good} / {len(texts)} | {bound} | "
                     f"{1000 * float(np.median(overruns)):+.0f} ms |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
