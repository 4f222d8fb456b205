"""Expressive control in a model's output: is the requested emotion heard, are the inline events there, and what
does it cost in words.

    PYTHONPATH=src .venv/bin/python benchmarks/expressive_model.py --model luna-tiny \
        --manifest X/manifest.jsonl --classifier styles.json [--sentences 12] [--steps 16] [--seed 0] \
        [--emotions neutral,happy,sad,angry,surprised,whisper] [--out DIR]

Held-out text: the first ``--sentences`` distinct sentences of the manifest's test split (tags removed), which no
reading in the train split holds. Each sentence is spoken once per emotion (``speak(emotion=...)``) and once more,
neutral, with one event tag written at a seeded inner word boundary (the events cycle through breath, cough,
laughter, sigh). Three measures, all by duet's own tools on the model's audio:

* **emotion**: the prosodic style classifier (``duet eval emotion-train`` on the recordings' train split) on each
  emotion's readings: accuracy per requested emotion, chance 1 / emotions;
* **events**: the event detector (``duet.eval.event_detect``) on the tagged readings and on the untagged neutral
  readings of the same sentences (whose detections are all false): a detection counts as found when its name is
  the tag's within the same utterance (the model's output has no reference times; the recordings' own score,
  ``duet eval events``, also checks the onset);
* **WER**: Whisper on the neutral readings (spoken words; tags are not words).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
from tqdm import tqdm

from duet.data.manifest import read_manifest
from duet.data.nonverbal_sounds import SOUNDS
from duet.eval.emotion import EmotionClassifier, accuracy
from duet.eval.event_detect import detect_events
from duet.eval.event_scores import match_events, total
from duet.eval.prosody import prosodic_features
from duet.metrics.asr import Transcriber
from duet.metrics.wer import word_error
from duet.text.tags import insert_tags, split_tags, spoken_words

STYLES = ("neutral", "happy", "sad", "angry", "surprised", "whisper")


def held_out_sentences(manifest: Path, n: int) -> list[str]:
    """The first ``n`` distinct spoken texts of the test split that the train split never reads."""
    rows = read_manifest(manifest)
    train = {split_tags(u.text).spoken for u in rows if u.split == "train"}
    out: list[str] = []
    for u in sorted((u for u in rows if u.split == "test"), key=lambda u: u.id):
        text = split_tags(u.text).spoken
        if text not in train and text not in out and len(spoken_words(text)) >= 4:
            out.append(text)
    return out[:n]


def tagged(text: str, event: str, rng: random.Random) -> str:
    """``text`` with ``event`` after one of its inner words (never before the first or after the last)."""
    n = len(spoken_words(text))
    return insert_tags(text, [(event, rng.randint(1, n - 1))])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="a shipped Luna name or an export directory")
    ap.add_argument("--manifest", required=True, type=Path, help="an expressive corpus manifest (its test split)")
    ap.add_argument("--classifier", required=True, type=Path, help="a file written by duet eval emotion-train")
    ap.add_argument("--sentences", type=int, default=12)
    ap.add_argument("--emotions", default=",".join(STYLES))
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None, help="directory for the audio and result.json")
    args = ap.parse_args(argv)

    from duet.tts import load

    speaker = load(args.model)
    classifier = EmotionClassifier.load(args.classifier)
    emotions = [e.strip() for e in args.emotions.split(",") if e.strip()]
    texts = held_out_sentences(args.manifest, args.sentences)
    if not texts:
        print(f"{args.manifest}: no held-out test sentences", file=sys.stderr)
        return 1
    rng = random.Random(args.seed)
    asr = Transcriber()

    def speak(text: str, emotion: str, k: int) -> np.ndarray:
        audio = speaker.speak(text, emotion=emotion, seed=args.seed + k, steps=args.steps).audio
        if args.out:
            (args.out / "wavs").mkdir(parents=True, exist_ok=True)
            sf.write(args.out / "wavs" / f"{k:03d}-{emotion}.wav", audio, speaker.sample_rate)
        return audio

    truth, predicted, wers = [], [], []
    plain: list[np.ndarray] = []
    jobs = [(text, emotion) for text in texts for emotion in emotions]
    for k, (text, emotion) in enumerate(tqdm(jobs, desc="emotions", unit="utt")):
        audio = speak(text, emotion, k)
        truth.append(emotion)
        predicted.append(classifier.predict(prosodic_features(audio, speaker.sample_rate,
                                                              len(spoken_words(text)))[None])[0])
        if emotion == "neutral":
            plain.append(audio)
            wers.append(word_error(text, asr.transcribe(audio, speaker.sample_rate)))
    emotion_result = accuracy(truth, predicted)

    anywhere = math.inf  # within the utterance
    counts, per_event = [], {name: [] for name in SOUNDS}
    for i, text in enumerate(tqdm(texts, desc="events", unit="utt")):
        event = SOUNDS[i % len(SOUNDS)]
        audio = speak(tagged(text, event, rng), "neutral", len(jobs) + i)
        found = detect_events(audio, speaker.sample_rate)
        reference = [(event, 0.0, len(audio) / speaker.sample_rate)]
        counts.append(match_events(reference, found, anywhere))
        per_event[event].append(match_events(reference, [d for d in found if d[0] == event], anywhere))
    for audio in plain:  # untagged readings: every detection is a false one
        counts.append(match_events([], detect_events(audio, speaker.sample_rate), anywhere))
    events = total(counts)

    wer = sum(r.errors for r in wers) / max(1, sum(r.ref_len for r in wers))
    lines = [f"model {args.model}, {len(texts)} held-out sentences, S = {args.steps}, seed {args.seed}", "",
             "| requested emotion | recognised | readings | accuracy |", "| --- | ---: | ---: | ---: |"]
    for label in emotions:
        c, n = emotion_result.per_label.get(label, (0, 0))
        lines.append(f"| {label} | {c} | {n} | {100 * c / max(n, 1):.1f}% |")
    lines += [f"| all | {round(emotion_result.overall * len(truth))} | {len(truth)} | "
              f"{100 * emotion_result.overall:.1f}% |", f"chance: {100 / len(classifier.labels):.1f}% ({len(classifier.labels)} styles)", "",
              "| events | tags | detections | precision | recall | F1 |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, c in [*((n, total(v)) for n, v in per_event.items() if v), ("all (tagged and untagged)", events)]:
        lines.append(f"| {name} | {c.references} | {c.detections} | {c.precision:.3f} | {c.recall:.3f} | {c.f1:.3f} |")
    lines += ["", f"WER of the neutral readings: {100 * wer:.2f}% ({len(wers)} sentences)"]
    print("\n".join(lines))
    if args.out:
        payload = {"model": args.model, "sentences": texts, "steps": args.steps, "seed": args.seed,
                   "emotion_accuracy": emotion_result.overall,
                   "per_emotion": {k: {"correct": c, "total": n} for k, (c, n) in emotion_result.per_label.items()},
                   "confusion": emotion_result.confusion,
                   "events": {"references": events.references, "detections": events.detections,
                              "precision": events.precision, "recall": events.recall, "f1": events.f1},
                   "wer": wer}
        (args.out / "result.json").write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        (args.out / "result.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
