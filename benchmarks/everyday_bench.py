"""What Whisper hears when a model speaks everyday sentences: the first-ten-seconds check, as a table.

    python benchmarks/everyday_bench.py --model gepard-tiny [--model DIR ...] [--seeds 0,1,2] [--temperature T]
        [--out benchmarks/results/everyday_bench.md]

Each model (a shipped name or an exported directory, through ``duet.load``) speaks each sentence once per seed;
Whisper tiny.en (the bundled evaluation ASR) transcribes it; the table shows the transcript of the first seed and
the WER (Seed-TTS-eval normalisation) averaged over seeds, and the last row the mean. The sentences are in no corpus
(the everyday register's generator leaves them out): everyday phrases a newcomer would try first.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from duet.data.everyday import PROBES as SENTENCES  # never planned into a corpus (duet.data.everyday)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", required=True, help="shipped model name or directory (repeatable)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--temperature", type=float, default=None, help="sampling temperature (default: the model's)")
    p.add_argument("--out", default=None, help="also write the table (markdown) here")
    args = p.parse_args(argv)

    import duet
    from duet.metrics.asr import Transcriber
    from duet.metrics.wer import word_error

    seeds = [int(s) for s in args.seeds.split(",")]
    asr = Transcriber()
    lines = [f"`python {' '.join(shlex.quote(a) for a in ['benchmarks/everyday_bench.py', *sys.argv[1:]])}`", ""]
    for name in args.model:
        speaker = duet.load(name)
        options = {} if args.temperature is None else {"temperature": args.temperature}
        lines += [f"### {name}", "", "| text | Whisper hears (seed %d) | WER (mean of %d seeds) |" % (seeds[0], len(seeds)),
                  "| --- | --- | ---: |"]
        total = 0.0
        for text in SENTENCES:
            rates, heard = [], None
            for seed in seeds:
                speech = speaker.speak(text, seed=seed, **options)
                hyp = asr.transcribe(speech.audio, speech.sample_rate)
                heard = hyp if heard is None else heard
                rates.append(word_error(text, hyp).rate)
            wer = sum(rates) / len(rates)
            total += wer
            lines.append(f"| {text} | {heard} | {100 * wer:.0f}% |")
        lines += [f"| mean | | {100 * total / len(SENTENCES):.0f}% |", ""]
    table = "\n".join(lines)
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
