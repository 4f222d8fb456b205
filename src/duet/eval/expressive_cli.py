"""`duet eval emotion-train`, `duet eval emotion` and `duet eval events`: flags -> ``duet.eval.expressive_manifest``,
``duet.eval.emotion`` and ``duet.eval.event_detect`` over an expressive corpus manifest."""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def register(evsub) -> None:
    train = evsub.add_parser("emotion-train", help="train duet's prosodic emotion classifier on a labelled manifest",
                             description="Rows with an emotion (an expressive corpus) of --split; saved as JSON.")
    train.add_argument("--manifest", required=True, type=Path)
    train.add_argument("--split", default="train", help="split to train on ('all' = every row)")
    train.add_argument("--out", required=True, type=Path, help="classifier file (JSON)")
    train.add_argument("--limit", type=int, default=None)
    train.set_defaults(func=run_emotion_train)

    test = evsub.add_parser("emotion", help="accuracy of the emotion classifier on a labelled manifest, per emotion")
    test.add_argument("--manifest", required=True, type=Path)
    test.add_argument("--classifier", required=True, type=Path, help="a file written by emotion-train")
    test.add_argument("--split", default="test", help="split to score ('all' = every row)")
    test.add_argument("--limit", type=int, default=None)
    test.add_argument("--out", type=Path, default=None, help="also write the result as JSON")
    test.set_defaults(func=run_emotion)

    events = evsub.add_parser("events", help="precision / recall / F1 of duet's event detector against the tags")
    events.add_argument("--manifest", required=True, type=Path)
    events.add_argument("--split", default="test", help="split to score ('all' = every row)")
    events.add_argument("--tolerance", type=float, default=0.25, help="onset collar in seconds")
    events.add_argument("--limit", type=int, default=None)
    events.add_argument("--out", type=Path, default=None, help="also write the result as JSON")
    events.set_defaults(func=run_events)


def _split(name: str) -> str | None:
    return None if name == "all" else name


def _rows(args: argparse.Namespace):
    from duet.errors import DuetError
    from duet.eval.expressive_manifest import labelled

    rows = labelled(args.manifest, _split(args.split), args.limit)
    if not rows:
        raise DuetError(f"{args.manifest}: no rows with an emotion in split {args.split!r} (an expressive corpus?)")
    return rows


def run_emotion_train(args: argparse.Namespace) -> int:
    from duet.eval.emotion import EmotionClassifier, accuracy
    from duet.eval.expressive_manifest import features_of

    rows = _rows(args)
    x = features_of(args.manifest, rows, progress=True)
    clf = EmotionClassifier.fit(x, [u.emotion for u in rows])
    clf.save(args.out)
    fit = accuracy([u.emotion for u in rows], clf.predict(x))
    print(f"{len(rows)} readings, {len(clf.labels)} emotions; training accuracy {100 * fit.overall:.1f}%; wrote {args.out}")
    return 0


def run_emotion(args: argparse.Namespace) -> int:
    from duet.eval.emotion import EmotionClassifier, accuracy
    from duet.eval.expressive_manifest import features_of

    clf = EmotionClassifier.load(args.classifier)
    rows = _rows(args)
    result = accuracy([u.emotion for u in rows], clf.predict(features_of(args.manifest, rows, progress=True)))
    lines = ["| emotion | correct | readings | accuracy |", "| --- | ---: | ---: | ---: |"]
    for label, (c, n) in result.per_label.items():
        lines.append(f"| {label} | {c} | {n} | {100 * c / n:.1f}% |")
    lines.append(f"| all | {round(result.overall * len(rows))} | {len(rows)} | {100 * result.overall:.1f}% |")
    print("\n".join(lines) + f"\nchance: {100 / len(clf.labels):.1f}%")
    if args.out:
        payload = {"manifest": str(args.manifest), "split": args.split, "accuracy": result.overall,
                   "per_emotion": {k: {"correct": c, "total": n} for k, (c, n) in result.per_label.items()},
                   "confusion": result.confusion}
        args.out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    return 0


def run_events(args: argparse.Namespace) -> int:
    from duet.eval.expressive_manifest import event_report

    report = event_report(args.manifest, _rows(args), args.tolerance, progress=True)
    lines = ["| events | references | detections | precision | recall | F1 |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    named = [*report.per_event.items(), ("all (names must match)", report.overall),
             ("all (any name: located)", report.located)]
    for name, c in named:
        lines.append(f"| {name} | {c.references} | {c.detections} | {c.precision:.3f} | {c.recall:.3f} | {c.f1:.3f} |")
    print("\n".join(lines) + f"\nonset tolerance {args.tolerance} s")
    if args.out:
        payload = {name: {"references": c.references, "detections": c.detections, "precision": c.precision,
                          "recall": c.recall, "f1": c.f1} for name, c in named}
        args.out.write_text(json.dumps({"manifest": str(args.manifest), "split": args.split,
                                        "tolerance": args.tolerance, "scores": payload}, indent=2) + "\n",
                            encoding="utf-8")
    return 0
