"""Do the synthesisers' own word timing and duet's forced aligner agree? Word start times, side by side.

Every corpus utterance carries the timing its synthesiser reported (``duet.data.timing``: Piper's phone durations,
Festival's and Flite's segments). ``duet data align`` (``duet.data.align``) finds an alignment from the audio
alone. For a sample of utterances per voice, each word's start is read from both: from the timing sidecar's words,
and from the aligner's token durations (a word starts where the durations of the tokens before its first token
add up to, SOT included). Words are the phoneme tokenizer's IPA words; an utterance is compared only when their
number equals the sidecar's.

    PYTHONPATH=src .venv/bin/python benchmarks/timing_bench.py --manifest ~/.cache/duet/corpora/joe/manifest.jsonl \\
        --shards ~/.cache/duet/corpora/joe/codes-duet-rvq --alignments ~/.cache/duet/align/joe-ipa.jsonl \\
        --tokenizer ~/.cache/duet/tokenizers/joe-ipa-320.json --per-speaker 200 --out benchmarks/results/timing_bench.md
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np


def aligner_word_starts(durations: list[int], offsets: list[tuple[int, int]], ipa: str, frame_rate: float,
                        ) -> list[float]:
    """Durations of [SOT, tokens..., EOT] + each token's character offsets into ``ipa`` -> word starts (s)."""
    ends = np.cumsum(durations)  # ends[i] = end of wrapped token i; token j of the text is wrapped token j + 1
    starts, seen = [], -1
    for j, (a, _) in enumerate(offsets):
        word = ipa[:a].count(" ") if a <= len(ipa) else len(ipa.split()) - 1
        if word > seen:
            starts.append(float(ends[j]) / frame_rate)  # the end of everything before token j
            seen = word
    return starts


def main(argv: list[str] | None = None) -> int:
    from duet.data.align import read_alignments
    from duet.data.manifest import read_manifest
    from duet.data.shards import CodeShards
    from duet.data.timing import read_timing, timing_path
    from duet.data.token_rows import LunaDataConfig
    from duet.luna.data import LunaData
    from duet.text import get_tokenizer
    from duet.text.phonemes import surface

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--manifest", required=True)
    p.add_argument("--shards", required=True)
    p.add_argument("--alignments", required=True, help="from duet data align with --tokenizer")
    p.add_argument("--tokenizer", required=True, help="a phoneme tokenizer.json")
    p.add_argument("--per-speaker", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the table (markdown) here too")
    args = p.parse_args(argv)

    tokenizer = get_tokenizer(args.tokenizer)
    aligned = read_alignments(args.alignments, args.tokenizer)
    shards = CodeShards(args.shards)
    entries = {e.id: e for e in read_manifest(args.manifest)}
    items = LunaData.from_shards(shards, args.manifest, tokenizer, LunaDataConfig(), "train").items
    by_speaker: dict[str, list] = defaultdict(list)
    for it in items:
        if it.id in aligned:
            by_speaker[entries[it.id].speaker].append(it)
    root = Path(args.manifest).parent
    rows = []
    for speaker, its in sorted(by_speaker.items()):
        random.Random(f"{args.seed}:{speaker}").shuffle(its)
        errors, compared, tried = [], 0, 0
        for it in its[: args.per_speaker]:
            path = timing_path(root / entries[it.id].path)
            if not path.is_file():
                continue
            tried += 1
            words = read_timing(path).words
            ipa = surface(tokenizer, it.text)
            if len(ipa.split()) != len(words):
                continue
            offsets = tokenizer(it.text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
            starts = aligner_word_starts(list(aligned[it.id]), offsets, ipa, shards.frame_rate)
            if len(starts) != len(words):
                continue
            compared += 1
            errors += [abs(a - w[1]) * shards.frame_rate for a, w in zip(starts, words)]
        if errors:
            rows.append((speaker, tried, compared, errors))
    frame_ms = 1000 / shards.frame_rate
    lines = [f"Word start |aligner - synthesiser| in {frame_ms:.0f} ms frames "
             "(mean / median / share within 1 frame / within 2 frames)", "",
             "| voice | utterances | compared | words | error |", "|---|---:|---:|---:|---|"]
    everything = []
    for speaker, tried, compared, errors in rows:
        everything += errors
        lines.append(f"| {speaker} | {tried} | {compared} | {len(errors)} | {_summary(errors)} |")
    if len(rows) > 1:
        lines.append(f"| all | {sum(r[1] for r in rows)} | {sum(r[2] for r in rows)} | {len(everything)} | "
                     f"{_summary(everything)} |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        command = "PYTHONPATH=src .venv/bin/python benchmarks/timing_bench.py " + " ".join(sys.argv[1:])
        Path(args.out).write_text(f"`{command}`\n\n{text}\n")
    return 0


def _summary(errors: list[float]) -> str:
    e = np.asarray(errors)
    return (f"{e.mean():.2f} / {statistics.median(errors):.2f} / {100 * (e <= 1).mean():.0f}% / "
            f"{100 * (e <= 2).mean():.0f}%")


if __name__ == "__main__":
    sys.exit(main())
