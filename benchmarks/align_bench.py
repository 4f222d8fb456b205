"""How close are Luna's duration targets to where words really start? Festival's own timing is the reference.

For Festival utterances of the corpus (voices at their natural rate, so a re-synthesis reproduces the corpus audio:
checked by its length), Festival prints each segment's end time; a word starts where its first segment starts.
The same words in duet's token space (the phoneme tokenizer's IPA words; an utterance is compared only when
espeak-ng and Festival agree on the number of words) start where the durations of the tokens before them add up to.
Two sets of durations are compared side by side: the character-proportional spread (``duet.data.token_rows``, what
luna-tiny was trained on) and a forced alignment (``duet data align``, ``duet.data.align``).

    PYTHONPATH=src .venv/bin/python benchmarks/align_bench.py --alignments data/base/align-luna-tiny.jsonl \\
        --tokenizer checkpoints/luna-tiny/tokenizer.json --per-speaker 40
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf

SPEAKERS = {"festival-kal": "kal_diphone", "festival-ked": "ked_diphone", "festival-slt": "cmu_us_slt_arctic_hts"}


def festival_word_starts(voice: str, texts: list[str]) -> list[tuple[list[float], float]]:
    """Each text -> (start time of each word, s; length of the re-synthesised audio, s), one Festival process."""
    with tempfile.TemporaryDirectory() as tmp:
        lines = [f"(voice_{voice})"]
        for i, text in enumerate(texts):
            quoted = '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
            lines += [f'(format t "UTT {i}\\n")', f"(set! u (utt.synth (Utterance Text {quoted})))",
                      '(mapcar (lambda (s) (format t "SEG %s %f %s\\n" (item.name s) (item.feat s "end") '
                      '(item.feat s "R:SylStructure.parent.parent.name"))) (utt.relation.items u \'Segment))',
                      f'(utt.save.wave u "{tmp}/{i}.wav" \'riff)']
        script = Path(tmp) / "timing.scm"
        script.write_text("\n".join(lines) + "\n")
        out = subprocess.run(["festival", "-b", str(script)], capture_output=True, text=True, timeout=600).stdout
        segments: dict[int, list[tuple[str, float, str]]] = {}
        current = -1
        for line in out.splitlines():
            if line.startswith("UTT "):
                current = int(line.split()[1])
                segments[current] = []
            elif line.startswith("SEG ") and current >= 0:
                _, name, end, word = line.split(maxsplit=3)
                segments[current].append((name, float(end), word))
        results = []
        for i in range(len(texts)):
            starts, prev_end, last_word = [], 0.0, None
            for name, end, word in segments.get(i, []):
                if name == "pau":
                    last_word = None
                elif word != last_word:  # a word's first segment starts where the one before it ended
                    starts.append(prev_end)
                    last_word = word
                prev_end = end
            info = sf.info(f"{tmp}/{i}.wav") if Path(f"{tmp}/{i}.wav").is_file() else None
            results.append((starts, info.duration if info else -1.0))
        return results


def token_word_starts(tokenizer, text: str) -> list[int] | None:
    """Index of the first token of each IPA word of ``text`` in the wrapped [SOT, tokens..., EOT] sequence."""
    from duet.text.phonemes import surface
    from duet.text.prompts import prepare_input

    prepared = prepare_input(text, "en", True)
    ipa = surface(tokenizer, prepared)
    enc = tokenizer(prepared, add_special_tokens=False, return_offsets_mapping=True)
    word_of_char, w, in_word = [], -1, False
    for ch in ipa:
        if ch.isspace():
            in_word = False
            word_of_char.append(None)
        else:
            if not in_word:
                w, in_word = w + 1, True
            word_of_char.append(w)
    firsts: dict[int, int] = {}
    for t, (a, b) in enumerate(enc["offset_mapping"]):
        for c in range(a, b):
            if word_of_char[c] is not None:
                firsts.setdefault(word_of_char[c], t + 1)  # +1: SOT
                break
    return [firsts[k] for k in sorted(firsts)] if firsts else None


def main(argv: list[str] | None = None) -> int:
    from duet.data.align import read_alignments
    from duet.data.manifest import audio_path, read_manifest
    from duet.data.token_rows import duration_targets, token_weights
    from duet.text import get_tokenizer
    from duet.text.phonemes import surface
    from duet.text.prompts import prepare_input

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--alignments", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--manifest", default="data/base/manifest.jsonl")
    p.add_argument("--per-speaker", type=int, default=40)
    p.add_argument("--frame-rate", type=float, default=25.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    tokenizer = get_tokenizer(args.tokenizer)
    aligned = read_alignments(args.alignments, args.tokenizer)
    entries = [e for e in read_manifest(args.manifest) if e.speaker in SPEAKERS and e.id in aligned]
    rows, errors = [], {"spread": [], "aligned": []}
    for speaker, voice in SPEAKERS.items():
        mine = sorted((e for e in entries if e.speaker == speaker), key=lambda e: e.id)
        chosen = random.Random(f"{args.seed}:{speaker}").sample(mine, min(args.per_speaker, len(mine)))
        truth = festival_word_starts(voice, [e.text for e in chosen])
        compared = words = 0
        per = {"spread": [], "aligned": []}
        for e, (starts, seconds) in zip(chosen, truth):
            if abs(seconds - sf.info(audio_path(args.manifest, e)).duration) > 0.02:
                continue  # not the corpus audio (a non-deterministic re-synthesis)
            firsts = token_word_starts(tokenizer, e.text)
            if firsts is None or len(firsts) != len(starts):
                continue
            durations = np.array(aligned[e.id])
            prepared = prepare_input(e.text, "en", True)
            enc = tokenizer(prepared, add_special_tokens=False, return_offsets_mapping=True)
            spread = np.array(duration_targets(token_weights(surface(tokenizer, prepared), enc["offset_mapping"]),
                                               int(durations.sum())))
            truth_frames = np.array(starts) * args.frame_rate
            for name, d in (("spread", spread), ("aligned", durations)):
                cum = np.concatenate(([0], np.cumsum(d)))  # frame where token i starts
                err = np.abs(cum[firsts] - truth_frames)
                per[name] += err.tolist()
                errors[name] += err.tolist()
            compared += 1
            words += len(starts)
        rows.append((speaker, len(chosen), compared, words, per))
    print(f"Word start error against Festival's timing, in {1000 / args.frame_rate:.0f} ms frames (mean | median | "
          "share within 1 frame | within 2 frames)\n")
    print("| voice | utterances | compared | words | spread | aligned |")
    print("|---|---:|---:|---:|---|---|")

    def cell(e: list[float]) -> str:
        a = np.array(e)
        return (f"{a.mean():.2f} / {np.median(a):.1f} / {(a <= 1).mean():.0%} / {(a <= 2).mean():.0%}"
                if len(a) else "-")

    for speaker, n, compared, words, per in rows:
        print(f"| {speaker} | {n} | {compared} | {words} | {cell(per['spread'])} | {cell(per['aligned'])} |")
    total = sum(r[3] for r in rows)
    print(f"| all | {sum(r[1] for r in rows)} | {sum(r[2] for r in rows)} | {total} | {cell(errors['spread'])} | "
          f"{cell(errors['aligned'])} |")
    header = json.loads(Path(args.alignments).read_text().splitlines()[0])
    print(f"\nalignments: {args.alignments} (EM rounds {header.get('rounds')}, log-likelihood per frame "
          f"{header.get('log_lik')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
